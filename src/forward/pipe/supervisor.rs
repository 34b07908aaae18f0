//! The task that owns a lane's handler: starts it when an event waits, runs it as a
//! [`Session`] until it ends or breaks, and restarts a broken one after a backoff.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::session::{Ended, Session};
use super::{Message, Request, Spec};
use crate::forward::Outcome;

/// The first restart's delay; it doubles with each quick failure.
const FIRST_RESTART: Duration = Duration::from_millis(100);
/// The longest delay between two starts.
const MAX_RESTART: Duration = Duration::from_secs(30);
/// A handler that ran this long before it broke was healthy: its restart is quick again.
const HEALTHY: Duration = Duration::from_secs(30);

/// The restart delays: 100 ms doubling to 30 s, reset after a healthy run.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: FIRST_RESTART,
        }
    }

    /// The delay before the next start, after a run of `ran` that ended badly.
    fn after(&mut self, ran: Duration) -> Duration {
        if ran >= HEALTHY {
            self.next = FIRST_RESTART;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_RESTART);
        delay
    }
}

pub(super) struct Supervisor {
    spec: Spec,
    inbox: mpsc::UnboundedReceiver<Message>,
    /// Events for the next process, in arrival order.
    waiting: VecDeque<Request>,
    backoff: Backoff,
}

impl Supervisor {
    pub(super) fn new(spec: Spec, inbox: mpsc::UnboundedReceiver<Message>) -> Supervisor {
        Supervisor {
            spec,
            inbox,
            waiting: VecDeque::new(),
            backoff: Backoff::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut restart_at = Instant::now();
        loop {
            // Until an event waits and the backoff has passed: collect what comes.
            while self.waiting.is_empty() || Instant::now() < restart_at {
                tokio::select! {
                    message = self.inbox.recv() => match message {
                        Some(Message::Deliver(request)) => self.waiting.push_back(request),
                        Some(Message::Close(done)) => {
                            self.fail_waiting("portaria is stopping");
                            let _ = done.send(());
                            return;
                        }
                        None => return self.fail_waiting("portaria is stopping"),
                    },
                    () = tokio::time::sleep_until(restart_at), if !self.waiting.is_empty() => {}
                }
            }
            let started = Instant::now();
            let mut session = match Session::spawn(&self.spec) {
                Ok(session) => session,
                Err(why) => {
                    let delay = self.backoff.after(Duration::ZERO);
                    tracing::error!(endpoint = %self.spec.endpoint, error = %why, retry_in_ms = delay.as_millis() as u64, "cannot start the pipe handler");
                    self.fail_waiting(&why);
                    restart_at = Instant::now() + delay;
                    continue;
                }
            };
            let pid = session.pid();
            tracing::info!(endpoint = %self.spec.endpoint, pid, program = %self.program(), "pipe handler started");
            match session.serve(&mut self.waiting, &mut self.inbox).await {
                Ended::Close(done) => {
                    session.close().await;
                    tracing::info!(endpoint = %self.spec.endpoint, pid, "pipe handler closed");
                    let _ = done.send(());
                    return;
                }
                Ended::Dropped => {
                    session.close().await;
                    tracing::info!(endpoint = %self.spec.endpoint, pid, "pipe handler closed");
                    return;
                }
                Ended::Broke(why) => {
                    let failed = session.kill(&why).await;
                    let delay = self.backoff.after(started.elapsed());
                    tracing::warn!(
                        endpoint = %self.spec.endpoint,
                        pid,
                        failed,
                        error = %why,
                        restart_in_ms = delay.as_millis() as u64,
                        "pipe handler killed; its events in flight failed and will be retried"
                    );
                    restart_at = Instant::now() + delay;
                }
            }
        }
    }

    fn program(&self) -> &str {
        self.spec.argv.first().map_or("", String::as_str)
    }

    fn fail_waiting(&mut self, why: &str) {
        for request in self.waiting.drain(..) {
            let _ = request.answer.send(Outcome::Failed(why.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_100ms_to_30s_and_reset_after_a_healthy_run() {
        let mut backoff = Backoff::new();
        let quick = Duration::from_millis(10);
        let delays: Vec<u128> = (0..12).map(|_| backoff.after(quick).as_millis()).collect();
        assert_eq!(
            delays,
            [
                100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000
            ]
        );
        assert_eq!(backoff.after(HEALTHY), FIRST_RESTART);
        assert_eq!(backoff.after(quick), FIRST_RESTART * 2);
    }
}
