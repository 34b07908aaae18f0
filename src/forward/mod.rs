//! The forwarding worker: delivers every stored event to its routes' command, URL or pipe
//! handler, at least once, with retries (the schedule's gaps ±10 %) and a dead-letter state.
//!
//! It is mini-redis's purge loop with the database as the queue: one task owns the lanes,
//! claims what is due, runs each delivery in a slot (which records the attempt and claims its
//! lane's next in one commit, until nothing is due), then sleeps until the next is due, a new
//! event is committed (`Notify`), a slot ends, shutdown, or another process committed (the
//! 2-second look at [`Store::data_version`]; on PostgreSQL at once, [`Store::changed_elsewhere`]).
//! Nothing about delivery lives only in memory: an event is `delivering` before its attempt
//! starts, so one cut off by a crash (or, at shutdown, by [`SHUTDOWN_GRACE`]) is found at the
//! next start ([`Store::recover`]) and goes out again. A target's [`Outcome`] becomes the
//! store's [`AfterAttempt`]; finished events go to [`rollup`]. Targets are told the event's
//! signed id and whether its type was signed, as stored at intake; no program they run sees
//! the config's secret variables (`command::hidden_variables`). An endpoint that verifies by
//! fetching (`fetch`) has the payment an event names fetched from the gateway's API before
//! its target runs, and the target gets it too.
//!
//! Each route of an endpoint is a lane with its own target, schedule and concurrency, and its
//! own delivery rows: a failing route holds back no other. With `concurrency = 1` and no
//! `order_by`, a lane delivers strictly in arrival order: the oldest unfinished delivery is the
//! only candidate, so one waiting for its retry holds back the ones behind it. With
//! `order_by`, that holds per ordering key only ([`Order::ByKey`]): different keys go in
//! parallel up to the concurrency, and an event without the key is a lane of its own.
//!
//! A reload swaps the lanes of the running worker in place ([`Worker::reconfigure`]): stopping
//! it would cut slow deliveries off and need [`Store::recover`], safe only at start-up. A
//! replaced or removed lane is *retired*: its slots finish and record the attempt they run,
//! then claim nothing more, counting against its concurrency until they end; a lane whose
//! endpoint no longer forwards keeps no capacity and its events wait in the database (the
//! start-up warning repeated). No reload changes an event's state: none is lost or doubled.

mod attempt;
pub mod command;
mod fetch;
pub mod http;
pub mod pipe;
pub mod rollup;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{Endpoint, Route, Target};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::store::{AfterAttempt, ClaimNext, LaneClaim, Order, RoutePause, Store, StoreError};
use crate::time::now_ms;

/// How long deliveries in flight may run on after shutdown begins. Past it they are cut off,
/// stay `delivering` in the database, and go out again after the next start.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How often the worker looks whether another process (`portaria events replay`) changed the
/// database. A cheap read of `PRAGMA data_version`; the hot path never waits on it.
pub const EXTERNAL_CHECK: Duration = Duration::from_secs(2);

/// A delivery that takes longer than this is logged as slow (docs/operations.md, "Metrics and health").
pub const SLOW_DELIVERY: Duration = Duration::from_secs(5);

/// One delivery attempt's input: the claimed event, as the store hands it over.
pub use crate::store::Delivery;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// A short error text, at most a few KiB, safe to log and store. Retried on the schedule.
    Failed(String),
    /// Failed in a way no retry can fix (a handler's `EX_DATAERR`, an HTTP 400): dead now,
    /// whatever is left of the schedule.
    Permanent(String),
    /// Failed, and the target said when to come back (`EX_TEMPFAIL` has no time; HTTP
    /// `Retry-After` and a pipe handler's `retry_after` do): retried after `wait` instead of
    /// the schedule's gap, but never later than the schedule's longest step, and never past
    /// its end.
    RetryAfter {
        error: String,
        wait: Duration,
    },
    /// The target is gone for good (HTTP 410): no event of this route can be delivered until
    /// the owner changes it, so the route is paused with this reason, and the delivery waits
    /// (due again at once when the route is resumed).
    Gone(String),
}

