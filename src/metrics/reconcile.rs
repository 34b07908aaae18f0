//! The reconcile runs' series, registered only for the endpoints with an
//! `[endpoint.reconcile]` ([`Metrics::reconcile_on`]), set at each scrape from the last run
//! each endpoint kept in the store ([`crate::store::LastRun`]: the schedule's, another
//! instance's or a command's, alike):
//!
//! - `portaria_reconcile_last_run_timestamp_seconds{endpoint}`: when it started (0: none yet);
//! - `portaria_reconcile_missing{endpoint}`: what the gateway gave up on that portaria had
//!   never stored, as that run found it;
//! - `portaria_reconcile_recovered{endpoint}`: how many of those came back;
//! - `portaria_reconcile_ok{endpoint}`: 1 when nothing was left missing and nothing failed.
//!
//! Runs that could not be read (the store did not answer) leave the series out of that
//! scrape, as the queue gauges.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::{EndpointLabel, Metrics, label};
use crate::store::LastRun;

/// Handles on the runs' series, and the endpoints they are for.
pub(super) struct ReconcileSeries {
    endpoints: Vec<String>,
    last_run: Family<EndpointLabel, Gauge>,
    missing: Family<EndpointLabel, Gauge>,
    recovered: Family<EndpointLabel, Gauge>,
    ok: Family<EndpointLabel, Gauge>,
}

impl Metrics {
    /// Creates the runs' series of `endpoints`, before the `Metrics` is shared. None: no
    /// endpoint reconciles, and scrapes read no run.
    pub fn reconcile_on(&mut self, endpoints: Vec<String>) {
        if endpoints.is_empty() {
            return;
        }
        let series = ReconcileSeries {
            endpoints,
            last_run: Family::default(),
            missing: Family::default(),
            recovered: Family::default(),
            ok: Family::default(),
        };
        let registry = &mut self.registry;
        let families = [
            (
                "reconcile_last_run_timestamp_seconds",
                "When the endpoint's last reconcile run started (unix seconds; 0: none yet)",
                &series.last_run,
            ),
            (
                "reconcile_missing",
                "Events the gateway gave up on that portaria had never stored, as the last run found them",
                &series.missing,
            ),
            (
                "reconcile_recovered",
                "Of those, the ones the last run got back (resent by the gateway or stored from its API)",
                &series.recovered,
            ),
            (
                "reconcile_ok",
                "1 when the last run left nothing missing and had no error, else 0",
                &series.ok,
            ),
        ];
        for (name, help, family) in families {
            registry.register(name, help, family.clone());
        }
        self.reconcile = Some(series);
    }

    /// Whether scrapes need the runs (some endpoint reconciles).
    pub fn reconciles(&self) -> bool {
        self.reconcile.is_some()
    }

    /// Sets the runs' series from `runs`, or leaves them out (None: not read in time).
    pub(super) fn set_reconcile(&self, runs: Option<&[LastRun]>) {
        let Some(series) = &self.reconcile else {
            return;
        };
        let families = [
            &series.last_run,
            &series.missing,
            &series.recovered,
            &series.ok,
        ];
        let Some(runs) = runs else {
            families.iter().for_each(|f| f.clear());
            return;
        };
        for name in &series.endpoints {
            let run = runs.iter().find(|r| &r.endpoint == name);
            let label = label(name);
            let at = run.and_then(|r| r.at_ms).unwrap_or(0) / 1000;
            series.last_run.get_or_create(&label).set(at);
            let missing = run.map_or(0, |r| r.missing.len() as i64);
            series.missing.get_or_create(&label).set(missing);
            let recovered = run.map_or(0, |r| r.recovered as i64);
            series.recovered.get_or_create(&label).set(recovered);
            series
                .ok
                .get_or_create(&label)
                .set(run.is_some_and(|r| r.ok) as i64);
        }
    }
}
