//! What the admin listener asks of the database: readiness for `/readyz`, and the queue
//! figures `/metrics` reports. Each engine answers in its `observe.rs`.
//!
//! Readiness is more than the probe: a one-row write fits in WAL space that a refused webhook
//! left allocated, so on a full disk the probe alone can succeed while every webhook gets 503.
//! [`Store::readiness`] therefore also asks how the latest intake commit went
//! ([`IntakeHealth`], recorded on the writer thread) and how much room the database's file
//! system has left.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::StoreError;

/// How long a failed intake commit keeps `/readyz` at 503 when no later one has succeeded.
/// Past it, the probe and the free space decide alone, so readiness comes back by itself even
/// when no webhook arrives to prove it.
pub const INTAKE_FAILURE_HOLD: Duration = Duration::from_secs(30);

/// How the latest intake commits went. Written by the writer thread (the outcome of a job
/// includes its COMMIT), read by `/readyz`.
#[derive(Debug, Default)]
pub(super) struct IntakeHealth {
    last: Mutex<Option<Last>>,
}

#[derive(Debug)]
struct Last {
    at: Instant,
    /// None: it committed.
    error: Option<String>,
}

impl IntakeHealth {
    pub(super) fn record(&self, outcome: Result<(), &StoreError>) {
        // A closed store is shutdown, not the disk.
        if matches!(outcome, Err(StoreError::Closed)) {
            return;
        }
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Last {
                at: Instant::now(),
                error: outcome.err().map(ToString::to_string),
            });
        }
    }

    /// The error of the latest intake commit, if it failed less than `hold` ago.
    pub(super) fn recent_failure(&self, hold: Duration) -> Option<(Duration, String)> {
        let last = self.last.lock().ok()?;
        let last = last.as_ref()?;
        let error = last.error.as_ref()?;
        let ago = last.at.elapsed();
        (ago < hold).then(|| (ago, error.clone()))
    }
}

/// Why `/readyz` says no.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotReady {
    #[error("the latest intake commit failed {ago_ms} ms ago: {error}")]
    IntakeFailed { ago_ms: u64, error: String },
    #[error(
        "{free} bytes free on the database's file system; a webhook may need {needed} \
         (disk full?)"
    )]
    LowSpace { free: u64, needed: u64 },
    #[error("the database refused a write: {0}")]
    Probe(StoreError),
}

/// One endpoint's queue, read at scrape time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    pub endpoint: String,
    /// Events waiting for delivery, including those being delivered right now.
    pub pending: u64,
    /// When the oldest of them was received (unix milliseconds), if there is one.
    pub oldest_pending_ms: Option<i64>,
    pub dead: u64,
}

impl QueueStats {
    /// Adds one endpoint's dead count to the pending figures read before it (an endpoint with
    /// only dead events gets a row of its own): both backends read the two apart.
    pub(super) fn add_dead(out: &mut Vec<QueueStats>, endpoint: String, dead: u64) {
        match out.iter_mut().find(|s| s.endpoint == endpoint) {
            Some(stats) => stats.dead = dead,
            None => out.push(QueueStats {
                endpoint,
                pending: 0,
                oldest_pending_ms: None,
                dead,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_intake_commit_holds_readiness_until_one_succeeds_or_the_hold_passes() {
        let health = IntakeHealth::default();
        assert_eq!(health.recent_failure(INTAKE_FAILURE_HOLD), None);
        health.record(Err(&StoreError::Sqlite("database or disk is full".into())));
        let (_, error) = health.recent_failure(INTAKE_FAILURE_HOLD).unwrap();
        assert!(error.contains("disk is full"), "{error}");
        assert_eq!(health.recent_failure(Duration::ZERO), None, "past the hold");
        health.record(Err(&StoreError::Closed));
        assert!(
            health.recent_failure(INTAKE_FAILURE_HOLD).is_some(),
            "shutdown is no news"
        );
        health.record(Ok(()));
        assert_eq!(health.recent_failure(INTAKE_FAILURE_HOLD), None);
    }
}