/// Where one route's events go.
enum Runner {
    Command(command::CommandTarget),
    /// Boxed: the HTTP client is much larger than a command line.
    Http(Box<http::HttpTarget>),
    Pipe(pipe::PipeTarget),
}

impl Runner {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        match self {
            Runner::Command(target) => target.deliver(d).await,
            Runner::Http(target) => target.deliver(d).await,
            Runner::Pipe(target) => target.deliver(d, &d.route).await,
        }
    }

    /// At shutdown, after the deliveries: a pipe handler is closed and waited for.
    async fn close(&self) {
        if let Runner::Pipe(target) = self {
            target.close().await;
        }
    }
}

/// One route's queue, as the worker loop sees it.
struct Lane {
    /// What every delivery slot of this lane shares.
    shared: Arc<LaneShared>,
    concurrency: usize,
    /// Slots running now; a slot frees when it finds nothing more due.
    in_flight: usize,
}

/// What a delivery slot needs to run attempts for one route.
struct LaneShared {
    endpoint: String,
    route: String,
    runner: Runner,
    /// The endpoint's verify-by-fetching, if it has one (`fetch`).
    fetch: Option<Arc<fetch::Fetcher>>,
    /// The route's `timeout_secs`: a target's run, and a fetch before it, each within it.
    timeout: Duration,
    retry: Box<[Duration]>,
    /// Which due deliveries may go (strict order, per key, any).
    order: Order,
    store: Store,
    metrics: Arc<Metrics>,
    /// Set when a reload replaced or removed this lane: its slots finish the attempt they are
    /// running and then claim nothing more.
    retired: AtomicBool,
    /// Set while the route is paused (`portaria route pause`, read from the store each round):
    /// as with `retired`, its slots finish their attempt and claim nothing more.
    paused: AtomicBool,
    /// Events whose delivery here finished, for their roll-up status ([`rollup`]).
    finished: mpsc::UnboundedSender<i64>,
}

impl Lane {
    /// The lane of one route of `endpoint`; a command target runs with `hide_env` removed
    /// from its environment. `fetch`: the endpoint's fetching, shared by its lanes.
    fn new(
        endpoint: &Endpoint,
        route: &Route,
        fetch: Option<Arc<fetch::Fetcher>>,
        hide_env: &[String],
        store: &Store,
        metrics: &Arc<Metrics>,
        finished: &mpsc::UnboundedSender<i64>,
    ) -> Lane {
        let forward = &route.forward;
        let runner = match &forward.target {
            Target::Command(argv) => Runner::Command(
                command::CommandTarget::new(argv.clone(), forward.timeout)
                    .hiding_env(hide_env.to_vec()),
            ),
            Target::Url { url, signing_key } => Runner::Http(Box::new(http::HttpTarget::new(
                url.clone(),
                forward.timeout,
                signing_key.clone(),
            ))),
            Target::Pipe { argv } => Runner::Pipe(pipe::PipeTarget::start(
                argv.clone(),
                forward.timeout,
                hide_env.to_vec(),
                endpoint.name.clone(),
            )),
        };
        let order = match (&route.order_by, forward.concurrency) {
            (Some(_), _) => Order::ByKey,
            (None, 1) => Order::Strict,
            (None, _) => Order::Any,
        };
        Lane {
            shared: Arc::new(LaneShared {
                endpoint: endpoint.name.clone(),
                route: route.name.clone(),
                runner,
                fetch,
                timeout: forward.timeout,
                retry: forward.retry.clone().into(),
                order,
                store: store.clone(),
                metrics: metrics.clone(),
                retired: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                finished: finished.clone(),
            }),
            concurrency: forward.concurrency,
            in_flight: 0,
        }
    }

    fn is(&self, endpoint: &str, route: &str) -> bool {
        self.shared.endpoint == endpoint && self.shared.route == route
    }

