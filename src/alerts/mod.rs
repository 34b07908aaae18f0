//! Alerts to the owner: [`Alerts`], the background task that tells a human when something
//! needs them, through the `[alerts]` command and/or URL (`sink`).
//!
//! Each tick it reads the facts ([`Metrics::facts`]: storage errors, slow deliveries, the
//! duplicate window, webhooks accepted; [`Store::dead_after`]: events that went dead), turns
//! what changed into occurrences (`watch`), and sends what the rate limit lets through
//! (`rules`: at most one alert per kind and endpoint per `alert_every`, summarising what
//! happened meanwhile). Its state (each key's clock and summary, the dead-event cursor) is
//! saved in the store's `meta` table after every change, so a restart neither repeats an
//! alert nor forgets one: a dead event found at start that was never announced is announced
//! once. An alert that could not be sent is logged and tried again at the next tick; the task
//! never holds up intake or delivery, and a stuck store does not stop the storage alert.
//!
//! A tick, every quarter of the shortest of `alert_every` and the `quiet_after`s: (1) the
//! first time, load the saved state and which endpoints have events (one whole-table read, at
//! start only); no dead event is looked for before that load succeeds, so a failed read never
//! restarts the scan from the first event; (2) fold the facts and the dead deliveries after
//! the cursor into the `Book`; (3) send what is due, oldest key first, stopping at the first
//! failure; (4) save every changed key and the cursor in one store call. A crash between a
//! send and its save sends that alert again after the restart (at least once, like
//! deliveries); an alert is marked sent only once every sink took it. `serve` starts the task
//! when the config has `[alerts]`, and stops it after the worker and the pruner, before the
//! store closes. Thresholds: duplicates past 5 %, storage errors answered 503, deliveries
//! taking over 5 s (`metrics::SLOW_DELIVERY`, asserted at compile time to equal the worker's).
//!
//! With the canary running, each tick also reads the [`PublicPath`]: failed probes are
//! `unreachable`, their return after one was announced `reachable`. A `storage` or
//! `unreachable` alert says how much of each gateway's patience is left
//! ([`Patience::outlook`], from when the failures began).
//!
//! A route paused for over a day with deliveries waiting is `paused_long` (read only once such
//! a pause exists: the pauses each tick, the waiting deliveries then), repeated every
//! `alert_every` until it is resumed.
//!
//! What changed upstream: event types never stored and unrouted events are read from the
//! store each tick (`upstream`, its cursors and known types saved with the rest); events
//! lacking a field their provider's events always carry are counted at intake (`drift`, in
//! the facts), and a `drift` alert names the fields.
//!
//! A reconcile run that found what the gateway gave up on is `reconciled` (`reconciled`: the
//! runs kept in the store, each announced once, with what came back and, for a queue the
//! gateway left paused, when it deletes what it holds).
//!
//! The kinds and what one alert says: `kinds`.

mod kinds;
mod reconciled;
mod rules;
mod sink;
mod upstream;
mod watch;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, timeout};

use crate::config::{self, Endpoint, Patience};
use crate::metrics::Metrics;
use crate::public_path::PublicPath;
use crate::shutdown::Shutdown;
use crate::store::{Store, StoreError};
use crate::time::now_ms;

pub use kinds::{Alert, Kind};
use reconciled::Reconciled;
use rules::Book;
use sink::Sink;
use upstream::Upstream;
use watch::Watch;

/// The longest tick; shorter when `alert_every` or a `quiet_after` is short (tests).
pub const MAX_TICK: Duration = Duration::from_secs(10);

/// The shortest tick, whatever the durations.
pub const MIN_TICK: Duration = Duration::from_millis(100);

/// How long one store call of a tick may take before the tick goes on without it: a stuck
/// store must not hold up the storage alert.
const STORE_BOUND: Duration = Duration::from_secs(5);

/// A pause older than this with deliveries waiting is `paused_long`.
const PAUSED_LONG: Duration = Duration::from_secs(24 * 3600);

