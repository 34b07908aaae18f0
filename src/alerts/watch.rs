//! From facts to occurrences: what changed in [`Metrics::facts`](crate::metrics::Metrics::facts)
//! since the last tick (storage errors, slow deliveries, the duplicate ratio, webhooks
//! received) becomes `note`s and `level`s in the [`Book`]. Pure: the caller passes the time.
//!
//! `quiet`: an endpoint "usually receives events" once it has received one, ever (a stored
//! event at start-up counts) or since the start. It is quiet when nothing was accepted for its
//! `quiet_after`, counted from its last accepted webhook or from the start, whichever is later
//! (portaria being down is not the gateway's silence). One silence is announced once; the next
//! webhook ends it.
//!
//! `storage`: a run of 503s for storage starts at the first and ends at a webhook accepted
//! with none beside it in the tick; its start and count say how much of a gateway's patience
//! is used ([`Watch::storage_run`]).
//!
//! `rejected`: a burst is [`REJECTED_BURST`] requests refused for their signature or
//! timestamp within [`REJECTED_WITHIN`] of the first, on an endpoint that had none for
//! [`REJECTED_CALM`] (or since the start). One burst is announced once; a trickle that never
//! reaches the count in the window is not a burst, and the next burst needs an hour of calm.
//!
//! `drift`: every event stored without a field its provider's events always carry is an
//! occurrence, about the last such event's id.
//!
//! `unreachable`: every failed canary probe is an occurrence, since the run of failures began;
//! a probe that comes back ends it, drops what was not yet sent, and, if an `unreachable` went
//! out after the last `reachable` (the book's clocks, saved across restarts), notes one
//! `reachable`: an outage that was announced is announced over, one that was not stays silent.

use std::collections::HashMap;
use std::time::Duration;

use super::kinds::Kind;
use super::rules::Book;
use crate::metrics::{DUPLICATE_MIN_SAMPLE, DUPLICATE_WARN_PERCENT, EndpointFacts};
use crate::public_path::Seen as PathSeen;

/// How many refused requests make a burst (`rejected`)...
pub const REJECTED_BURST: u64 = 5;
/// ... within this much of the first ...
pub const REJECTED_WITHIN: Duration = Duration::from_secs(10 * 60);
/// ... after this long with none.
pub const REJECTED_CALM: Duration = Duration::from_secs(3600);

/// What the last tick saw of each endpoint.
#[derive(Debug)]
pub struct Watch {
    quiet_after: HashMap<String, Duration>,
    started_ms: i64,
    /// Endpoints with a stored event when the server started.
    received_before: Vec<String>,
    seen: HashMap<String, Seen>,
    /// The canary's probes the last tick saw, and when the current failure began.
    path_failed: u64,
    path_succeeded: u64,
    path_down_since: Option<i64>,
}

#[derive(Debug, Default)]
struct Seen {
    accepted: u64,
    storage_errors: u64,
    slow_deliveries: u64,
    /// The last accepted webhook, or the start.
    last_activity_ms: i64,
    received: bool,
    /// This silence has been noted.
    announced: bool,
    /// The run of storage errors going on: since when, and how many.
    storage_run: Option<(i64, u64)>,
    rejected: u64,
    /// The last tick that saw a refused request.
    last_rejected_ms: Option<i64>,
    /// The burst of refusals not yet announced: since when, and how many.
    rejected_burst: Option<(i64, u64)>,
    drifted: u64,
}

impl Watch {
    pub fn new(
        quiet_after: HashMap<String, Duration>,
        received_before: Vec<String>,
        started_ms: i64,
    ) -> Watch {
        Watch {
            quiet_after,
            started_ms,
            received_before,
            seen: HashMap::new(),
            path_failed: 0,
            path_succeeded: 0,
            path_down_since: None,
        }
    }

    /// The run of storage errors of `endpoint` going on: since when (unix ms), and how many.
    pub fn storage_run(&self, endpoint: &str) -> Option<(i64, u64)> {
        self.seen.get(endpoint).and_then(|s| s.storage_run)
    }

    /// When the public path's current failure began (unix ms), if it is failing.
    pub fn path_down_since(&self) -> Option<i64> {
        self.path_down_since
    }

