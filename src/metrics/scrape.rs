//! [`Metrics::render`]: one scrape of `/metrics`. The duplicate ratios are read from their
//! windows and the queue gauges set from what the database said at this scrape
//! ([`crate::store::Store::queue_stats`]), then the registry is written out in the Prometheus
//! text format; one scrape at a time.

use std::collections::HashMap;
use std::sync::PoisonError;

use prometheus_client::encoding::prometheus_text;

use super::{EndpointSeries, Metrics, label};
use crate::store::{LastRun, QueueStats};

impl Metrics {
    /// The text of one scrape. `queue` is what the database said, or None if it could not be
    /// read in time: the queue gauges are then left out rather than shown stale.
    /// `runs`: each endpoint's last reconcile run, when [`Metrics::reconciles`] (else None).
    pub fn render(
        &self,
        queue: Option<&[QueueStats]>,
        runs: Option<&[LastRun]>,
        now_ms: i64,
    ) -> String {
        let _one_scrape = self.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.now_secs();
        let endpoints = self
            .endpoints
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        for series in endpoints.values() {
            let ratio = series
                .duplicates
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ratio(now);
            self.duplicate_ratio
                .get_or_create(&label(&series.name))
                .set(ratio);
        }
        self.set_queue(&endpoints, queue, now_ms);
        self.set_reconcile(runs);
        drop(endpoints);
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// Sets the queue gauges of every configured endpoint; events stored under a name that is
    /// no longer configured are left out (their name is not ours to label with any more).
    fn set_queue(
        &self,
        endpoints: &HashMap<String, EndpointSeries>,
        queue: Option<&[QueueStats]>,
        now_ms: i64,
    ) {
        let Some(queue) = queue else {
            self.pending.clear();
            self.oldest_pending_age.clear();
            self.dead.clear();
            return;
        };
        for name in endpoints.keys() {
            let stats = queue.iter().find(|s| &s.endpoint == name);
            let pending = stats.map_or(0, |s| s.pending);
            let dead = stats.map_or(0, |s| s.dead);
            let age = stats
                .and_then(|s| s.oldest_pending_ms)
                .map_or(0.0, |at| (now_ms - at).max(0) as f64 / 1000.0);
            let label = label(name);
            self.pending.get_or_create(&label).set(pending as i64);
            self.dead.get_or_create(&label).set(dead as i64);
            self.oldest_pending_age.get_or_create(&label).set(age);
        }
    }
}
