//! What systemd hears from the running server (through [`Notifier`]): `READY=1` with a status
//! line once everything runs, a fresh `STATUS=` every [`STATUS_EVERY`], `STOPPING=1` when the
//! graceful stop begins, and, with `WatchdogSec=`, `WATCHDOG=1` pings, each one only after
//! the database writer and the webhook accept loop both answered within the deadline. A
//! wedged writer or a dead accept loop thus stops the pings, and systemd restarts the service.
//!
//! [`Watchdog`] is a task like the pruner: it owns its state, hears the one shutdown signal,
//! and is stopped by `serve` at the very end. After the signal it pings without checking
//! (the accept loop is gone by design, the writer busy closing) until `serve` returns, so a
//! long drain is never mistaken for a hang; `TimeoutStopSec=` bounds the stop instead.
//!
//! The accept loop's side is a [`Heartbeat`]: it wraps the loop's stop future and answers each
//! probe whenever the loop waits (for a connection slot or a connection). An answer proves
//! the loop still runs and is being polled; a loop that ended has dropped it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, timeout};

use crate::config::SHORTHAND_ROUTE;
use crate::notify::Notifier;
use crate::shutdown::Shutdown;
use crate::store::{QueueStats, RoutePause, Store};
use crate::time::now_ms;

/// How often the status line is refreshed: it costs one read of the queue indexes.
pub const STATUS_EVERY: Duration = Duration::from_secs(30);

/// How long the queue figures for a status line may take (when no watchdog bounds them).
const STATS_WAIT: Duration = Duration::from_secs(2);

/// What the watchdog sends the accept loop; the loop answers by sending `()` back.
type Probe = oneshot::Sender<()>;

/// The accept loop's side of the liveness check.
pub struct Heartbeat {
    probes: mpsc::Receiver<Probe>,
}

/// The watchdog's side: asks the accept loop whether it is alive.
pub struct Pulse {
    probes: mpsc::Sender<Probe>,
}

/// A connected pair.
pub fn heartbeat() -> (Pulse, Heartbeat) {
    let (probes, rx) = mpsc::channel(1);
    (Pulse { probes }, Heartbeat { probes: rx })
}

impl Heartbeat {
    /// Resolves when `stop` does, answering probes while it waits. Pass the result to the
    /// accept loop as its stop future: the loop polls it at each of its waits.
    pub async fn answering(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                probe = self.probes.recv() => match probe {
                    Some(probe) => {
                        let _ = probe.send(());
                    }
                    // No watchdog: only the stop is left to wait for.
                    None => return stop.await,
                },
            }
        }
    }
}

impl Pulse {
    /// True once the accept loop answered; false at once if it has ended.
    async fn alive(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        self.probes.send(tx).await.is_ok() && rx.await.is_ok()
    }
}

/// The status line `systemctl status` shows, e.g. `serving 3 endpoints; 0 pending, 0 dead`,
/// then the routes paused (`portaria route pause`), whose deliveries wait.
/// `stats` None: the database did not answer in time.
pub fn status_line(
    endpoints: usize,
    stats: Option<&[QueueStats]>,
    paused: &[RoutePause],
    now_ms: i64,
) -> String {
    let serving = match endpoints {
        1 => "serving 1 endpoint".to_string(),
        n => format!("serving {n} endpoints"),
    };
    let Some(stats) = stats else {
        return format!("{serving}; queue figures unavailable (the database did not answer)");
    };
    let pending: u64 = stats.iter().map(|s| s.pending).sum();
    let dead: u64 = stats.iter().map(|s| s.dead).sum();
    let oldest = stats.iter().filter_map(|s| s.oldest_pending_ms).min();
    let queues = match oldest {
        Some(at) if pending > 0 => format!(
            "{serving}; {pending} pending (oldest received {} ago), {dead} dead",
            age(now_ms.saturating_sub(at))
        ),
        _ => format!("{serving}; {pending} pending, {dead} dead"),
    };
    let names: Vec<String> = paused
        .iter()
        .map(|p| match p.route.as_str() {
            SHORTHAND_ROUTE => p.endpoint.clone(),
            route => format!("{}/{route}", p.endpoint),
        })
        .collect();
    match names.as_slice() {
        [] => queues,
        [one] => format!("{queues}; paused: {one}"),
        many => format!(
            "{queues}; {} routes paused: {}",
            many.len(),
            many.join(", ")
        ),
    }
}

fn age(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        0..120 => format!("{secs} s"),
        120..7200 => format!("{} min", secs / 60),
        7200..172_800 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    }
}

/// The background task; see the module doc.
pub struct Watchdog {
    running: Option<(JoinHandle<()>, oneshot::Sender<()>)>,
}

