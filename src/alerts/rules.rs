//! The rate limit, as pure bookkeeping: what happened since the last alert of each (kind,
//! endpoint), and whether an alert is due. No clock and no I/O: the caller passes the time.
//! Dead events are kept per route too (kind, endpoint, route): each route is a target of its
//! own, and one that is down does not hide, or wait for, another.
//!
//! The rule, exactly: occurrences are summed into the key's [`Pending`] summary (count, first
//! and last event id, since when). A key with something pending is due when it has never
//! alerted, or its last alert was sent at least `alert_every` ago; sending it empties the
//! summary and restarts the clock. So the first dead event alerts at once; more dead events
//! within `alert_every` wait, and are then announced together, once, with their count. An alert
//! that could not be sent stays pending (and the clock is not restarted), so it is tried again.
//! `slow` is due only once [`SLOW_MIN`] slow deliveries are pending, and a smaller count older
//! than `alert_every` is dropped: one slow delivery is a blip, three within the period are
//! deliveries that *keep* taking long.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::kinds::{Kind, Pending};
use crate::store::ALERT_KEY_PREFIX;

/// Slow deliveries pending before a `slow` alert is due.
pub const SLOW_MIN: u64 = 3;

/// One key's state, saved in `meta` as JSON so that a restart neither repeats nor forgets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub sent_at_ms: Option<i64>,
    pub pending: Option<Pending>,
}

/// (kind, endpoint, route): the route only for what happens on one (dead deliveries).
type Key = (Kind, String, Option<String>);

/// Every key's state, and which changed since they were last saved.
#[derive(Debug)]
pub struct Book {
    every_ms: i64,
    states: BTreeMap<Key, State>,
    dirty: BTreeSet<Key>,
}

/// An alert to send now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub kind: Kind,
    pub endpoint: String,
    pub route: Option<String>,
    pub pending: Pending,
}

