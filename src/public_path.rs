//! What the canary last saw of the public path (the tunnel, up to portaria and back):
//! [`PublicPath`], shared between the canary task, which writes it after each probe, and the
//! alerts task and the status page, which read it. A leaf: it imports nothing of the crate, so
//! its readers need not know the canary.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The shared record of one public URL's probes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PublicPath {
    url: Arc<str>,
    seen: Arc<Mutex<Seen>>,
}

/// What the probes have shown so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Probes that came back as portaria's, and probes that did not, since the start.
    pub succeeded: u64,
    pub failed: u64,
    /// When the last successful probe was sent (unix ms), and how long it took.
    pub last_success_ms: Option<i64>,
    pub last_round_trip: Option<Duration>,
    /// The failure going on: None when the last probe succeeded (or none was sent yet).
    pub failing: Option<Failing>,
}

/// A run of failed probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When the first probe of the run was sent (unix ms).
    pub since_ms: i64,
    /// Probes failed in a row.
    pub probes: u64,
    /// The last failure's cause, one word (`dns`, `tls`, `not_portaria`, ...), and what it was.
    pub cause: &'static str,
    pub detail: String,
}

impl PublicPath {
    /// `url`: the public URL the probes are sent to (`[server] public_url`).
    pub fn new(url: &str) -> PublicPath {
        PublicPath {
            url: url.into(),
            seen: Arc::default(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the probes have shown, now.
    pub fn seen(&self) -> Seen {
        self.lock().clone()
    }

    /// A probe sent at `sent_ms` came back as portaria's after `round_trip`.
    pub fn succeeded(&self, sent_ms: i64, round_trip: Duration) {
        let mut seen = self.lock();
        seen.succeeded += 1;
        seen.last_success_ms = Some(sent_ms);
        seen.last_round_trip = Some(round_trip);
        seen.failing = None;
    }

    /// A probe sent at `sent_ms` failed, for `cause`.
    pub fn failed(&self, sent_ms: i64, cause: &'static str, detail: String) {
        let mut seen = self.lock();
        seen.failed += 1;
        let run = seen.failing.get_or_insert(Failing {
            since_ms: sent_ms,
            probes: 0,
            cause,
            detail: String::new(),
        });
        run.probes += 1;
        run.cause = cause;
        run.detail = detail;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_starts_at_its_first_and_ends_at_a_success() {
        let path = PublicPath::new("https://hooks.example.com");
        assert_eq!(path.seen(), Seen::default());
        path.failed(10, "dns", "no such host".into());
        path.failed(20, "tls", "UnknownIssuer".into());
        let failing = path.seen().failing.unwrap();
        assert_eq!(
            (failing.since_ms, failing.probes, failing.cause),
            (10, 2, "tls")
        );
        assert_eq!(failing.detail, "UnknownIssuer");
        path.succeeded(30, Duration::from_millis(40));
        let seen = path.seen();
        assert_eq!(seen.failing, None);
        assert_eq!((seen.succeeded, seen.failed), (1, 2));
        assert_eq!(seen.last_success_ms, Some(30));
        path.failed(40, "timeout", String::new());
        assert_eq!(path.seen().failing.unwrap().since_ms, 40, "a new run");
    }
}