/// What the task needs, owned by it.
struct Task {
    notifier: Arc<Notifier>,
    store: Store,
    /// The endpoints in force: a reload changes the count.
    endpoints: Arc<AtomicUsize>,
    /// How often to ping; None: no watchdog, status refreshes only.
    ping_every: Option<Duration>,
    pulse: Pulse,
    signal: Shutdown,
}

impl Watchdog {
    /// Sends `READY=1` with the first status line, then starts the task. Without a notify
    /// socket it does nothing at all (no task, no query).
    pub async fn start(
        notifier: Arc<Notifier>,
        store: Store,
        endpoints: Arc<AtomicUsize>,
        ping_every: Option<Duration>,
        pulse: Pulse,
        signal: Shutdown,
    ) -> Watchdog {
        if !notifier.is_enabled() {
            return Watchdog { running: None };
        }
        let stats = timeout(STATS_WAIT, store.queue_stats()).await;
        let stats = stats.ok().and_then(Result::ok);
        let count = endpoints.load(Ordering::Relaxed);
        let now = now_ms();
        let paused = paused(&store, now).await;
        notifier.ready(&status_line(count, stats.as_deref(), &paused, now));
        if let Some(every) = ping_every {
            tracing::info!(
                every = ?every,
                "systemd watchdog on: pinging while the database writer and the accept loop answer"
            );
        }
        let (end, ended) = oneshot::channel();
        let task = Task {
            notifier,
            store,
            endpoints,
            ping_every,
            pulse,
            signal,
        };
        Watchdog {
            running: Some((tokio::spawn(task.run(ended)), end)),
        }
    }

    /// Ends the task (after the shutdown signal, once everything else has stopped).
    pub async fn stop(self) {
        if let Some((task, end)) = self.running {
            let _ = end.send(());
            let _ = task.await;
        }
    }
}