impl Book {
    pub fn new(every: Duration) -> Book {
        Book {
            every_ms: every.as_millis().try_into().unwrap_or(i64::MAX),
            states: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    /// Takes one saved `meta` row (`alerts:<kind>:<endpoint>[:<route>]`); false if it is not
    /// one. A key already in the book (noted before the state could be read) keeps what it has.
    pub fn load(&mut self, key: &str, value: &str) -> bool {
        let Some((kind, endpoint, route)) = parse_key(key) else {
            return false;
        };
        match serde_json::from_str::<State>(value) {
            Ok(state) => {
                self.states
                    .entry((kind, endpoint.to_string(), route.map(str::to_string)))
                    .or_insert(state);
                true
            }
            Err(_) => false,
        }
    }

    /// `count` more occurrences, about event `id` when there is one.
    pub fn note(&mut self, kind: Kind, endpoint: &str, count: u64, id: Option<i64>, now_ms: i64) {
        self.note_on(kind, endpoint, None, count, id, now_ms);
    }

    /// [`Book::note`] on one route of the endpoint.
    pub fn note_on(
        &mut self,
        kind: Kind,
        endpoint: &str,
        route: Option<&str>,
        count: u64,
        id: Option<i64>,
        now_ms: i64,
    ) {
        if count == 0 {
            return;
        }
        let state = self.entry(kind, endpoint, route);
        let p = state.pending.get_or_insert(Pending {
            count: 0,
            first: id,
            last: id,
            since_ms: now_ms,
            out_of: None,
            names: Vec::new(),
        });
        p.count += count;
        p.first = p.first.or(id);
        p.last = id.or(p.last);
    }

    /// One occurrence named `name` (a new event type, about event `id`): counted and named
    /// once in the summary however often it is noted before the summary is sent.
    pub fn note_named(&mut self, kind: Kind, endpoint: &str, name: &str, id: i64, now_ms: i64) {
        let pending = self
            .states
            .get(&(kind, endpoint.to_string(), None))
            .and_then(|s| s.pending.as_ref());
        if pending.is_some_and(|p| p.names.iter().any(|n| n == name)) {
            return;
        }
        self.note(kind, endpoint, 1, Some(id), now_ms);
        if let Some(p) = self.entry(kind, endpoint, None).pending.as_mut() {
            p.names.push(name.to_string());
        }
    }

    /// A level that is above its line now (duplicates): the summary says how far, replacing
    /// what it said before.
    /// Unchanged, it changes nothing (and is not saved again).
    pub fn level(&mut self, kind: Kind, endpoint: &str, count: u64, out_of: u64, now_ms: i64) {
        self.level_on(kind, endpoint, None, count, Some(out_of), now_ms);
    }

    /// The same of one route: `since_ms` is when the condition began, kept from the first
    /// time it is seen (a pause: when it was taken).
    pub fn level_on(
        &mut self,
        kind: Kind,
        endpoint: &str,
        route: Option<&str>,
        count: u64,
        out_of: Option<u64>,
        since_ms: i64,
    ) {
        let key = (kind, endpoint.to_string(), route.map(str::to_string));
        let pending = self.states.get(&key).and_then(|s| s.pending.as_ref());
        if pending.is_some_and(|p| (p.count, p.out_of) == (count, out_of)) {
            return;
        }
        let since_ms = pending.map_or(since_ms, |p| p.since_ms);
        self.entry(kind, endpoint, route).pending = Some(Pending {
            count,
            first: None,
            last: None,
            since_ms,
            out_of,
            names: Vec::new(),
        });
    }

    /// What is pending is no longer true (the level fell back, the endpoint received again).
    pub fn clear(&mut self, kind: Kind, endpoint: &str) {
        self.clear_on(kind, endpoint, None);
    }

    /// The same of one route.
    pub fn clear_on(&mut self, kind: Kind, endpoint: &str, route: Option<&str>) {
        let key = (kind, endpoint.to_string(), route.map(str::to_string));
        if let Some(state) = self.states.get_mut(&key)
            && state.pending.take().is_some()
        {
            self.dirty.insert(key);
        }
    }

    /// The alerts due at `now_ms`, oldest key first.
    pub fn due(&mut self, now_ms: i64) -> Vec<Due> {
        let every = self.every_ms;
        let mut expired = Vec::new();
        let mut out = Vec::new();
        for ((kind, endpoint, route), state) in &self.states {
            let Some(p) = &state.pending else { continue };
            if *kind == Kind::Slow && p.count < SLOW_MIN {
                if now_ms.saturating_sub(p.since_ms) > every {
                    expired.push((*kind, endpoint.clone()));
                }
                continue;
            }
            let quiet_long_enough = state
                .sent_at_ms
                .is_none_or(|at| now_ms >= at.saturating_add(every));
            if p.count > 0 && quiet_long_enough {
                out.push(Due {
                    kind: *kind,
                    endpoint: endpoint.clone(),
                    route: route.clone(),
                    pending: p.clone(),
                });
            }
        }
        for (kind, endpoint) in expired {
            self.clear(kind, &endpoint);
        }
        out
    }

    /// The alert of this key went out at `now_ms`.
    #[cfg(test)]
    pub fn sent(&mut self, kind: Kind, endpoint: &str, now_ms: i64) {
        self.sent_on(kind, endpoint, None, now_ms);
    }

    /// The alert of this key (one route's, when `route` says) went out at `now_ms`.
    pub fn sent_on(&mut self, kind: Kind, endpoint: &str, route: Option<&str>, now_ms: i64) {
        let state = self.entry(kind, endpoint, route);
        state.sent_at_ms = Some(now_ms);
        state.pending = None;
    }

    /// When the last alert of this key went out (unix ms), if one did.
    pub fn sent_at(&self, kind: Kind, endpoint: &str) -> Option<i64> {
        self.states
            .get(&(kind, endpoint.to_string(), None))
            .and_then(|s| s.sent_at_ms)
    }

    /// Whether something of this key waits to be sent.
    pub fn is_pending(&self, kind: Kind, endpoint: &str) -> bool {
        self.states
            .get(&(kind, endpoint.to_string(), None))
            .is_some_and(|s| s.pending.is_some())
    }

    /// Whether anything changed since the last [`Book::saved`].
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The `meta` rows of every key that changed.
    pub fn changed_rows(&self) -> Vec<(String, String)> {
        self.dirty
            .iter()
            .filter_map(|key| {
                let state = self.states.get(key)?;
                let value = serde_json::to_string(state).ok()?;
                Some((state_key(key.0, &key.1, key.2.as_deref()), value))
            })
            .collect()
    }

    /// The rows of [`Book::changed_rows`] were saved.
    pub fn saved(&mut self) {
        self.dirty.clear();
    }

    #[cfg(test)]
    pub fn state(&self, kind: Kind, endpoint: &str) -> Option<&State> {
        self.states.get(&(kind, endpoint.to_string(), None))
    }

    /// The (endpoint, route) keys of `kind` with something pending.
    pub fn pending_on_routes(&self, kind: Kind) -> Vec<(String, String)> {
        self.states
            .iter()
            .filter(|((k, _, _), state)| *k == kind && state.pending.is_some())
            .filter_map(|((_, endpoint, route), _)| Some((endpoint.clone(), route.clone()?)))
            .collect()
    }

    fn entry(&mut self, kind: Kind, endpoint: &str, route: Option<&str>) -> &mut State {
        let key = (kind, endpoint.to_string(), route.map(str::to_string));
        self.dirty.insert(key.clone());
        self.states.entry(key).or_default()
    }
}

/// `alerts:dead:pagarme`, `alerts:dead:pagarme:erp` for a route. Endpoint and route names
/// hold no `:` (config allows letters, digits, `-_.`).
pub fn state_key(kind: Kind, endpoint: &str, route: Option<&str>) -> String {
    match route {
        Some(route) => format!("{ALERT_KEY_PREFIX}{kind}:{endpoint}:{route}"),
        None => format!("{ALERT_KEY_PREFIX}{kind}:{endpoint}"),
    }
}

fn parse_key(key: &str) -> Option<(Kind, &str, Option<&str>)> {
    let (kind, rest) = key.strip_prefix(ALERT_KEY_PREFIX)?.split_once(':')?;
    let (endpoint, route) = match rest.split_once(':') {
        Some((endpoint, route)) => (endpoint, Some(route)),
        None => (rest, None),
    };
    Some((Kind::parse(kind)?, endpoint, route))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(60);
    const S: i64 = 1000;

    fn kinds(due: &[Due]) -> Vec<(Kind, &str, u64)> {
        due.iter()
            .map(|d| (d.kind, d.endpoint.as_str(), d.pending.count))
            .collect()
    }

    #[test]
    fn the_first_alerts_at_once_and_the_rest_wait_for_one_summary() {
        let mut book = Book::new(EVERY);
        assert!(book.due(0).is_empty());
        book.note(Kind::Dead, "a", 1, Some(5), 0);
        let due = book.due(0);
        assert_eq!(kinds(&due), [(Kind::Dead, "a", 1)]);
        book.sent(Kind::Dead, "a", 0);
        book.note(Kind::Dead, "a", 1, Some(8), 10 * S);
        book.note(Kind::Dead, "a", 1, Some(6), 20 * S);
        // Another endpoint has its own clock.
        book.note(Kind::Dead, "b", 1, Some(7), 20 * S);
        assert_eq!(kinds(&book.due(59 * S)), [(Kind::Dead, "b", 1)]);
        book.sent(Kind::Dead, "b", 59 * S);
        let due = book.due(60 * S);
        assert_eq!(kinds(&due), [(Kind::Dead, "a", 2)]);
        assert_eq!(
            (due[0].pending.first, due[0].pending.last),
            (Some(8), Some(6))
        );
        assert_eq!(due[0].pending.since_ms, 10 * S);
        book.sent(Kind::Dead, "a", 60 * S);
        assert!(book.due(200 * S).is_empty(), "nothing new, nothing sent");
    }

    #[test]
    fn an_alert_not_sent_stays_due() {
        let mut book = Book::new(EVERY);
        book.note(Kind::Storage, "a", 3, None, 0);
        assert_eq!(book.due(0).len(), 1);
        assert_eq!(book.due(S).len(), 1, "still due: never sent");
        book.note(Kind::Storage, "a", 1, None, 2 * S);
        assert_eq!(kinds(&book.due(3 * S)), [(Kind::Storage, "a", 4)]);
    }

    #[test]
    fn levels_replace_and_clear() {
        let mut book = Book::new(EVERY);
        book.level(Kind::Duplicates, "a", 2, 30, 0);
        book.saved();
        book.level(Kind::Duplicates, "a", 2, 30, S);
        assert!(!book.is_dirty(), "the same level again is no change");
        book.level(Kind::Duplicates, "a", 3, 40, S);
        assert!(book.is_dirty());
        let due = book.due(S);
        assert_eq!(kinds(&due), [(Kind::Duplicates, "a", 3)]);
        assert_eq!(due[0].pending.out_of, Some(40));
        book.clear(Kind::Duplicates, "a");
        assert!(book.due(S).is_empty());
    }

    #[test]
    fn slow_needs_several_within_the_period() {
        let mut book = Book::new(EVERY);
        book.note(Kind::Slow, "a", 2, None, 0);
        assert!(book.due(S).is_empty(), "two are not yet 'keep'");
        assert!(book.due(61 * S).is_empty());
        assert!(
            book.state(Kind::Slow, "a").unwrap().pending.is_none(),
            "dropped"
        );
        book.note(Kind::Slow, "a", 2, None, 70 * S);
        book.note(Kind::Slow, "a", 1, None, 80 * S);
        assert_eq!(kinds(&book.due(80 * S)), [(Kind::Slow, "a", 3)]);
    }

    #[test]
    fn each_route_of_an_endpoint_has_its_own_clock_and_key() {
        let mut book = Book::new(EVERY);
        book.note_on(Kind::Dead, "a", Some("erp"), 1, Some(5), 0);
        book.note_on(Kind::Dead, "a", Some("audit"), 1, Some(5), 0);
        let due = book.due(0);
        let routes: Vec<_> = due.iter().map(|d| d.route.as_deref()).collect();
        assert_eq!(routes, [Some("audit"), Some("erp")]);
        book.sent_on(Kind::Dead, "a", Some("erp"), 0);
        assert_eq!(book.due(0).len(), 1, "audit's alert is not erp's");
        book.sent_on(Kind::Dead, "a", Some("audit"), 0);
        let keys: Vec<String> = book.changed_rows().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["alerts:dead:a:audit", "alerts:dead:a:erp"]);
        let mut again = Book::new(EVERY);
        assert!(again.load("alerts:dead:a:erp", &book.changed_rows()[1].1));
        // A row saved before routes (no route in its key) is still read.
        assert!(again.load("alerts:dead:a", r#"{"sent_at_ms":0,"pending":null}"#));
        assert!(again.state(Kind::Dead, "a").is_some());
    }

    #[test]
    fn state_survives_a_save_and_load() {
        let mut book = Book::new(EVERY);
        book.note(Kind::Dead, "a", 1, Some(1), 0);
        book.sent(Kind::Dead, "a", 0);
        book.note(Kind::Dead, "a", 1, Some(2), S);
        let rows = book.changed_rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "alerts:dead:a");
        book.saved();
        assert!(!book.is_dirty());
        let mut again = Book::new(EVERY);
        assert!(again.load(&rows[0].0, &rows[0].1));
        assert!(!again.load("alerts:cursor", "1"));
        assert!(!again.load("alerts:nonsense:a", "{}"));
        assert!(again.due(30 * S).is_empty(), "the clock was saved too");
        let due = again.due(60 * S);
        assert_eq!(kinds(&due), [(Kind::Dead, "a", 1)]);
        assert_eq!(due[0].pending.first, Some(2));
    }

    #[test]
    fn named_occurrences_are_counted_and_named_once_per_summary() {
        let mut book = Book::new(EVERY);
        book.note_named(Kind::NewType, "a", "payment.created", 3, 0);
        book.note_named(Kind::NewType, "a", "payment.created", 4, 0);
        let due = book.due(0);
        assert_eq!(kinds(&due), [(Kind::NewType, "a", 1)]);
        assert_eq!(due[0].pending.names, ["payment.created"]);
        book.sent(Kind::NewType, "a", 0);
        book.note_named(Kind::NewType, "a", "pix.refunded", 7, S);
        book.note_named(Kind::NewType, "a", "pix.sent", 9, 2 * S);
        book.note_named(Kind::NewType, "a", "pix.refunded", 10, 3 * S);
        assert!(book.due(30 * S).is_empty(), "within alert_every");
        let due = book.due(60 * S);
        assert_eq!(kinds(&due), [(Kind::NewType, "a", 2)]);
        assert_eq!(due[0].pending.names, ["pix.refunded", "pix.sent"]);
        assert_eq!(
            (due[0].pending.first, due[0].pending.last),
            (Some(7), Some(9))
        );
        // Saved and read back with its names; a row saved before names still reads.
        let rows = book.changed_rows();
        let mut again = Book::new(EVERY);
        assert!(again.load(&rows[0].0, &rows[0].1));
        assert_eq!(again.due(60 * S)[0].pending.names.len(), 2);
        let old = r#"{"sent_at_ms":null,"pending":{"count":1,"first":null,"last":null,"since_ms":0,"out_of":null}}"#;
        assert!(again.load("alerts:dead:b", old));
    }

    #[test]
    fn a_level_on_a_route_keeps_its_start_and_is_cleared_by_route() {
        let mut book = Book::new(Duration::from_secs(60));
        book.level_on(Kind::PausedLong, "a", Some("erp"), 3, None, 100);
        book.level_on(Kind::PausedLong, "a", Some("erp"), 4, None, 900);
        book.level_on(Kind::PausedLong, "b", Some("crm"), 1, None, 200);
        assert_eq!(
            book.pending_on_routes(Kind::PausedLong),
            [("a".into(), "erp".into()), ("b".into(), "crm".into())]
        );
        let due = book.due(1000);
        let erp = due.iter().find(|d| d.endpoint == "a").unwrap();
        assert_eq!((erp.pending.count, erp.pending.since_ms), (4, 100));
        book.clear_on(Kind::PausedLong, "b", Some("crm"));
        assert_eq!(book.pending_on_routes(Kind::PausedLong).len(), 1);
        assert!(book.pending_on_routes(Kind::Dead).is_empty());
    }
}
