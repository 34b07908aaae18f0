//! Floods of rejected webhooks, summarised in the log: anyone who can reach the URL can send
//! bad signatures (or bodies too large, or from an address `allow_ips` refuses) as fast as
//! the connection allows, and one warning per request would bury everything else in the log
//! (and on a Raspberry Pi, its SD card). The first rejection of an endpoint and outcome is
//! logged in full; the others within [`SUMMARY_EVERY`] are only counted, and told in one line
//! when that interval ends. Metrics still count every request.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The interval of one summary.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The open intervals, one per (endpoint, outcome) that had a rejection logged in full.
pub(super) struct Rejections {
    every: Duration,
    open: Mutex<Vec<Interval>>,
}

/// An interval under way: its line was logged, `more` were counted since.
struct Interval {
    endpoint: String,
    outcome: &'static str,
    more: u64,
}

impl Rejections {
    /// `every`: the interval ([`SUMMARY_EVERY`], unless a test shortens it).
    pub(super) fn new(every: Duration) -> Arc<Rejections> {
        Arc::new(Rejections {
            every,
            open: Mutex::new(Vec::new()),
        })
    }

    /// Whether this rejection's line is to be written: the first of its endpoint and outcome
    /// is, and starts an interval at whose end a task logs how many more came (if any); the
    /// others within it are counted instead. Needs a tokio runtime (the task).
    pub(super) fn first(self: &Arc<Self>, endpoint: &str, outcome: &'static str) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        // A handful of endpoints times a handful of outcomes: a scan, no allocation.
        if let Some(interval) = open
            .iter_mut()
            .find(|i| i.outcome == outcome && i.endpoint == endpoint)
        {
            interval.more += 1;
            return false;
        }
        open.push(Interval {
            endpoint: endpoint.to_string(),
            outcome,
            more: 0,
        });
        drop(open);
        tokio::spawn(self.clone().summary(endpoint.to_string(), outcome));
        true
    }

    /// Ends the interval of (`endpoint`, `outcome`) after [`Rejections::every`], logging
    /// how many were left out.
    async fn summary(self: Arc<Self>, endpoint: String, outcome: &'static str) {
        tokio::time::sleep(self.every).await;
        let more = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let at = open
                .iter()
                .position(|i| i.outcome == outcome && i.endpoint == endpoint);
            at.map_or(0, |at| open.swap_remove(at).more)
        };
        if more > 0 {
            let secs = self.every.as_secs_f64();
            tracing::warn!(
                endpoint,
                outcome,
                more,
                "{more} more webhooks rejected like this ({outcome}) in the last {secs} s, \
                 not logged one by one"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    /// What the test's subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<StdMutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_first_of_each_endpoint_and_outcome_is_logged_and_the_rest_summarised() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let every = Duration::from_millis(100);
        let rejections = Rejections::new(every);
        let logged = |endpoint, outcome, n| {
            (0..n)
                .filter(|_| rejections.first(endpoint, outcome))
                .count()
        };
        assert_eq!(logged("shop", "bad_signature", 200), 1);
        assert_eq!(logged("shop", "too_large", 3), 1, "another outcome");
        assert_eq!(logged("bank", "bad_signature", 1), 1, "another endpoint");
        tokio::time::sleep(every * 3).await;
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(text.contains(
            "199 more webhooks rejected like this (bad_signature) in the last 0.1 s, not logged \
             one by one endpoint=\"shop\" outcome=\"bad_signature\" more=199"
        ), "{text}");
        assert!(
            text.contains("2 more webhooks rejected like this (too_large)"),
            "{text}"
        );
        assert!(!text.contains("bank"), "nothing was left out there: {text}");
        // The interval is over: the next one is logged in full again.
        assert!(rejections.first("shop", "bad_signature"));
    }
}
