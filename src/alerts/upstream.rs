//! What changed upstream (issue 27): event types an endpoint had never stored (`new_type`) and
//! events that matched no route (`unrouted`), read from the store each tick, folded into the
//! [`Book`]. (`drift`, a field the provider's events always carry missing, is counted at intake
//! and folded by `watch`.)
//!
//! `new_type`: each endpoint's known types are kept in `meta` (`alerts:types:<endpoint>`, with
//! when the endpoint was first seen), so a type seen once is known for good, pruned or not.
//! The store is read after a cursor on event ids (`alerts:cursor:types`). The very first look
//! starts from the newest event, never reading the past (a whole-table read on a large file);
//! the **learning day**: a type is announced only when its first event came at least
//! [`LEARNING`] after the first event the task saw of that endpoint, so neither a new endpoint's
//! first events nor, after an upgrade, the types of a day's traffic are news. Each type is
//! announced once, by name; at most [`MAX_TYPES`] are kept per endpoint (past that, none more
//! is learned or announced).
//!
//! `unrouted`: for each forwarding endpoint, the events received in the span that crossed its
//! `unrouted_after` since the last look (`alerts:cursor:unrouted`: the last look's time) and
//! still stored only: no route took them, and nobody replayed them to a route meanwhile. The
//! first look ever starts the spans (nothing older is counted); after a restart they resume
//! from the saved look. On PostgreSQL only the instance announcing alerts is answered.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::timeout;

use super::kinds::Kind;
use super::rules::Book;
use crate::store::{ALERT_KEY_PREFIX, Store, StoreError, TypesBatch};

/// A type first seen less than this after the endpoint's first event is learned silently.
pub const LEARNING: Duration = Duration::from_secs(24 * 3600);

/// Known types kept per endpoint.
pub const MAX_TYPES: usize = 1000;

const TYPES_CURSOR: &str = "alerts:cursor:types";
const UNROUTED_LOOK: &str = "alerts:cursor:unrouted";
const KNOWN: &str = "types:";

/// One endpoint's known types, as saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Known {
    /// The first event the task saw of the endpoint (unix ms).
    since_ms: Option<i64>,
    types: BTreeSet<String>,
}

/// A store call of the tick that did not answer: what it was, and the store's error (None:
/// no answer in time).
pub struct Unanswered {
    pub what: &'static str,
    pub error: Option<StoreError>,
}

/// The state of both kinds.
#[derive(Debug, Default)]
pub struct Upstream {
    /// Each forwarding endpoint's `unrouted_after`.
    unrouted_after: HashMap<String, Duration>,
    known: HashMap<String, Known>,
    /// Both None until the saved state is loaded, and until the first look after it.
    types_cursor: Option<i64>,
    unrouted_look: Option<i64>,
    loaded: bool,
    /// Endpoints whose known types changed since the last save.
    dirty: BTreeSet<String>,
    cursors_dirty: bool,
}

impl Upstream {
    pub fn new(unrouted_after: HashMap<String, Duration>) -> Upstream {
        Upstream {
            unrouted_after,
            ..Upstream::default()
        }
    }

    /// The endpoint's `unrouted_after`, if it forwards.
    pub fn unrouted_after(&self, endpoint: &str) -> Option<Duration> {
        self.unrouted_after.get(endpoint).copied()
    }

    /// Takes one saved `meta` row if it is one of its own (true), else leaves it (false).
    pub fn load(&mut self, key: &str, value: &str) -> bool {
        match key {
            TYPES_CURSOR => self.types_cursor = value.parse().ok(),
            UNROUTED_LOOK => self.unrouted_look = value.parse().ok(),
            _ => {
                let Some(endpoint) = key
                    .strip_prefix(ALERT_KEY_PREFIX)
                    .and_then(|k| k.strip_prefix(KNOWN))
                else {
                    return false;
                };
                if let Ok(known) = serde_json::from_str(value) {
                    self.known.insert(endpoint.to_string(), known);
                }
            }
        }
        true
    }

    /// The saved state was read (with none of its rows, on a first start).
    pub fn loaded(&mut self) {
        self.loaded = true;
    }

