//! `reconciled` (issue 26): a reconcile run found what the gateway gave up on and portaria had
//! never received. The runs are read each tick from the store (`Store::reconcile_runs`, one
//! `meta` read, only when an endpoint reconciles), so the schedule's runs, another instance's
//! and a command's are announced alike. Each run is news once: the start of the last run
//! looked at, per endpoint, is saved (`alerts:cursor:reconcile`); a run older than the task's
//! start is not news when nothing was saved (a first start, or an endpoint new to reconcile).
//!
//! The alert says what the run got back and what is left, and, for a queue the gateway left
//! paused (Asaas: `LastRun::paused_since_ms`), when the gateway deletes what it holds (its
//! [`Patience`] rule's days after the pause; counted from when runs first saw it paused, so
//! "at the latest").

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::kinds::Kind;
use super::rules::Book;
use super::upstream::{Unanswered, ask};
use crate::config::Patience;
use crate::store::{LastRun, Store};
use crate::time::rfc3339;

const SEEN: &str = "alerts:cursor:reconcile";

/// What the task knows of the runs.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Whether any endpoint reconciles (else the store is never asked).
    any: bool,
    /// The task's start: a run before it is not news for an endpoint with nothing saved.
    started_ms: i64,
    /// Per endpoint, the start of the last run looked at (unix ms).
    seen: BTreeMap<String, i64>,
    /// The last run announced per endpoint, for the alert's sentence.
    last: HashMap<String, LastRun>,
    dirty: bool,
}

impl Reconciled {
    pub fn new(any: bool, started_ms: i64) -> Reconciled {
        Reconciled {
            any,
            started_ms,
            ..Reconciled::default()
        }
    }

    /// Takes its saved row (true), else leaves the row (false).
    pub fn load(&mut self, key: &str, value: &str) -> bool {
        if key != SEEN {
            return false;
        }
        self.seen = serde_json::from_str(value).unwrap_or_default();
        true
    }

    /// One tick's look: each run not looked at yet that found something missing is noted.
    pub async fn look(
        &mut self,
        store: &Store,
        book: &mut Book,
        now: i64,
        bound: Duration,
    ) -> Result<(), Unanswered> {
        if !self.any {
            return Ok(());
        }
        let runs = ask(bound, "reading the reconcile runs", store.reconcile_runs()).await?;
        for run in LastRun::read_all(&runs) {
            let Some(at) = run.at_ms else { continue };
            let news = match self.seen.get(&run.endpoint) {
                Some(seen) => at > *seen,
                None => at >= self.started_ms,
            };
            if self.seen.get(&run.endpoint) != Some(&at) {
                self.seen.insert(run.endpoint.clone(), at);
                self.dirty = true;
            }
            if news && !run.missing.is_empty() {
                let n = run.missing.len() as u64;
                book.note(Kind::Reconciled, &run.endpoint, n, None, now);
                self.last.insert(run.endpoint.clone(), run);
            }
        }
        Ok(())
    }

    /// What the last run announced of `endpoint` got back and left, for the alert.
    pub fn detail(&self, endpoint: &str, patience: Option<&Patience>) -> String {
        let Some(run) = self.last.get(endpoint) else {
            return String::new();
        };
        let missing = run.missing.len() as u64;
        let mut ids: Vec<&str> = run.missing.iter().take(10).map(String::as_str).collect();
        let more = run.missing.len().saturating_sub(ids.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        if ids.is_empty() {
            ids.push("-");
        }
        let mut text = format!(
            "The last run ({} checked) found {missing} never received ({}{more})",
            run.checked,
            ids.join(", ")
        );
        match (run.recovered, &run.recovered_by) {
            (n, Some(by)) if n >= missing => text.push_str(&format!(" and got all back, {by}.")),
            (0, _) => text.push_str(" and got none back."),
            (n, _) => text.push_str(&format!(" and got {n} back.")),
        }
        if let Some(says) = run.says.as_deref().filter(|_| !run.ok) {
            text.push_str(&format!(" It says: {says}"));
            if !says.ends_with('.') {
                text.push('.');
            }
        }
        let deletes = patience.and_then(|p| Some((p.gateway, p.deletes_paused_after_days()?)));
        if let (Some(since), Some((gateway, days))) = (run.paused_since_ms, deletes) {
            let by = since.saturating_add(i64::from(days) * 86_400_000);
            text.push_str(&format!(
                " {gateway} deletes the events of a paused queue {days} days after the pause: \
                 this one's by {} at the latest (seen paused since {}).",
                rfc3339(by),
                rfc3339(since)
            ));
        }
        text
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Its row to save, when it changed.
    pub fn changed_rows(&self) -> Vec<(String, String)> {
        match (self.dirty, serde_json::to_string(&self.seen)) {
            (true, Ok(value)) => vec![(SEEN.to_string(), value)],
            _ => Vec::new(),
        }
    }

    pub fn saved(&mut self) {
        self.dirty = false;
    }
}
