//! [`Metrics::facts`]: the running counts of each endpoint that the alerts task watches
//! (accepted, storage errors, slow deliveries, the duplicate window), read from the same
//! series `/metrics` shows; no series of their own but the slow-delivery and drift counts.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::{ACCEPTED, EndpointSeries, Metrics};

/// What the alerts task reads of one endpoint: running counts since its series were created
/// (a reload that re-creates them starts `slow_deliveries` again) and the duplicate window now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointFacts {
    pub endpoint: String,
    /// Requests that stored a new event.
    pub accepted: u64,
    /// Requests answered 503 because the store failed or was too slow.
    pub storage_errors: u64,
    pub slow_deliveries: u64,
    /// Requests refused for their signature or timestamp (`bad_signature`, `stale_timestamp`).
    pub rejected: u64,
    /// Events stored without a field their provider's events always carry (`drift`), and the
    /// id of the last one (None before the first).
    pub drifted: u64,
    pub last_drifted_id: Option<i64>,
    /// Duplicates and verified webhooks over the last 15 minutes.
    pub window_duplicates: u64,
    pub window_received: u64,
}

impl Metrics {
    /// Counts event `id` of `endpoint`, stored without a field its provider's events always
    /// carry (`verify::Carried`).
    pub fn drifted(&self, endpoint: &str, id: i64) {
        let endpoints = self.endpoints.read();
        let endpoints = endpoints.unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = endpoints.get(endpoint) {
            s.last_drifted.store(id, Ordering::Relaxed);
            s.drifted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts the alerts task watches, for every configured endpoint.
    pub fn facts(&self) -> Vec<EndpointFacts> {
        let now = self.now_secs();
        let endpoints = self
            .endpoints
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let count = |s: &EndpointSeries, label: &str| {
            s.requests
                .iter()
                .find(|(l, _)| *l == label)
                .map_or(0, |(_, c)| c.get())
        };
        endpoints
            .values()
            .map(|s| {
                let window = s.duplicates.lock().unwrap_or_else(PoisonError::into_inner);
                let (window_duplicates, window_received) = window.counts(now);
                EndpointFacts {
                    endpoint: s.name.clone(),
                    accepted: count(s, ACCEPTED),
                    storage_errors: count(s, "storage_error"),
                    slow_deliveries: s.slow.load(Ordering::Relaxed),
                    rejected: count(s, "bad_signature") + count(s, "stale_timestamp"),
                    drifted: s.drifted.load(Ordering::Relaxed),
                    last_drifted_id: Some(s.last_drifted.load(Ordering::Relaxed))
                        .filter(|id| *id > 0),
                    window_duplicates,
                    window_received,
                }
            })
            .collect()
    }
}
