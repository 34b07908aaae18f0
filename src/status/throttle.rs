//! Guessing the admin token is slow, and loud only once a minute.
//!
//! - [`Lane`]: every check of a presented token (a login, `Authorization: Bearer`) takes its
//!   turn in one line, and after a wrong one the next check, whoever asks, waits [`PACE`]. So
//!   guesses go at most one a second however many connections try, and a client that hangs
//!   up while it waits has learnt nothing (its token was not checked yet). Requests with a
//!   session cookie, and the open page on loopback, never queue here; neither does anything
//!   while no wrong token comes.
//! - [`FailureLog`]: the first wrong token after a quiet spell is logged at once; later ones
//!   are counted and said in one summary line per [`INTERVAL`], by the task
//!   [`FailureLog::summarise`] (the admin listener's, ending with it).

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long the next token check waits after a wrong one.
pub const PACE: Duration = Duration::from_secs(1);

/// Wrong tokens after the first are summed up once per this.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The one line token checks take turns in.
#[derive(Debug)]
pub struct Lane {
    /// When the next check may run: [`PACE`] after the last wrong token.
    next: tokio::sync::Mutex<Instant>,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            next: tokio::sync::Mutex::new(Instant::now()),
        }
    }
}

impl Lane {
    /// Runs `check` in turn (FIFO: tokio's mutex is fair), after the pause a wrong token
    /// before it asked for; a wrong answer makes the next check wait.
    pub async fn check(&self, check: impl FnOnce() -> bool) -> bool {
        let mut next = self.next.lock().await;
        tokio::time::sleep_until(*next).await;
        let right = check();
        if !right {
            *next = Instant::now() + PACE;
        }
        right
    }
}

/// Which way a wrong token came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Login,
    Bearer,
}

impl Way {
    fn as_str(self) -> &'static str {
        match self {
            Way::Login => "login form",
            Way::Bearer => "bearer token",
        }
    }
}

/// Wrong tokens, counted between log lines; [`FailureLog`]'s state, pure (the caller passes
/// the time) so its rule can be tested without a clock.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The current interval's end; None: quiet, the next wrong token is logged at once.
    until: Option<Instant>,
    logins: u64,
    bearers: u64,
}

/// What to log at the end of an interval: the wrong tokens after the first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub logins: u64,
    pub bearers: u64,
}

impl Tally {
    /// Counts a wrong token at `now`; true if it is the first after a quiet spell (log it).
    pub fn note(&mut self, way: Way, now: Instant) -> bool {
        if self.until.is_none() {
            self.until = Some(now + INTERVAL);
            return true;
        }
        match way {
            Way::Login => self.logins += 1,
            Way::Bearer => self.bearers += 1,
        }
        false
    }

    /// When [`Tally::due`] next has something to say: the open interval's end.
    pub fn next_due(&self) -> Option<Instant> {
        self.until
    }

    /// At or after the interval's end: the summary of its wrong tokens, if any came after the
    /// first; a new interval starts then (so a long attack logs one line per interval), else
    /// it is quiet again.
    pub fn due(&mut self, now: Instant) -> Option<Summary> {
        let until = self.until?;
        if now < until {
            return None;
        }
        let summary = self.take();
        self.until = summary.map(|_| now + INTERVAL);
        summary
    }

    /// The counts so far, whatever the time (at shutdown).
    fn take(&mut self) -> Option<Summary> {
        let summary = Summary {
            logins: std::mem::take(&mut self.logins),
            bearers: std::mem::take(&mut self.bearers),
        };
        (summary.logins + summary.bearers > 0).then_some(summary)
    }
}

/// The wrong tokens' log lines: the first at once, the rest summed up by [`Self::summarise`].
#[derive(Debug, Default)]
pub struct FailureLog {
    tally: Mutex<Tally>,
    /// Wakes the summary task when an interval opens.
    opened: Notify,
}

impl FailureLog {
    /// A wrong token came by `way`.
    pub fn note(&self, way: Way) {
        let first = self
            .tally
            .lock()
            .is_ok_and(|mut tally| tally.note(way, Instant::now()));
        if first {
            tracing::warn!(
                via = way.as_str(),
                "status page: a wrong admin token; more in the next {} s are counted and \
                 logged in one line",
                INTERVAL.as_secs()
            );
            self.opened.notify_one();
        }
    }

    /// Logs the summary of each interval that had more than its first wrong token, until
    /// `stop`; then the counts not yet said.
    pub async fn summarise(&self, stop: impl Future<Output = ()>) {
        let mut stop = pin!(stop);
        loop {
            let next = self.tally.lock().ok().and_then(|t| t.next_due());
            let woken = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => self.opened.notified().await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = &mut stop => break,
            }
            let due = self
                .tally
                .lock()
                .ok()
                .and_then(|mut t| t.due(Instant::now()));
            if let Some(summary) = due {
                log(summary, INTERVAL);
            }
        }
        if let Some(summary) = self.tally.lock().ok().and_then(|mut t| t.take()) {
            log(summary, INTERVAL);
        }
    }
}

fn log(summary: Summary, interval: Duration) {
    tracing::warn!(
        logins = summary.logins,
        bearer = summary.bearers,
        "status page: {} more wrong admin tokens within {} s",
        summary.logins + summary.bearers,
        interval.as_secs()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_wrong_token_is_said_at_once_the_rest_once_per_interval() {
        let mut tally = Tally::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(tally.note(Way::Bearer, t0), "the first: logged now");
        assert!(!tally.note(Way::Bearer, at(1)));
        assert!(!tally.note(Way::Login, at(2)));
        assert_eq!(tally.next_due(), Some(at(60)));
        assert_eq!(tally.due(at(59)), None, "not before the interval ends");
        assert_eq!(
            tally.due(at(60)),
            Some(Summary {
                logins: 1,
                bearers: 1
            })
        );
        // The attack goes on: counted into the next interval, not logged at once.
        assert!(!tally.note(Way::Bearer, at(70)));
        assert_eq!(tally.next_due(), Some(at(120)));
        assert_eq!(
            tally.due(at(120)),
            Some(Summary {
                logins: 0,
                bearers: 1
            })
        );
        // A quiet interval ends the spell: the next wrong token is logged at once again.
        assert_eq!(tally.due(at(180)), None);
        assert_eq!(tally.next_due(), None);
        assert!(tally.note(Way::Login, at(500)));
        // One wrong token alone: its interval ends with nothing more to say.
        assert_eq!(tally.due(at(560)), None);
        assert_eq!(tally.next_due(), None);
    }

    #[tokio::test]
    async fn after_a_wrong_token_the_next_check_waits_its_turn() {
        let lane = Lane::default();
        assert!(lane.check(|| true).await);
        assert!(!lane.check(|| false).await);
        let wrong_at = Instant::now();
        assert!(lane.check(|| true).await);
        assert!(
            wrong_at.elapsed() >= PACE - Duration::from_millis(5),
            "waited PACE"
        );
    }
}
