//! The pipe target: one long-running handler program per lane, fed one JSON line per event on
//! its stdin and answering one JSON line per event on its stdout (README, "The pipe protocol").
//!
//! [`PipeTarget`] is only a handle. The handler process belongs to a background task, the
//! *supervisor* (`supervisor`), which starts it at the first delivery (no shell, a process
//! group of its own, the secret variables removed from its environment, `PR_SET_PDEATHSIG` so
//! that it dies with portaria), and owns it from then on. A delivery sends its line and a
//! oneshot over a channel and waits for the answer; the running process (`session`) writes the
//! lines, reads the answers, matches them by event id (with `concurrency > 1` they may come in
//! any order) and enforces each event's timeout.
//!
//! Invariants:
//! - An answer settles only the event it names. A handler that exits, closes its stdout,
//!   writes a line that is not an answer for an event in flight, or misses an event's timeout
//!   is killed (its whole group), every event it still had counts as a failed attempt with
//!   the reason, and it is started again at the next delivery after a backoff (100 ms,
//!   doubling to 30 s; back to 100 ms after a run of 30 s).
//! - Nothing about delivery is only in memory: every event is `delivering` in the database
//!   while it is here, so a handler (or portaria) dying mid-event means a retry, never a loss.
//! - Memory is bounded: an answer line is at most [`MAX_LINE`]; stderr is logged line by line,
//!   each cut to [`STDERR_LINE`]; events in flight are at most the lane's concurrency.
//! - Shutdown and reload close the handler gently: stdin is closed (EOF), then after
//!   [`CLOSE_GRACE`] the group gets SIGTERM, and SIGKILL after another.

mod protocol;
mod session;
mod supervisor;

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{Delivery, Outcome};

/// The longest line a handler may write to stdout before it counts as broken.
pub const MAX_LINE: usize = 64 * 1024;

/// Each line of the handler's stderr goes to the log cut to this many bytes.
pub const STDERR_LINE: usize = 1024;

/// How long a closing handler has after EOF on its stdin, and then after SIGTERM.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What the supervisor hears from the handle.
enum Message {
    Deliver(Request),
    /// Close the handler gracefully and end; the sender hears when it is done.
    Close(oneshot::Sender<()>),
}

/// One event for the handler: its id (to match the answer), its line, and who waits.
struct Request {
    id: i64,
    line: Vec<u8>,
    answer: oneshot::Sender<Outcome>,
}

/// How to run the handler.
#[derive(Debug, Clone)]
struct Spec {
    /// Program and arguments, run directly (no shell). Config guarantees it is non-empty.
    argv: Vec<String>,
    /// How long the handler has to answer one event.
    timeout: Duration,
    /// Variables of portaria's own environment the handler must not see (the secrets).
    hidden_env: Vec<String>,
    /// The endpoint, for the log lines about the handler.
    endpoint: String,
}

/// A lane's handle on its handler process.
pub struct PipeTarget {
    messages: mpsc::UnboundedSender<Message>,
}

impl PipeTarget {
    /// Starts the supervisor task (the process itself starts at the first delivery). Must be
    /// called within the tokio runtime.
    pub fn start(
        argv: Vec<String>,
        timeout: Duration,
        hidden_env: Vec<String>,
        endpoint: String,
    ) -> PipeTarget {
        let spec = Spec {
            argv,
            timeout,
            hidden_env,
            endpoint,
        };
        let (messages, inbox) = mpsc::unbounded_channel();
        let task = supervisor::Supervisor::new(spec, inbox).run();
        tokio::spawn(crate::panics::named("pipe handler", task));
        PipeTarget { messages }
    }

    /// Hands `d` (on `route`) to the handler and waits for its answer, a failure of the
    /// handler, or the timeout. Every problem becomes [`Outcome::Failed`] with a short reason.
    pub async fn deliver(&self, d: &Delivery, route: &str) -> Outcome {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            id: d.event_id,
            line: protocol::event_line(d, route),
            answer,
        };
        if self.messages.send(Message::Deliver(request)).is_err() {
            return Outcome::Failed("the pipe handler's supervisor has stopped".to_string());
        }
        answered.await.unwrap_or_else(|_| {
            Outcome::Failed("the pipe handler's supervisor stopped before an answer".to_string())
        })
    }

    /// Closes the handler (EOF, SIGTERM, SIGKILL, each after [`CLOSE_GRACE`]) and waits until
    /// it is gone. At shutdown, after the deliveries in flight are done.
    pub async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.messages.send(Message::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}