/// The first read of the saved state (and of the endpoints that have events, a whole-table
/// read) may take longer on a large file.
const LOAD_BOUND: Duration = Duration::from_secs(30);

/// The cursor moves with every recorded attempt; saved alone (with no alert state to save
/// beside it) at most this often, to spare the SD card a write per tick. A restart then scans
/// again from an older cursor: that range held no dead event, or the alert state saved with
/// it would have carried the cursor past it, so nothing is announced twice.
const CURSOR_SAVE_EVERY: Duration = Duration::from_secs(600);

/// The `meta` key of the dead-event cursor (an `attempts.id`).
const CURSOR_KEY: &str = "alerts:cursor:dead";

/// The running alerts task.
pub struct Alerts {
    task: JoinHandle<()>,
}

impl Alerts {
    /// Starts the task. `hidden_env`: the variables the alert command must not see.
    /// `alert_every`, the command, the URL and each endpoint's `quiet_after` are fixed at start.
    /// `public_path`: the canary's record, when it runs.
    pub fn start(
        config: &config::Alerts,
        endpoints: &[Arc<Endpoint>],
        hidden_env: Vec<String>,
        store: Store,
        metrics: Arc<Metrics>,
        public_path: Option<PublicPath>,
        shutdown: Shutdown,
    ) -> Alerts {
        let quiet_after: HashMap<String, Duration> = endpoints
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.quiet_after?)))
            .collect();
        let unrouted_after: HashMap<String, Duration> = endpoints
            .iter()
            .filter(|e| e.forwards())
            .map(|e| (e.name.clone(), e.unrouted_after))
            .collect();
        let durations = quiet_after.values().chain(unrouted_after.values());
        let tick = tick_for(config.every, durations.copied());
        let task = Task {
            book: Book::new(config.every),
            watch: Watch::new(quiet_after.clone(), Vec::new(), now_ms()),
            quiet_after,
            upstream: Upstream::new(unrouted_after),
            reconciled: Reconciled::new(endpoints.iter().any(|e| e.reconcile.is_some()), now_ms()),
            carries: endpoints
                .iter()
                .map(|e| {
                    let names = e.verifier.carries().iter().map(|c| c.name).collect();
                    (e.name.clone(), names)
                })
                .collect(),
            patience: endpoints
                .iter()
                .map(|e| (e.name.clone(), e.verifier.patience()))
                .collect(),
            public_path,
            sink: Sink::new(config, hidden_env),
            store,
            metrics,
            cursor: None,
            cursor_dirty: false,
            cursor_saved_at: tokio::time::Instant::now(),
            store_failing: false,
        };
        Alerts {
            task: tokio::spawn(crate::panics::named("alerts", run(task, tick, shutdown))),
        }
    }

    /// Waits for the task to end (it ends at the shutdown signal).
    pub async fn stop(self) {
        let _ = self.task.await;
    }
}

/// What the alerts task takes at start (`[alerts]`, each endpoint's `quiet_after`, and, with
/// `[alerts]`, each forwarding endpoint's `unrouted_after`), as a text to compare a reloaded
/// file's with: a change needs a restart. Never logged (a command's arguments may hold a token).
pub fn settings_at_start(alerts: Option<&config::Alerts>, endpoints: &[Arc<Endpoint>]) -> String {
    let quiet: Vec<_> = endpoints
        .iter()
        .filter_map(|e| Some((e.name.as_str(), e.quiet_after?)))
        .collect();
    let unrouted: Vec<_> = endpoints
        .iter()
        .filter(|e| alerts.is_some() && e.forwards())
        .map(|e| (e.name.as_str(), e.unrouted_after))
        .collect();
    format!("{alerts:?} {quiet:?} {unrouted:?}")
}

/// A quarter of the shortest duration that matters, within [`MIN_TICK`]..[`MAX_TICK`].
pub fn tick_for(every: Duration, quiet_after: impl Iterator<Item = Duration>) -> Duration {
    let shortest = quiet_after.fold(every, Duration::min);
    (shortest / 4).clamp(MIN_TICK, MAX_TICK)
}