    fn free(&self) -> usize {
        self.concurrency.saturating_sub(self.in_flight)
    }

    /// Its slots stop after their current attempt; the lane itself claims nothing more.
    fn retire(&mut self) {
        self.shared.retired.store(true, Ordering::Relaxed);
        self.concurrency = 0;
    }
}

/// Puts a reloaded set of lanes in place of `lanes`. Indices stay stable (slots report to
/// theirs when they end): a replaced lane keeps its place and its count of busy slots, a
/// removed one stays retired with no capacity, a new one is appended.
fn replace_lanes(lanes: &mut Vec<Lane>, new: Vec<Lane>) {
    for lane in lanes.iter_mut() {
        lane.retire();
    }
    for lane in new {
        match lanes
            .iter_mut()
            .find(|l| l.is(&lane.shared.endpoint, &lane.shared.route))
        {
            Some(old) => {
                old.shared = lane.shared;
                old.concurrency = lane.concurrency;
            }
            None => lanes.push(lane),
        }
    }
}

/// The running worker; [`Worker::stop`] waits for it after the shutdown signal fired.
pub struct Worker {
    task: Option<JoinHandle<()>>,
    /// Reloaded lanes for the running task.
    lanes: Option<mpsc::UnboundedSender<Vec<Lane>>>,
    store: Store,
    new_event: Arc<Notify>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    /// Writes the events' roll-up status in batches; stopped after the worker task.
    rollup: rollup::RollUp,
}

impl Worker {
    /// Recovers attempts cut short by the last stop, then starts delivering the events of
    /// every endpoint that forwards. Command targets never see the variables in `hide_env`
    /// (the config's secret variables).
    pub async fn start(
        endpoints: &[Arc<Endpoint>],
        hide_env: &[String],
        store: Store,
        new_event: Arc<Notify>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> Result<Worker, StoreError> {
        let recovered = store.recover(now_ms()).await?;
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "deliveries interrupted by the last stop will be retried"
            );
        }
        let mut worker = Worker {
            task: None,
            lanes: None,
            rollup: rollup::RollUp::start(store.clone()),
            store,
            new_event,
            metrics,
            shutdown,
        };
        worker.reconfigure(endpoints, hide_env).await?;
        Ok(worker)
    }

    /// Delivers from now on as `endpoints` say (at start-up, and after a reload): new lanes
    /// start, changed ones are swapped in place, removed ones retire (see the module doc).
    /// Starts the worker task the first time an endpoint forwards.
    pub async fn reconfigure(
        &mut self,
        endpoints: &[Arc<Endpoint>],
        hide_env: &[String],
    ) -> Result<(), StoreError> {
        let finished = &self.rollup.sender();
        let (store, metrics) = (&self.store, &self.metrics);
        let lanes: Vec<Lane> = endpoints
            .iter()
            .flat_map(|endpoint| {
                // One client (and one read of the system's roots) per endpoint, not per route.
                let provider = endpoint.verifier.provider();
                let fetch =
                    fetch::Fetcher::new(provider, endpoint.reconcile.as_ref()).map(Arc::new);
                endpoint.routes.iter().map(move |route| {
                    Lane::new(
                        endpoint,
                        route,
                        fetch.clone(),
                        hide_env,
                        store,
                        metrics,
                        finished,
                    )
                })
            })
            .collect();
        // Deliveries accepted for a route that is now gone (or whose endpoint is) would wait
        // forever unnoticed (pruning never takes unfinished events). A failing check (the
        // database locked by another process) must not keep the new lanes out: it is reported
        // after they are in place.
        let unfinished = self.store.unfinished_by_route().await;
        for (endpoint, route, waiting) in unfinished.iter().flatten() {
            if !lanes.iter().any(|lane| lane.is(endpoint, route)) {
                tracing::warn!(
                    endpoint,
                    route,
                    waiting,
                    "events are waiting for delivery, but this route has no forward target now \
                     (it or its endpoint left the config); they wait until it is back"
                );
            }
        }
        match &self.lanes {
            Some(running) => {
                // The task ends only at shutdown; lanes sent after that have nothing to do.
                let _ = running.send(lanes);
            }
            None if lanes.is_empty() => {}
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                let (store, new_event) = (self.store.clone(), self.new_event.clone());
                let shutdown = self.shutdown.clone();
                let worker = run(lanes, rx, store, new_event, shutdown);
                self.task = Some(tokio::spawn(crate::panics::named("forward worker", worker)));
                self.lanes = Some(tx);
            }
        }
        unfinished.map(drop)
    }

    pub async fn stop(self) {
        if let Some(task) = self.task {
            let _ = task.await;
        }
        // The slots (and their lanes' senders) are gone: the last roll-ups are written now.
        self.rollup.stop().await;
    }
}