impl Task {
    async fn run(self, mut ended: oneshot::Receiver<()>) {
        let tick = self
            .ping_every
            .map_or(STATUS_EVERY, |p| p.min(STATUS_EVERY));
        // The status goes out on every n-th tick.
        let status_ticks = (STATUS_EVERY.as_millis() / tick.as_millis().max(1)).max(1);
        let mut ticker = tokio::time::interval_at(Instant::now() + tick, tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut healthy = true;
        let mut n: u128 = 0;
        let mut stop = self.signal.clone();
        loop {
            tokio::select! {
                _ = stop.fired() => break,
                _ = ticker.tick() => {}
            }
            n += 1;
            let status_due = n.is_multiple_of(status_ticks);
            let Some(_) = self.ping_every else {
                if status_due {
                    let stats = tokio::select! {
                        _ = stop.fired() => break,
                        stats = timeout(STATS_WAIT, self.store.queue_stats()) => stats.ok().and_then(Result::ok),
                    };
                    self.send_status(stats.as_deref()).await;
                }
                continue;
            };
            // Half a tick for the check, so that a ping is never late because of it.
            let checked = tokio::select! {
                _ = stop.fired() => break,
                checked = check(&self.store, &self.pulse, tick / 2) => checked,
            };
            match checked {
                Ok(stats) => {
                    self.notifier.watchdog();
                    if !healthy {
                        tracing::info!("systemd watchdog: healthy again, pinging");
                        healthy = true;
                    }
                    if status_due {
                        self.send_status(Some(&stats)).await;
                    }
                }
                Err(why) => {
                    if healthy {
                        tracing::warn!(
                            "systemd watchdog: {why}; not pinging (systemd restarts the service \
                             once WatchdogSec passes without one)"
                        );
                        self.notifier.status(&format!("unhealthy: {why}"));
                        healthy = false;
                    }
                }
            }
        }
        self.notifier
            .stopping("stopping: finishing requests and deliveries in flight");
        let Task {
            notifier,
            store,
            ping_every,
            ..
        } = self;
        drop(store);
        loop {
            tokio::select! {
                _ = &mut ended => return,
                _ = ticker.tick() => if ping_every.is_some() {
                    notifier.watchdog();
                },
            }
        }
    }

    async fn send_status(&self, stats: Option<&[QueueStats]>) {
        let now = now_ms();
        let paused = paused(&self.store, now).await;
        self.notifier.status(&status_line(
            self.endpoints.load(Ordering::Relaxed),
            stats,
            &paused,
            now,
        ));
    }
}

/// The routes paused at `now`; none when the database does not answer in time (the queue
/// figures say so already).
async fn paused(store: &Store, now: i64) -> Vec<RoutePause> {
    timeout(STATS_WAIT, store.route_pauses(now))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Both liveness checks at once, each within `deadline`: a read through the writer thread
/// (retried until the deadline, so one busy moment is not a failure) and the accept loop's
/// answer. The queue figures read on the way come back for the status line.
async fn check(
    store: &Store,
    pulse: &Pulse,
    deadline: Duration,
) -> Result<Vec<QueueStats>, String> {
    let pause = (deadline / 10).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let writer = async {
        loop {
            match store.queue_stats().await {
                Ok(stats) => return stats,
                Err(_) => tokio::time::sleep(pause).await,
            }
        }
    };
    let (writer, accept) =
        tokio::join!(timeout(deadline, writer), timeout(deadline, pulse.alive()));
    match (writer, accept) {
        (Ok(stats), Ok(true)) => Ok(stats),
        (Err(_), _) => Err(format!(
            "the database writer did not answer within {deadline:?}"
        )),
        (Ok(_), _) => Err(format!(
            "the webhook accept loop did not answer within {deadline:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(endpoint: &str, pending: u64, oldest: Option<i64>, dead: u64) -> QueueStats {
        QueueStats {
            endpoint: endpoint.into(),
            pending,
            oldest_pending_ms: oldest,
            dead,
        }
    }

    #[test]
    fn the_status_line_sums_the_queues() {
        assert_eq!(
            status_line(3, Some(&[]), &[], 0),
            "serving 3 endpoints; 0 pending, 0 dead"
        );
        assert_eq!(
            status_line(1, Some(&[stats("a", 0, None, 2)]), &[], 0),
            "serving 1 endpoint; 0 pending, 2 dead"
        );
        let now = 10_000_000;
        let queues = [
            stats("a", 2, Some(now - 300_000), 1),
            stats("b", 5, Some(now - 30_000), 0),
        ];
        assert_eq!(
            status_line(2, Some(&queues), &[], now),
            "serving 2 endpoints; 7 pending (oldest received 5 min ago), 1 dead"
        );
        assert_eq!(
            status_line(2, None, &[], now),
            "serving 2 endpoints; queue figures unavailable (the database did not answer)"
        );
        let pause = |endpoint: &str, route: &str| RoutePause {
            endpoint: endpoint.into(),
            route: route.into(),
            paused_at_ms: now,
            until_ms: None,
            reason: None,
        };
        assert_eq!(
            status_line(1, Some(&[]), &[pause("pagarme", "erp")], now),
            "serving 1 endpoint; 0 pending, 0 dead; paused: pagarme/erp"
        );
        assert_eq!(
            status_line(
                2,
                Some(&[]),
                &[pause("pagarme", "erp"), pause("stripe", SHORTHAND_ROUTE)],
                now
            ),
            "serving 2 endpoints; 0 pending, 0 dead; 2 routes paused: pagarme/erp, stripe"
        );
        assert_eq!(age(59_000), "59 s");
        assert_eq!(age(3 * 3600 * 1000), "3 h");
        assert_eq!(age(5 * 86_400_000), "5 days");
    }

    #[tokio::test]
    async fn the_heartbeat_answers_while_waiting_and_not_once_the_loop_ended() {
        let (pulse, heartbeat) = heartbeat();
        let (stop, stopped) = oneshot::channel::<()>();
        let waiting = tokio::spawn(heartbeat.answering(async {
            let _ = stopped.await;
        }));
        assert!(pulse.alive().await);
        assert!(pulse.alive().await);
        let _ = stop.send(());
        waiting.await.unwrap();
        assert!(!pulse.alive().await, "an ended loop does not answer");
    }

    #[tokio::test]
    async fn a_stuck_writer_fails_the_check_and_a_free_one_passes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let (pulse, heartbeat) = heartbeat();
        let answering = tokio::spawn(heartbeat.answering(std::future::pending()));
        let deadline = Duration::from_millis(200);
        assert!(check(&store, &pulse, deadline).await.is_ok());
        // Another connection holds the write lock: the writer's transaction cannot begin.
        let other = rusqlite::Connection::open(dir.path().join("w.db")).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let why = check(&store, &pulse, deadline).await.unwrap_err();
        assert!(why.contains("database writer"), "{why}");
        other.execute_batch("COMMIT").unwrap();
        // The writer's busy wait (up to 3 s) ends once the lock is free.
        let mut ok = false;
        for _ in 0..50 {
            if check(&store, &pulse, deadline).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "the check passes again once the lock is released");
        answering.abort();
        let why = {
            let _ = answering.await;
            check(&store, &pulse, deadline).await.unwrap_err()
        };
        assert!(why.contains("accept loop"), "{why}");
        store.close();
    }
}