async fn run(mut task: Task, tick: Duration, mut shutdown: Shutdown) {
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = ticks.tick() => {}
        }
        // A tick cut off by shutdown sends nothing more; an alert command running then is
        // killed with its group, and the alert, not marked sent, goes out after the restart.
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = task.tick() => {}
        }
    }
}

/// The task's own state.
struct Task {
    book: Book,
    watch: Watch,
    quiet_after: HashMap<String, Duration>,
    /// New event types and unrouted events (`upstream`).
    upstream: Upstream,
    /// Reconcile runs that found something missing (`reconciled`).
    reconciled: Reconciled,
    /// The fields each endpoint's provider's events always carry, by name (`drift`).
    carries: HashMap<String, Vec<&'static str>>,
    /// Each endpoint's gateway's give-up rule, in the config's order.
    patience: Vec<(String, Patience)>,
    public_path: Option<PublicPath>,
    sink: Sink,
    store: Store,
    metrics: Arc<Metrics>,
    /// None until the saved state is loaded: no dead event is looked for before, so a restart
    /// never starts again from the first one.
    cursor: Option<i64>,
    cursor_dirty: bool,
    cursor_saved_at: tokio::time::Instant,
    /// The last store call failed: said once, not every tick.
    store_failing: bool,
}

impl Task {
    async fn tick(&mut self) {
        if self.cursor.is_none() {
            self.load().await;
        }
        let now = now_ms();
        self.watch.fold(&self.metrics.facts(), &mut self.book, now);
        if let Some(path) = &self.public_path {
            self.watch
                .fold_path(&path.seen(), path.url(), &mut self.book);
        }
        if let Some(cursor) = self.cursor {
            match timeout(STORE_BOUND, self.store.dead_after(cursor)).await {
                Ok(Ok(batch)) => {
                    self.store_ok();
                    for dead in &batch.events {
                        let route = dead.route.as_deref();
                        self.book
                            .note_on(Kind::Dead, &dead.endpoint, route, 1, Some(dead.id), now);
                    }
                    if batch.cursor != cursor {
                        self.cursor = Some(batch.cursor);
                        self.cursor_dirty = true;
                    }
                }
                Ok(Err(e)) => self.store_failed("reading dead events", &Asked::Failed(e)),
                Err(_) => self.store_failed("reading dead events", &Asked::TimedOut),
            }
        }
        if self.cursor.is_some() {
            self.fold_paused_long(now).await;
            let look = self
                .upstream
                .look(&self.store, &mut self.book, now, STORE_BOUND);
            if let Err(u) = look.await {
                self.store_failed(u.what, &u.error.map_or(Asked::TimedOut, Asked::Failed));
            }
            let look = self
                .reconciled
                .look(&self.store, &mut self.book, now, STORE_BOUND);
            if let Err(u) = look.await {
                self.store_failed(u.what, &u.error.map_or(Asked::TimedOut, Asked::Failed));
            }
        }
        self.send_due(now).await;
        self.save().await;
    }

    /// Routes paused over [`PAUSED_LONG`] with deliveries waiting: a level per route, from
    /// when the pause was taken; the waiting deliveries are counted only when such a pause
    /// exists. A route resumed, or with nothing waiting any more, is cleared.
    async fn fold_paused_long(&mut self, now: i64) {
        let long_ago = now - PAUSED_LONG.as_millis() as i64;
        let pauses = match timeout(STORE_BOUND, self.store.route_pauses(now)).await {
            Ok(Ok(pauses)) => pauses,
            Ok(Err(e)) => return self.store_failed("reading the paused routes", &Asked::Failed(e)),
            Err(_) => return self.store_failed("reading the paused routes", &Asked::TimedOut),
        };
        let long: Vec<_> = pauses
            .into_iter()
            .filter(|p| p.paused_at_ms <= long_ago)
            .collect();
        let mut now_long = BTreeSet::new();
        if !long.is_empty() {
            let waiting = match timeout(STORE_BOUND, self.store.unfinished_by_route()).await {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => {
                    return self.store_failed("counting the waiting deliveries", &Asked::Failed(e));
                }
                Err(_) => {
                    return self.store_failed("counting the waiting deliveries", &Asked::TimedOut);
                }
            };
            for pause in &long {
                let count = waiting
                    .iter()
                    .find(|(e, r, _)| *e == pause.endpoint && *r == pause.route)
                    .map_or(0, |(_, _, n)| *n);
                if count > 0 {
                    self.book.level_on(
                        Kind::PausedLong,
                        &pause.endpoint,
                        Some(&pause.route),
                        count.unsigned_abs(),
                        None,
                        pause.paused_at_ms,
                    );
                    now_long.insert((pause.endpoint.clone(), pause.route.clone()));
                }
            }
        }
        // Pending since an earlier tick (or a run before a restart) and no longer true.
        for (endpoint, route) in self.book.pending_on_routes(Kind::PausedLong) {
            if !now_long.contains(&(endpoint.clone(), route.clone())) {
                self.book
                    .clear_on(Kind::PausedLong, &endpoint, Some(route.as_str()));
            }
        }
    }