async fn run(
    mut lanes: Vec<Lane>,
    mut reloaded: mpsc::UnboundedReceiver<Vec<Lane>>,
    store: Store,
    new_event: Arc<Notify>,
    mut shutdown: Shutdown,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let mut deliveries = JoinSet::new();
    let mut data_version = store.data_version().await.ok();
    let mut check = tokio::time::interval(crate::fault::external_check().unwrap_or(EXTERNAL_CHECK));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    'work: while !shutdown.is_fired() {
        let started = start_due(&mut lanes, &store, &shutdown, &done_tx, &mut deliveries).await;
        let wake_at = match started {
            Ok(wake_at) => wake_at,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the delivery queue; retrying in 1 s");
                Some(now_ms() + 1000)
            }
        };
        let sleep =
            sleep_for(wake_at.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64)));
        tokio::pin!(sleep);
        // Wait for a reason to look at the queue again.
        loop {
            tokio::select! {
                _ = shutdown.fired() => break 'work,
                _ = new_event.notified() => break,
                // Another instance on the same PostgreSQL database accepted or replayed one.
                _ = store.changed_elsewhere() => break,
                _ = &mut sleep => break,
                Some(new) = reloaded.recv() => {
                    replace_lanes(&mut lanes, new);
                    break;
                }
                Some(lane) = done_rx.recv() => {
                    lanes[lane].in_flight -= 1;
                    while let Ok(lane) = done_rx.try_recv() {
                        lanes[lane].in_flight -= 1;
                    }
                    break;
                }
                _ = check.tick() => {
                    let now = store.data_version().await.ok();
                    if now != data_version {
                        data_version = now;
                        break;
                    }
                }
            }
        }
        while deliveries.try_join_next().is_some() {}
    }

    if !deliveries.is_empty() {
        tracing::info!(
            in_flight = deliveries.len(),
            "waiting for deliveries in flight"
        );
        let all_done = async { while deliveries.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, all_done)
            .await
            .is_err()
        {
            tracing::warn!(
                "deliveries still running after the grace period; they will be retried after restart"
            );
            deliveries.abort_all();
            while deliveries.join_next().await.is_some() {}
        }
    }
    for lane in &lanes {
        lane.shared.runner.close().await;
    }
}