    /// One tick's look at the store: the types after the cursor, the unrouted spans.
    pub async fn look(
        &mut self,
        store: &Store,
        book: &mut Book,
        now: i64,
        bound: Duration,
    ) -> Result<(), Unanswered> {
        if !self.loaded {
            return Ok(());
        }
        let asked = self.types_cursor;
        let batch = ask(bound, "reading the new event types", async {
            store.event_types_after(asked).await
        })
        .await?;
        self.fold_types(&batch, asked.is_none(), book, now);
        let Some(last) = self.unrouted_look else {
            self.unrouted_look = Some(now);
            self.cursors_dirty = true;
            return Ok(());
        };
        if now <= last {
            return Ok(());
        }
        for (endpoint, after) in &self.unrouted_after {
            let after = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            let (from, to) = (last.saturating_sub(after), now.saturating_sub(after));
            let found = ask(bound, "counting the unrouted events", async {
                store.unrouted_between(endpoint.clone(), from, to).await
            })
            .await?;
            // The summary's first and last ids: the span's lowest, then its highest.
            match found.count {
                0 => {}
                1 => book.note(Kind::Unrouted, endpoint, 1, found.first_id, now),
                n => {
                    book.note(Kind::Unrouted, endpoint, n - 1, found.first_id, now);
                    book.note(Kind::Unrouted, endpoint, 1, found.last_id, now);
                }
            }
        }
        self.unrouted_look = Some(now);
        self.cursors_dirty = true;
        Ok(())
    }

    /// Folds one batch of types: a type not known is learned, and announced once the
    /// endpoint is past its learning day. `start`: the first look, which reads nothing.
    fn fold_types(&mut self, batch: &TypesBatch, start: bool, book: &mut Book, now: i64) {
        let learning = i64::try_from(LEARNING.as_millis()).unwrap_or(i64::MAX);
        for t in &batch.types {
            let known = self.known.entry(t.endpoint.clone()).or_default();
            let since = *known.since_ms.get_or_insert(t.first_ms);
            if known.types.contains(&t.event_type) || known.types.len() >= MAX_TYPES {
                continue;
            }
            known.types.insert(t.event_type.clone());
            self.dirty.insert(t.endpoint.clone());
            if !start && t.first_ms >= since.saturating_add(learning) {
                book.note_named(Kind::NewType, &t.endpoint, &t.event_type, t.first_id, now);
            }
        }
        if self.types_cursor != Some(batch.cursor) {
            self.types_cursor = Some(batch.cursor);
            self.cursors_dirty = true;
        }
    }

    /// Whether known types changed (saved at once), and whether a cursor moved (saved with
    /// them, or alone at the caller's pace).
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn cursors_dirty(&self) -> bool {
        self.cursors_dirty
    }

    /// The `meta` rows to save: the changed known types, and the cursors when `cursors`.
    pub fn changed_rows(&self, cursors: bool) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = self
            .dirty
            .iter()
            .filter_map(|endpoint| {
                let value = serde_json::to_string(self.known.get(endpoint)?).ok()?;
                Some((format!("{ALERT_KEY_PREFIX}{KNOWN}{endpoint}"), value))
            })
            .collect();
        if cursors {
            for (key, value) in [
                (TYPES_CURSOR, self.types_cursor),
                (UNROUTED_LOOK, self.unrouted_look),
            ] {
                if let Some(value) = value {
                    rows.push((key.to_string(), value.to_string()));
                }
            }
        }
        rows
    }

    /// The rows of [`Upstream::changed_rows`] were saved.
    pub fn saved(&mut self, cursors: bool) {
        self.dirty.clear();
        if cursors {
            self.cursors_dirty = false;
        }
    }
}