    /// The saved clocks, summaries and cursor, and which endpoints have received events.
    async fn load(&mut self) {
        let state = match timeout(LOAD_BOUND, self.store.alert_state()).await {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => return self.store_failed("loading the alert state", &Asked::Failed(e)),
            Err(_) => return self.store_failed("loading the alert state", &Asked::TimedOut),
        };
        let mut cursor = 0;
        for (key, value) in &state {
            if key == CURSOR_KEY {
                cursor = value.parse().unwrap_or(0);
            } else if !self.reconciled.load(key, value)
                && !self.upstream.load(key, value)
                && !self.book.load(key, value)
            {
                tracing::debug!(key, "an alert state row that is not understood; ignored");
            }
        }
        if !self.quiet_after.is_empty() {
            let names = self.quiet_after.keys().cloned().collect();
            match timeout(LOAD_BOUND, self.store.endpoints_with_events(names)).await {
                Ok(Ok(names)) => self.watch.received_before(names),
                Ok(Err(e)) => {
                    self.store_failed("reading which endpoints have events", &Asked::Failed(e))
                }
                Err(_) => {
                    self.store_failed("reading which endpoints have events", &Asked::TimedOut)
                }
            }
        }
        self.store_ok();
        self.upstream.loaded();
        self.cursor = Some(cursor);
    }

    /// Sends what is due, oldest key first; stops at the first failure (the sink is likely
    /// down for all of them) and leaves the rest for the next tick.
    async fn send_due(&mut self, now: i64) {
        for due in self.book.due(now) {
            let after = match due.kind {
                Kind::Unrouted => self.upstream.unrouted_after(&due.endpoint),
                _ => self.quiet_after.get(&due.endpoint).copied(),
            };
            let route = due.route.as_deref();
            let alert = Alert::new(due.kind, &due.endpoint, route, &due.pending, after, now);
            let alert = self.with_outlook(alert, due.kind, &due.endpoint, now);
            match self.sink.send(&alert.to_json()).await {
                Ok(()) => {
                    tracing::info!(
                        kind = alert.kind,
                        endpoint = alert.endpoint,
                        route,
                        count = alert.count,
                        "alert sent"
                    );
                    self.book.sent_on(due.kind, &due.endpoint, route, now);
                }
                Err(why) => {
                    tracing::warn!(
                        kind = alert.kind,
                        endpoint = alert.endpoint,
                        error = why,
                        "alert not sent; trying again at the next tick"
                    );
                    return;
                }
            }
        }
    }