async fn sleep_for(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Claims and starts every due delivery that fits in its lane, each in a slot of its own;
/// returns when the next one is due, among lanes with room.
async fn start_due(
    lanes: &mut [Lane],
    store: &Store,
    shutdown: &Shutdown,
    done: &mpsc::UnboundedSender<usize>,
    slots: &mut JoinSet<()>,
) -> Result<Option<i64>, StoreError> {
    let mut wake_at: Option<i64> = None;
    // A paused route's deliveries wait; the round after its pause runs out claims them.
    let pauses = store.route_pauses(now_ms()).await?;
    for lane in lanes.iter() {
        let pause = pauses.iter().find(|p| lane.is(&p.endpoint, &p.route));
        note_pause(&lane.shared, pause);
        if let Some(until) = pause.and_then(|p| p.until_ms) {
            wake_at = Some(wake_at.map_or(until, |w| w.min(until)));
        }
    }
    // Every lane with room, in one round trip and one commit.
    let with_room: Vec<usize> = (0..lanes.len())
        .filter(|&i| lanes[i].free() > 0 && !lanes[i].shared.paused.load(Ordering::Relaxed))
        .collect();
    if with_room.is_empty() {
        return Ok(wake_at);
    }
    let asks = with_room
        .iter()
        .map(|&i| LaneClaim {
            endpoint: lanes[i].shared.endpoint.clone(),
            route: lanes[i].shared.route.clone(),
            limit: lanes[i].free(),
            order: lanes[i].shared.order,
        })
        .collect();
    let answers = store.claim_lanes(asks, now_ms()).await?;
    for (index, claimed) in with_room.into_iter().zip(answers) {
        let lane = &mut lanes[index];
        if !claimed.deliveries.is_empty() {
            crate::fault::panic_if("panic-worker");
        }
        for event in claimed.deliveries {
            lane.in_flight += 1;
            let slot = run_slot(lane.shared.clone(), event, shutdown.clone());
            let done = done.clone();
            slots.spawn(crate::panics::named("forward worker", async move {
                slot.await;
                let _ = done.send(index);
            }));
        }
        if lane.free() > 0
            && let Some(due) = claimed.next_due
        {
            wake_at = Some(wake_at.map_or(due, |w| w.min(due)));
        }
    }
    Ok(wake_at)
}

/// Marks `lane` paused or not, as `pause` (the one in force for its route, if any) says, and
/// logs the change.
fn note_pause(lane: &LaneShared, pause: Option<&RoutePause>) {
    let was = lane.paused.swap(pause.is_some(), Ordering::Relaxed);
    lane.metrics
        .route_paused(&lane.endpoint, &lane.route, pause.is_some());
    let (endpoint, route) = (lane.endpoint.as_str(), lane.route.as_str());
    match pause {
        Some(p) if !was => tracing::warn!(
            endpoint,
            route,
            reason = p.reason.as_deref().unwrap_or(""),
            until = p.until_ms.map(crate::time::rfc3339).unwrap_or_default(),
            "route paused: its events are accepted and stored, their deliveries wait \
             (`portaria route resume`)"
        ),
        None if was => tracing::info!(endpoint, route, "route resumed: deliveries go on in order"),
        _ => {}
    }
}

/// A delivery slot: runs one attempt, records it and claims the lane's next due event in the
/// same commit, and goes on until nothing more is due (or shutdown). A busy lane thus costs
/// one commit per delivery and no round trip through the worker loop.
async fn run_slot(lane: Arc<LaneShared>, first: Delivery, shutdown: Shutdown) {
    let mut delivery = first;
    loop {
        let (tried, after) = attempt::attempt(&lane, &delivery).await;
        let retired = lane.retired.load(Ordering::Relaxed) || lane.paused.load(Ordering::Relaxed);
        let then = (!shutdown.is_fired() && !retired).then(|| ClaimNext {
            endpoint: lane.endpoint.clone(),
            route: lane.route.clone(),
            order: lane.order,
            now_ms: now_ms(),
        });
        // The outcome must reach the database; until it does, the event stays `delivering`
        // and would only be retried after a restart. Keep trying, gently.
        let mut backoff = Duration::from_millis(200);
        let next = loop {
            let recorded = lane
                .store
                .record_attempt(
                    delivery.event_id,
                    delivery.route.clone(),
                    tried,
                    after.clone(),
                    then.clone(),
                )
                .await;
            match recorded {
                Ok(next) => break next,
                Err(StoreError::Closed) => return,
                Err(e) => {
                    tracing::error!(event_id = delivery.event_id, route = %delivery.route, error = %e, "cannot record a delivery attempt; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        };
        if matches!(after, AfterAttempt::Delivered | AfterAttempt::Dead { .. }) {
            // The task outlives every slot (it is stopped after the worker).
            let _ = lane.finished.send(delivery.event_id);
        }
        match next {
            Some(claimed) => delivery = claimed,
            None => return,
        }
    }
}