/// `call` within `bound`, or what did not answer.
pub(super) async fn ask<T>(
    bound: Duration,
    what: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, Unanswered> {
    match timeout(bound, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(Unanswered {
            what,
            error: Some(e),
        }),
        Err(_) => Err(Unanswered { what, error: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TypeSeen;

    const HOUR: i64 = 3_600_000;

    fn batch(types: &[(&str, &str, i64, i64)], cursor: i64) -> TypesBatch {
        TypesBatch {
            types: types
                .iter()
                .map(|(endpoint, event_type, id, ms)| TypeSeen {
                    endpoint: endpoint.to_string(),
                    event_type: event_type.to_string(),
                    first_id: *id,
                    first_ms: *ms,
                })
                .collect(),
            cursor,
        }
    }

    fn due(book: &mut Book, now: i64) -> Vec<(String, Vec<String>)> {
        let due = book.due(now);
        for d in &due {
            book.sent(d.kind, &d.endpoint, now);
        }
        due.into_iter()
            .map(|d| (d.endpoint, d.pending.names))
            .collect()
    }

    #[test]
    fn a_type_never_stored_is_announced_once_after_the_learning_day() {
        let mut up = Upstream::new(HashMap::new());
        let mut book = Book::new(Duration::from_secs(60));
        // The first look reads nothing of the past: it only places the cursor.
        up.fold_types(&batch(&[], 10), true, &mut book, 0);
        assert_eq!(up.types_cursor, Some(10));
        // A new endpoint's first day: every type is learned, none announced.
        let first_day = [
            ("a", "payment.created", 11, 0),
            ("a", "payment.paid", 12, HOUR),
            ("a", "refund.created", 13, 23 * HOUR),
        ];
        up.fold_types(&batch(&first_day, 13), false, &mut book, 23 * HOUR);
        assert!(due(&mut book, 23 * HOUR).is_empty());
        // After it: a known type is not news, a new one is, by name, once.
        let later = [
            ("a", "payment.paid", 14, 25 * HOUR),
            ("a", "pix.sent", 15, 25 * HOUR),
        ];
        up.fold_types(&batch(&later, 15), false, &mut book, 25 * HOUR);
        assert_eq!(
            due(&mut book, 25 * HOUR),
            [("a".to_string(), vec!["pix.sent".to_string()])]
        );
        up.fold_types(&batch(&later, 15), false, &mut book, 30 * HOUR);
        assert!(
            due(&mut book, 30 * HOUR).is_empty(),
            "read again: known now"
        );
        // Another endpoint has its own learning day.
        up.fold_types(
            &batch(&[("b", "x", 16, 30 * HOUR)], 16),
            false,
            &mut book,
            30 * HOUR,
        );
        assert!(due(&mut book, 30 * HOUR).is_empty());
    }

    #[test]
    fn known_types_and_cursors_survive_a_save_and_load() {
        let mut up = Upstream::new(HashMap::new());
        let mut book = Book::new(Duration::from_secs(60));
        up.loaded();
        up.fold_types(&batch(&[("a", "paid", 1, 0)], 1), false, &mut book, 0);
        up.unrouted_look = Some(5);
        assert!(up.is_dirty() && up.cursors_dirty());
        assert_eq!(up.changed_rows(false).len(), 1, "the cursors wait");
        let rows = up.changed_rows(true);
        up.saved(true);
        assert!(!up.is_dirty() && !up.cursors_dirty());
        let mut again = Upstream::new(HashMap::new());
        for (key, value) in &rows {
            assert!(again.load(key, value), "{key}");
        }
        assert!(!again.load("alerts:dead:a", "{}"));
        assert_eq!(
            (again.types_cursor, again.unrouted_look),
            (Some(1), Some(5))
        );
        // Known from before the restart, and past the learning day: only the new one.
        let day = 25 * HOUR;
        let seen = [("a", "paid", 7, day), ("a", "refunded", 8, day)];
        again.fold_types(&batch(&seen, 8), false, &mut book, day);
        assert_eq!(
            due(&mut book, day),
            [("a".to_string(), vec!["refunded".to_string()])]
        );
    }

    #[test]
    fn past_the_cap_no_type_is_learned_nor_announced() {
        let mut up = Upstream::new(HashMap::new());
        let mut book = Book::new(Duration::from_secs(60));
        let names: Vec<String> = (0..MAX_TYPES).map(|n| format!("t{n}")).collect();
        let full: Vec<(&str, &str, i64, i64)> =
            names.iter().map(|n| ("a", n.as_str(), 1, 0)).collect();
        up.fold_types(&batch(&full, 1), false, &mut book, 0);
        up.fold_types(
            &batch(&[("a", "one.more", 2, 48 * HOUR)], 2),
            false,
            &mut book,
            0,
        );
        assert!(due(&mut book, 48 * HOUR).is_empty());
        assert_eq!(up.known["a"].types.len(), MAX_TYPES);
    }
}