    /// Folds what the canary's probes showed of the public URL `url` into `book`.
    pub fn fold_path(&mut self, seen: &PathSeen, url: &str, book: &mut Book) {
        let failed = growth(&mut self.path_failed, seen.failed);
        let succeeded = growth(&mut self.path_succeeded, seen.succeeded);
        if let Some(run) = &seen.failing {
            self.path_down_since = Some(run.since_ms);
            // Since the run began: the summary says how long it has lasted.
            book.note(Kind::Unreachable, url, failed, None, run.since_ms);
        } else if succeeded > 0 {
            let down_since = self.path_down_since.take();
            book.clear(Kind::Unreachable, url);
            let announced = book.sent_at(Kind::Unreachable, url);
            let over = book.sent_at(Kind::Reachable, url);
            if let Some(at) = announced
                && over.is_none_or(|over| over < at)
                && !book.is_pending(Kind::Reachable, url)
            {
                book.note(Kind::Reachable, url, 1, None, down_since.unwrap_or(at));
            }
        }
    }

    /// The endpoints with a stored event at start-up (read once the store answers).
    pub fn received_before(&mut self, names: Vec<String>) {
        for (name, seen) in &mut self.seen {
            seen.received |= names.contains(name);
        }
        self.received_before = names;
    }

    /// Folds one tick's facts into `book`.
    pub fn fold(&mut self, facts: &[EndpointFacts], book: &mut Book, now_ms: i64) {
        for f in facts {
            let name = f.endpoint.as_str();
            let seen = self.seen.entry(f.endpoint.clone()).or_insert_with(|| Seen {
                last_activity_ms: self.started_ms,
                received: self.received_before.iter().any(|e| e == name),
                ..Seen::default()
            });
            let storage_errors = growth(&mut seen.storage_errors, f.storage_errors);
            let accepted = growth(&mut seen.accepted, f.accepted);
            book.note(Kind::Storage, name, storage_errors, None, now_ms);
            if storage_errors > 0 {
                let run = seen.storage_run.get_or_insert((now_ms, 0));
                run.1 += storage_errors;
            } else if accepted > 0 {
                seen.storage_run = None;
            }
            book.note(
                Kind::Slow,
                name,
                growth(&mut seen.slow_deliveries, f.slow_deliveries),
                None,
                now_ms,
            );
            let rejected = growth(&mut seen.rejected, f.rejected);
            fold_rejected(seen, name, rejected, book, now_ms);
            // Each event lacking a carried field is an occurrence, about the last of them.
            let drifted = growth(&mut seen.drifted, f.drifted);
            book.note(Kind::Drift, name, drifted, f.last_drifted_id, now_ms);
            if f.window_received >= DUPLICATE_MIN_SAMPLE
                && f.window_duplicates * 100 > f.window_received * DUPLICATE_WARN_PERCENT
            {
                book.level(
                    Kind::Duplicates,
                    name,
                    f.window_duplicates,
                    f.window_received,
                    now_ms,
                );
            } else {
                book.clear(Kind::Duplicates, name);
            }
            if accepted > 0 {
                seen.last_activity_ms = now_ms;
                seen.received = true;
                seen.announced = false;
                book.clear(Kind::Quiet, name);
            } else if let Some(after) = self.quiet_after.get(name) {
                let silent_ms = now_ms.saturating_sub(seen.last_activity_ms);
                if seen.received && !seen.announced && silent_ms as u128 >= after.as_millis() {
                    seen.announced = true;
                    // Since the last webhook: that is when the silence began.
                    book.note(Kind::Quiet, name, 1, None, seen.last_activity_ms);
                }
            }
        }
    }
}

/// `rejected` refusals this tick: a burst after a calm is announced once it is big enough.
fn fold_rejected(seen: &mut Seen, name: &str, rejected: u64, book: &mut Book, now_ms: i64) {
    if rejected == 0 {
        return;
    }
    let calm_ms = REJECTED_CALM.as_millis() as i64;
    if seen
        .last_rejected_ms
        .is_none_or(|at| now_ms.saturating_sub(at) >= calm_ms)
    {
        seen.rejected_burst = Some((now_ms, 0));
    }
    seen.last_rejected_ms = Some(now_ms);
    let Some((since, count)) = seen.rejected_burst.as_mut() else {
        return;
    };
    if now_ms.saturating_sub(*since) > REJECTED_WITHIN.as_millis() as i64 {
        // A trickle, not a burst: wait for the next calm.
        seen.rejected_burst = None;
        return;
    }
    *count += rejected;
    if *count >= REJECTED_BURST {
        book.note(Kind::Rejected, name, *count, None, *since);
        seen.rejected_burst = None;
    }
}