    /// A `storage` alert with how much of its gateway's patience is left, an `unreachable`
    /// one with the probe's cause and every endpoint's gateway's.
    fn with_outlook(&self, mut alert: Alert, kind: Kind, endpoint: &str, now: i64) -> Alert {
        match kind {
            Kind::Storage => {
                let patience = self.patience.iter().find(|(name, _)| name == endpoint);
                if let (Some((_, patience)), Some((since, failures))) =
                    (patience, self.watch.storage_run(endpoint))
                {
                    alert = alert.and(&patience.outlook(since, now, Some(failures)));
                }
            }
            Kind::Unreachable => {
                let failing = self.public_path.as_ref().and_then(|p| p.seen().failing);
                if let Some(run) = &failing {
                    alert.cause = Some(run.cause);
                    alert = alert.and(&format!("Last cause ({}): {}.", run.cause, run.detail));
                }
                if let Some(since) = self.watch.path_down_since() {
                    for (name, patience) in &self.patience {
                        let outlook = patience.outlook(since, now, None);
                        alert = alert.and(&format!("Endpoint {name}: {outlook}"));
                    }
                }
            }
            Kind::Reconciled => {
                let patience = self.patience.iter().find(|(name, _)| name == endpoint);
                alert = alert.and(&self.reconciled.detail(endpoint, patience.map(|(_, p)| p)));
            }
            Kind::Drift => {
                let names = self.carries.get(endpoint).map(|n| n.join("`, `"));
                if let Some(names) = names.filter(|n| !n.is_empty()) {
                    alert = alert.and(&format!("Its provider's events always carry `{names}`."));
                }
            }
            _ => {}
        }
        alert
    }

    /// Saves what changed (clocks, summaries and the cursor, in one transaction), as delivery
    /// bookkeeping: no fsync of its own, durable with the next intake commit. A power cut that
    /// loses it sends an alert again, never loses one: the cursor goes back with it.
    async fn save(&mut self) {
        let changed =
            self.book.is_dirty() || self.upstream.is_dirty() || self.reconciled.is_dirty();
        let cursor_due = (self.cursor_dirty || self.upstream.cursors_dirty())
            && (changed || self.cursor_saved_at.elapsed() >= CURSOR_SAVE_EVERY);
        if !changed && !cursor_due {
            return;
        }
        let mut rows = self.book.changed_rows();
        rows.extend(self.upstream.changed_rows(cursor_due));
        rows.extend(self.reconciled.changed_rows());
        if let (true, Some(cursor)) = (cursor_due, self.cursor) {
            rows.push((CURSOR_KEY.to_string(), cursor.to_string()));
        }
        match timeout(STORE_BOUND, self.store.save_alert_state(rows)).await {
            Ok(Ok(())) => {
                self.store_ok();
                self.book.saved();
                self.upstream.saved(cursor_due);
                self.reconciled.saved();
                if cursor_due {
                    self.cursor_dirty = false;
                    self.cursor_saved_at = tokio::time::Instant::now();
                }
            }
            Ok(Err(e)) => self.store_failed("saving the alert state", &Asked::Failed(e)),
            Err(_) => self.store_failed("saving the alert state", &Asked::TimedOut),
        }
    }

    fn store_failed(&mut self, what: &str, e: &Asked) {
        if matches!(e, Asked::Failed(StoreError::Closed))
            || std::mem::replace(&mut self.store_failing, true)
        {
            return;
        }
        tracing::warn!(error = %e, "alerts: {what} failed; trying again at the next tick");
    }

    fn store_ok(&mut self) {
        self.store_failing = false;
    }
}

/// Why a question to the store went unanswered: the store's error, or no answer within
/// [`STORE_BOUND`] (the task asks again at its next tick either way).
#[derive(Debug, thiserror::Error)]
enum Asked {
    #[error(transparent)]
    Failed(StoreError),
    #[error("no answer within {STORE_BOUND:?}")]
    TimedOut,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_follows_the_shortest_duration() {
        let hour = Duration::from_secs(3600);
        assert_eq!(tick_for(hour, std::iter::empty()), MAX_TICK);
        let two = Duration::from_secs(2);
        assert_eq!(
            tick_for(two, std::iter::empty()),
            Duration::from_millis(500)
        );
        assert_eq!(
            tick_for(hour, [two, hour].into_iter()),
            Duration::from_millis(500)
        );
        assert_eq!(
            tick_for(Duration::from_millis(10), std::iter::empty()),
            MIN_TICK
        );
    }
}
