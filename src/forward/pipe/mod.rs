//! The pipe target: one long-running handler program per lane, fed one JSON line per event on
//! its stdin and answering one JSON line per event on its stdout (docs/forwarding.md, "The pipe
//! protocol").
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
        let line = match protocol::event_line(d, route) {
            Ok(line) => line,
            Err(why) => return Outcome::Failed(why),
        };
        let (answer, answered) = oneshot::channel();
        let request = Request {
            id: d.event_id,
            line,
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::path::Path;

    fn delivery(id: i64) -> Delivery {
        Delivery {
            origin: crate::store::Origin::Webhook,
            event_id: id,
            endpoint: "pagarme".into(),
            route: "default".into(),
            dedup_key: format!("k{id}"),
            event_type: Some("charge.paid".into()),
            event_type_signed: true,
            signed_id: None,
            content_type: None,
            received_at_ms: 0,
            attempt: 1,
            headers: Bytes::new(),
            body: Bytes::from_static(b"{}"),
            fetched: None,
        }
    }

    /// A Python handler in `dir` (`D` is that directory in it) after the common prelude.
    fn handler(dir: &Path, body: &str, timeout: Duration) -> PipeTarget {
        let path = dir.join("handler.py");
        let prelude = "import json, os, sys, time\nD = sys.argv[1]\n\
                       def answer(o):\n    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n";
        std::fs::write(&path, format!("{prelude}{body}\n")).unwrap();
        let argv = vec![
            "python3".to_string(),
            path.to_string_lossy().into_owned(),
            dir.to_string_lossy().into_owned(),
        ];
        PipeTarget::start(argv, timeout, vec![], "pagarme".into())
    }

    fn failure(outcome: Outcome) -> String {
        match outcome {
            Outcome::Failed(text) => text,
            other => panic!("expected a retried failure, got {other:?}"),
        }
    }

    const SECONDS: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn answers_in_any_order_settle_their_own_events() {
        let dir = tempfile::tempdir().unwrap();
        // Reads three events, then answers them last first; the first one fails.
        let target = handler(
            dir.path(),
            "got = [json.loads(sys.stdin.readline()) for _ in range(3)]\n\
             for e in reversed(got):\n    \
                 answer({'id': e['id'], 'ok': e['id'] != 1, 'error': 'erp said no'})\n\
             for line in sys.stdin:\n    answer({'id': json.loads(line)['id'], 'ok': True})",
            SECONDS,
        );
        let (one, two, three) = (delivery(1), delivery(2), delivery(3));
        let (a, b, c) = tokio::join!(
            target.deliver(&one, "default"),
            target.deliver(&two, "default"),
            target.deliver(&three, "default"),
        );
        assert_eq!(a, Outcome::Failed("handler: erp said no".into()));
        assert_eq!(b, Outcome::Delivered);
        assert_eq!(c, Outcome::Delivered);
        // The same process goes on with the next one.
        assert_eq!(
            target.deliver(&delivery(4), "default").await,
            Outcome::Delivered
        );
        target.close().await;
    }

    /// A handler that misbehaves once (`bad`, on its first run only), then answers properly.
    fn once_then_fine(dir: &Path, bad: &str, timeout: Duration) -> PipeTarget {
        handler(
            dir,
            &format!(
                "first = not os.path.exists(D + '/ran')\n\
                 open(D + '/ran', 'a').write(str(os.getpid()) + '\\n')\n\
                 for line in sys.stdin:\n    \
                     e = json.loads(line)\n    \
                     if first:\n        {bad}\n    \
                     answer({{'id': e['id'], 'ok': True}})"
            ),
            timeout,
        )
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("ran"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    #[tokio::test]
    async fn garbage_on_stdout_fails_the_events_in_flight_and_restarts_the_handler() {
        let dir = tempfile::tempdir().unwrap();
        let target = once_then_fine(dir.path(), "print('hello', flush=True)", SECONDS);
        let why = failure(target.deliver(&delivery(1), "default").await);
        assert!(
            why.starts_with("pipe handler failed: the handler wrote a line that is not an answer")
                && why.contains("hello"),
            "{why}"
        );
        assert_eq!(
            target.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        assert_eq!(runs(dir.path()), 2, "restarted once");
        target.close().await;
    }

    #[tokio::test]
    async fn an_answer_for_an_event_not_in_flight_is_garbage_too() {
        let dir = tempfile::tempdir().unwrap();
        let target = once_then_fine(dir.path(), "answer({'id': 999, 'ok': True})", SECONDS);
        let why = failure(target.deliver(&delivery(1), "default").await);
        assert!(
            why.contains("answered event 999, which it was not handling"),
            "{why}"
        );
        assert_eq!(
            target.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        target.close().await;
    }

    #[tokio::test]
    async fn a_handler_that_exits_fails_its_event_with_the_status_and_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let target = once_then_fine(dir.path(), "sys.exit(3)", SECONDS);
        let why = failure(target.deliver(&delivery(1), "default").await);
        assert_eq!(
            why,
            "pipe handler failed: the handler exited (exit status 3); killed and restarted"
        );
        assert_eq!(
            target.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        assert_eq!(runs(dir.path()), 2);
        target.close().await;
    }

    #[tokio::test]
    async fn a_handler_killed_from_outside_fails_its_event_and_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        // The first run holds its event and waits to be killed (as by the OOM killer).
        let target = once_then_fine(dir.path(), "time.sleep(30)", SECONDS);
        let d = delivery(5);
        let attempt = target.deliver(&d, "default");
        let kill = async {
            let pid: i32 = loop {
                let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap_or_default();
                if let Ok(pid) = ran.trim().parse() {
                    break pid;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            // SAFETY: a plain kill(2) of the handler this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        };
        let (outcome, ()) = tokio::join!(attempt, kill);
        assert_eq!(
            failure(outcome),
            "pipe handler failed: the handler exited (killed by signal 9); killed and restarted"
        );
        assert_eq!(target.deliver(&d, "default").await, Outcome::Delivered);
        target.close().await;
    }

    #[tokio::test]
    async fn a_missed_timeout_kills_the_handler_and_its_group() {
        let dir = tempfile::tempdir().unwrap();
        // The first run starts a child of its own (same group) and never answers.
        let target = once_then_fine(
            dir.path(),
            "import subprocess\n        \
             p = subprocess.Popen(['sleep', '30'])\n        \
             open(D + '/child', 'w').write(str(p.pid))\n        \
             time.sleep(30)",
            // Long enough for Python to start and spawn the child on a loaded machine (at
            // 500 ms the handler was sometimes killed before, and the child file missing).
            Duration::from_secs(3),
        );
        let started = std::time::Instant::now();
        let why = failure(target.deliver(&delivery(7), "default").await);
        // Cut by the timeout, not by the handler's own end 30 s later.
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            why,
            "pipe handler failed: the handler did not answer event 7 within 3s; killed and restarted"
        );
        let child: i32 = std::fs::read_to_string(dir.path().join("child"))
            .unwrap()
            .parse()
            .unwrap();
        let gone = std::time::Instant::now() + Duration::from_secs(3);
        // SAFETY: signal 0 only asks whether the process exists.
        while unsafe { libc::kill(child, 0) } == 0 && !is_zombie(child) {
            assert!(
                std::time::Instant::now() < gone,
                "the handler's child survived"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            target.deliver(&delivery(7), "default").await,
            Outcome::Delivered
        );
        target.close().await;
    }

    fn is_zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_fails_fast_naming_it() {
        let target = PipeTarget::start(
            vec!["/nonexistent/handler".into()],
            SECONDS,
            vec![],
            "pagarme".into(),
        );
        let why = failure(target.deliver(&delivery(1), "default").await);
        assert_eq!(
            why,
            "could not start /nonexistent/handler: No such file or directory"
        );
        target.close().await;
    }

    #[tokio::test]
    async fn hidden_variables_do_not_reach_the_handler() {
        assert!(
            std::env::var_os("HOME").is_some(),
            "the test needs HOME set"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("env.py");
        std::fs::write(
            &path,
            "import json, os, sys\n\
             for line in sys.stdin:\n    \
                 seen = ('HOME' in os.environ, 'PATH' in os.environ)\n    \
                 ok = seen == (False, True)\n    \
                 print(json.dumps({'id': json.loads(line)['id'], 'ok': ok, 'error': str(seen)}), flush=True)\n",
        )
        .unwrap();
        let argv = vec!["python3".into(), path.to_string_lossy().into_owned()];
        let target = PipeTarget::start(argv, SECONDS, vec!["HOME".into()], "pagarme".into());
        assert_eq!(
            target.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        target.close().await;
    }

    #[tokio::test]
    async fn close_gives_eof_first_then_sigterm_then_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        // Polite: exits at EOF, and says so.
        let polite = handler(
            dir.path(),
            "for line in sys.stdin:\n    answer({'id': json.loads(line)['id'], 'ok': True})\n\
             open(D + '/eof', 'w').write('yes')",
            SECONDS,
        );
        assert_eq!(
            polite.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        let started = std::time::Instant::now();
        polite.close().await;
        assert!(started.elapsed() < CLOSE_GRACE, "{:?}", started.elapsed());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("eof")).unwrap(),
            "yes"
        );

        // Deaf to EOF and to SIGTERM: killed after two graces.
        let dir = tempfile::tempdir().unwrap();
        let stubborn = handler(
            dir.path(),
            "import signal\nsignal.signal(signal.SIGTERM, lambda *a: open(D + '/term', 'w').write('yes'))\n\
             for line in sys.stdin:\n    answer({'id': json.loads(line)['id'], 'ok': True})\n\
             while True:\n    time.sleep(0.05)",
            SECONDS,
        );
        assert_eq!(
            stubborn.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        let started = std::time::Instant::now();
        stubborn.close().await;
        let took = started.elapsed();
        assert!(
            took >= CLOSE_GRACE * 2 && took < CLOSE_GRACE * 3,
            "{took:?}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("term")).unwrap(),
            "yes"
        );
    }

    #[tokio::test]
    async fn stderr_goes_to_the_log_line_by_line_each_line_bounded() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let dir = tempfile::tempdir().unwrap();
        let target = handler(
            dir.path(),
            "sys.stderr.write('x' * 100000 + '\\nsecond line\\n'); sys.stderr.flush()\n\
             for line in sys.stdin:\n    answer({'id': json.loads(line)['id'], 'ok': True})",
            SECONDS,
        );
        assert_eq!(
            target.deliver(&delivery(1), "default").await,
            Outcome::Delivered
        );
        target.close().await;
        let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("second line"), "{log}");
        let long = log.lines().find(|l| l.contains("xxxx")).unwrap();
        assert!(long.len() < STDERR_LINE + 200, "{}", long.len());
        assert!(long.contains("x …"), "{long}");
    }
}