/// How much a running count grew since `last` (all of it if it started again, as a reload
/// that re-creates an endpoint's series does), remembering the new value.
fn growth(last: &mut u64, now: u64) -> u64 {
    let grew = if now >= *last { now - *last } else { now };
    *last = now;
    grew
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1000;

    fn facts(endpoint: &str) -> EndpointFacts {
        EndpointFacts {
            endpoint: endpoint.into(),
            accepted: 0,
            storage_errors: 0,
            slow_deliveries: 0,
            rejected: 0,
            drifted: 0,
            last_drifted_id: None,
            window_duplicates: 0,
            window_received: 0,
        }
    }

    fn pending(book: &mut Book, now: i64) -> Vec<(Kind, String, u64)> {
        book.due(now)
            .into_iter()
            .map(|d| (d.kind, d.endpoint, d.pending.count))
            .collect()
    }

    #[test]
    fn a_burst_of_refusals_after_a_calm_is_announced_once_and_a_trickle_never() {
        const MIN: i64 = 60 * S;
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut f = facts("a");
        let mut at = |n: u64, now: i64, book: &mut Book| {
            f.rejected += n;
            watch.fold(std::slice::from_ref(&f), book, now);
            let due = pending(book, now);
            for (kind, endpoint, _) in &due {
                book.sent(*kind, endpoint, now);
            }
            due
        };
        // Four, then a fifth within ten minutes: one alert, counting all five.
        assert!(at(4, MIN, &mut book).is_empty());
        assert_eq!(at(1, 5 * MIN, &mut book), [(Kind::Rejected, "a".into(), 5)]);
        // More of the same burst: nothing new, however many.
        assert!(at(50, 6 * MIN, &mut book).is_empty());
        // A trickle that never calms: one every 20 minutes for hours, never announced.
        for n in 1..10 {
            assert!(at(1, 6 * MIN + n * 20 * MIN, &mut book).is_empty());
        }
        // An hour with none, then a burst again: announced again.
        let later = 6 * MIN + 9 * 20 * MIN + 61 * MIN;
        assert!(at(3, later, &mut book).is_empty());
        assert_eq!(
            at(2, later + MIN, &mut book),
            [(Kind::Rejected, "a".into(), 5)]
        );
        // A slow start is not a burst: 4 now, 1 eleven minutes later.
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut f = facts("b");
        f.rejected = 4;
        watch.fold(std::slice::from_ref(&f), &mut book, MIN);
        f.rejected = 5;
        watch.fold(std::slice::from_ref(&f), &mut book, 12 * MIN);
        assert!(pending(&mut book, 12 * MIN).is_empty());
    }

    #[test]
    fn events_lacking_a_carried_field_become_drift_naming_the_last() {
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut f = facts("stripe");
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert!(pending(&mut book, 0).is_empty());
        (f.drifted, f.last_drifted_id) = (2, Some(9));
        watch.fold(std::slice::from_ref(&f), &mut book, S);
        assert_eq!(pending(&mut book, S), [(Kind::Drift, "stripe".into(), 2)]);
        book.sent(Kind::Drift, "stripe", S);
        // Unchanged: nothing more; one more: a summary about it, at alert_every.
        watch.fold(std::slice::from_ref(&f), &mut book, 2 * S);
        assert!(book.due(100 * S).is_empty());
        (f.drifted, f.last_drifted_id) = (3, Some(12));
        watch.fold(std::slice::from_ref(&f), &mut book, 3 * S);
        let due = book.due(100 * S);
        assert_eq!((due[0].pending.count, due[0].pending.last), (1, Some(12)));
    }

    #[test]
    fn counts_that_grew_become_occurrences() {
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut f = facts("a");
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert!(pending(&mut book, 0).is_empty());
        f.storage_errors = 2;
        f.slow_deliveries = 3;
        watch.fold(std::slice::from_ref(&f), &mut book, S);
        assert_eq!(
            pending(&mut book, S),
            [
                (Kind::Storage, "a".to_string(), 2),
                (Kind::Slow, "a".to_string(), 3)
            ]
        );
        // Unchanged counts add nothing; a count that started again adds all of it.
        book.sent(Kind::Storage, "a", S);
        book.sent(Kind::Slow, "a", S);
        watch.fold(std::slice::from_ref(&f), &mut book, 100 * S);
        assert!(pending(&mut book, 100 * S).is_empty());
        f.storage_errors = 1;
        watch.fold(std::slice::from_ref(&f), &mut book, 101 * S);
        assert_eq!(
            pending(&mut book, 101 * S),
            [(Kind::Storage, "a".to_string(), 1)]
        );
    }

    #[test]
    fn duplicates_alert_over_five_percent_of_enough_webhooks() {
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut f = facts("a");
        (f.window_duplicates, f.window_received) = (1, 20);
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert!(pending(&mut book, 0).is_empty(), "exactly 5 %");
        (f.window_duplicates, f.window_received) = (2, 10);
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert!(pending(&mut book, 0).is_empty(), "too few to say");
        (f.window_duplicates, f.window_received) = (2, 21);
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert_eq!(pending(&mut book, 0), [(Kind::Duplicates, "a".into(), 2)]);
    }

    #[test]
    fn a_silence_is_announced_once_and_only_for_an_endpoint_that_received() {
        let after = Duration::from_secs(10);
        let quiet = HashMap::from([("a".to_string(), after), ("b".to_string(), after)]);
        // `a` has stored events from before the start; `b` never received anything.
        let mut watch = Watch::new(quiet, vec!["a".to_string()], 0);
        let mut book = Book::new(Duration::from_secs(1));
        let (mut a, b) = (facts("a"), facts("b"));
        let tick = |w: &mut Watch, book: &mut Book, a: &EndpointFacts, now| {
            w.fold(&[a.clone(), b.clone()], book, now);
            pending(book, now)
        };
        assert!(tick(&mut watch, &mut book, &a, 9 * S).is_empty());
        assert_eq!(
            tick(&mut watch, &mut book, &a, 10 * S),
            [(Kind::Quiet, "a".into(), 1)],
            "quiet since the start; b never received, so its silence says nothing"
        );
        book.sent(Kind::Quiet, "a", 10 * S);
        assert!(tick(&mut watch, &mut book, &a, 100 * S).is_empty(), "once");
        a.accepted = 1;
        assert!(tick(&mut watch, &mut book, &a, 101 * S).is_empty());
        assert_eq!(
            tick(&mut watch, &mut book, &a, 111 * S),
            [(Kind::Quiet, "a".into(), 1)],
            "a new silence after a webhook"
        );
    }

    #[test]
    fn an_announced_outage_is_announced_over_and_an_unannounced_one_stays_silent() {
        use crate::public_path::PublicPath;
        let url = "https://hooks.example.com";
        let path = PublicPath::new(url);
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut tick = |book: &mut Book, now| {
            watch.fold_path(&path.seen(), url, book);
            pending(book, now)
        };
        path.succeeded(0, Duration::from_millis(5));
        assert!(tick(&mut book, S).is_empty(), "working is not news");
        path.failed(2 * S, "connect", "refused".into());
        path.failed(3 * S, "connect", "refused".into());
        let due = tick(&mut book, 3 * S);
        assert_eq!(due, [(Kind::Unreachable, url.to_string(), 2)]);
        assert_eq!(
            book.due(3 * S)[0].pending.since_ms,
            2 * S,
            "since the first failure"
        );
        book.sent(Kind::Unreachable, url, 3 * S);
        path.failed(4 * S, "tls", "UnknownIssuer".into());
        assert!(
            tick(&mut book, 4 * S).is_empty(),
            "the summary waits for alert_every"
        );
        path.succeeded(5 * S, Duration::from_millis(5));
        let back = tick(&mut book, 5 * S);
        assert_eq!(
            back,
            [(Kind::Reachable, url.to_string(), 1)],
            "the pending summary is dropped"
        );
        assert_eq!(book.due(5 * S)[0].pending.since_ms, 2 * S);
        book.sent(Kind::Reachable, url, 5 * S);
        // A blip within alert_every: its unreachable waits, the path is back first: silence.
        path.failed(6 * S, "connect", "refused".into());
        assert!(tick(&mut book, 6 * S).is_empty());
        path.succeeded(7 * S, Duration::from_millis(5));
        assert!(
            tick(&mut book, 7 * S).is_empty(),
            "never announced, so no recovery either"
        );
    }

    #[test]
    fn a_run_of_storage_errors_lasts_until_a_webhook_is_stored() {
        let mut watch = Watch::new(HashMap::new(), Vec::new(), 0);
        let mut book = Book::new(Duration::from_secs(60));
        let mut f = facts("a");
        watch.fold(std::slice::from_ref(&f), &mut book, 0);
        assert_eq!(watch.storage_run("a"), None);
        f.storage_errors = 2;
        watch.fold(std::slice::from_ref(&f), &mut book, S);
        f.storage_errors = 3;
        f.accepted = 1;
        watch.fold(std::slice::from_ref(&f), &mut book, 2 * S);
        assert_eq!(
            watch.storage_run("a"),
            Some((S, 3)),
            "an error beside the success: still on"
        );
        f.accepted = 2;
        watch.fold(std::slice::from_ref(&f), &mut book, 3 * S);
        assert_eq!(watch.storage_run("a"), None);
    }
}
