//! One run of the handler process: started, fed, read and timed until it is closed or breaks.
//!
//! Three parts run at once: a writer task owns the child's stdin (so a handler that stops
//! reading can never block the rest: its events just time out), a stderr task logs the
//! handler's stderr line by line, and [`Session::serve`] reads stdout, matches answers to the
//! events in flight by id and watches the earliest deadline.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::protocol::{self, Answer};
use super::{CLOSE_GRACE, MAX_LINE, Message, Request, STDERR_LINE, Spec};
use crate::forward::Outcome;
use crate::forward::command::{GroupKill, describe_io_error, describe_status, hide_env};

/// After the handler exits or closes a pipe, how long answers it already wrote are still read.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// Why [`Session::serve`] returned.
pub(super) enum Ended {
    /// The worker asked to close; tell it when done.
    Close(oneshot::Sender<()>),
    /// The handle is gone (a reload replaced the lane): close.
    Dropped,
    /// The handler is broken, for this reason: kill it, fail its events.
    Broke(String),
}

/// An event written to the handler and not answered yet.
struct InFlight {
    answer: oneshot::Sender<Outcome>,
    deadline: Instant,
}

pub(super) struct Session {
    /// Declared before `child` so that it drops first: the group is killed while the leader
    /// is still unreaped, which keeps its pid (= the pgid) from being reused.
    group: GroupKill,
    child: Child,
    pid: u32,
    /// Lines for the writer task; None once stdin is to be closed.
    lines: Option<mpsc::UnboundedSender<Vec<u8>>>,
    writer: JoinHandle<io::Result<()>>,
    stdout: ChildStdout,
    /// Bytes read from stdout after the last complete line.
    partial: Vec<u8>,
    in_flight: HashMap<i64, InFlight>,
    timeout: Duration,
    /// Set once the leader is reaped (its pgid may then be reused: never signal it again).
    exited: Option<ExitStatus>,
}

impl Session {
    /// Starts the handler: no shell, a process group of its own, secrets hidden, killed if
    /// portaria dies. The error is a short text for the events waiting for it.
    pub(super) fn spawn(spec: &Spec) -> Result<Session, String> {
        let Some((program, args)) = spec.argv.split_first() else {
            return Err("no pipe handler configured".to_string());
        };
        let mut command = Command::new(program);
        hide_env(&mut command, &spec.hidden_env);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid) on integers.
        unsafe {
            command.pre_exec(move || {
                // A SIGKILLed portaria cannot close the handler's stdin in order: the kernel
                // kills the handler instead. (It fires when the forking thread ends: a tokio
                // worker thread, which lives as long as the runtime.)
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // Portaria died between fork and prctl: the signal would never come.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other(
                        "portaria exited while starting the handler",
                    ));
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("could not start {program}: {}", describe_io_error(&e)))?;
        let pid = child.id().unwrap_or(0);
        let group = GroupKill::arm(pid)
            .ok_or_else(|| format!("started {program} but could not track its pid"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!("started {program} without its pipes"));
        };
        let (lines, queue) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_lines(stdin, queue));
        tokio::spawn(log_stderr(stderr, spec.endpoint.clone(), pid));
        Ok(Session {
            group,
            child,
            pid,
            lines: Some(lines),
            writer,
            stdout,
            partial: Vec::new(),
            in_flight: HashMap::new(),
            timeout: spec.timeout,
            exited: None,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// Feeds the handler `waiting` and then what arrives in `inbox`, settling each event with
    /// its answer, until it is to close or it breaks.
    pub(super) async fn serve(
        &mut self,
        waiting: &mut VecDeque<Request>,
        inbox: &mut mpsc::UnboundedReceiver<Message>,
    ) -> Ended {
        while let Some(request) = waiting.pop_front() {
            self.send(request);
        }
        let mut chunk = vec![0u8; 8192];
        loop {
            let deadline = self.in_flight.values().map(|f| f.deadline).min();
            tokio::select! {
                message = inbox.recv() => match message {
                    Some(Message::Deliver(request)) => self.send(request),
                    Some(Message::Close(done)) => return Ended::Close(done),
                    None => return Ended::Dropped,
                },
                read = self.stdout.read(&mut chunk) => match read {
                    Ok(0) => return self.broke_after_drain("the handler closed its stdout").await,
                    Ok(n) => {
                        if let Err(why) = self.take(chunk.get(..n).unwrap_or_default()) {
                            return Ended::Broke(why);
                        }
                    }
                    Err(e) => return Ended::Broke(format!("cannot read the handler's stdout: {e}")),
                },
                status = self.child.wait() => {
                    self.reaped(status.ok());
                    return self.broke_after_drain("the handler exited").await;
                }
                written = &mut self.writer => {
                    let why = match written {
                        Ok(Err(e)) => format!("cannot write to the handler's stdin: {}", describe_io_error(&e)),
                        _ => "the handler's stdin writer stopped".to_string(),
                    };
                    return self.broke_after_drain(&why).await;
                }
                () = sleep_until(deadline) => {
                    let late = self.in_flight.iter().filter(|(_, f)| Some(f.deadline) == deadline).map(|(id, _)| *id).min();
                    return Ended::Broke(format!(
                        "the handler did not answer event {} within {:?}",
                        late.unwrap_or_default(),
                        self.timeout
                    ));
                }
            }
        }
    }

    /// Writes one event and starts its clock. A second line for an event still in flight
    /// (not possible from the worker) settles the first one as failed.
    fn send(&mut self, request: Request) {
        let Some(lines) = &self.lines else {
            let _ = request
                .answer
                .send(Outcome::Failed("the handler is closing".into()));
            return;
        };
        // A failed send means the writer ended; `serve` hears it from the writer's handle.
        let _ = lines.send(request.line);
        let flight = InFlight {
            answer: request.answer,
            deadline: Instant::now() + self.timeout,
        };
        if let Some(earlier) = self.in_flight.insert(request.id, flight) {
            let _ = earlier.answer.send(Outcome::Failed(
                "the same event was handed to the handler again".into(),
            ));
        }
    }

    /// Takes bytes read from stdout: settles each complete line's event. An error is a reason
    /// the handler is broken.
    fn take(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = line.get(..end).unwrap_or_default();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match protocol::answer(line) {
                Answer::For(id, outcome) => match self.in_flight.remove(&id) {
                    Some(flight) => {
                        let _ = flight.answer.send(outcome);
                    }
                    None => {
                        return Err(format!(
                            "the handler answered event {id}, which it was not handling"
                        ));
                    }
                },
                Answer::Garbage(why) => return Err(why),
            }
        }
        if self.partial.len() > MAX_LINE {
            return Err(format!(
                "the handler wrote a line longer than {} KiB",
                MAX_LINE / 1024
            ));
        }
        Ok(())
    }

    /// The handler exited or dropped a pipe: read the answers it wrote before that (briefly),
    /// then report it broken, with its exit status if it has one by then.
    async fn broke_after_drain(&mut self, what: &str) -> Ended {
        let drain = async {
            let mut chunk = vec![0u8; 8192];
            loop {
                match self.stdout.read(&mut chunk).await {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => self.take(chunk.get(..n).unwrap_or_default())?,
                }
            }
        };
        if let Ok(Err(why)) = tokio::time::timeout(DRAIN_GRACE, drain).await {
            return Ended::Broke(why);
        }
        if self.exited.is_none()
            && let Ok(status) = tokio::time::timeout(DRAIN_GRACE, self.child.wait()).await
        {
            self.reaped(status.ok());
        }
        // Whatever was noticed first, an exit is the cause to report.
        match self.exited {
            Some(status) => {
                Ended::Broke(format!("the handler exited ({})", describe_status(status)))
            }
            None => Ended::Broke(what.to_string()),
        }
    }

    fn reaped(&mut self, status: Option<ExitStatus>) {
        if let Some(status) = status {
            self.exited = Some(status);
            self.group.disarm();
        }
    }

    /// A broken handler: kill its group, reap it, fail every event it still had. Returns how
    /// many failed.
    pub(super) async fn kill(mut self, why: &str) -> usize {
        self.group.kill();
        if self.exited.is_none() {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
        }
        self.writer.abort();
        let failed = self.in_flight.len();
        for (_, flight) in self.in_flight.drain() {
            let _ = flight.answer.send(Outcome::Failed(format!(
                "pipe handler failed: {why}; killed and restarted"
            )));
        }
        failed
    }

    /// A gentle end: EOF on stdin, then SIGTERM, then SIGKILL, each after [`CLOSE_GRACE`].
    /// Events still in flight (none at shutdown: the worker waited for them) fail.
    pub(super) async fn close(mut self) {
        self.lines = None;
        for signal in [None, Some(libc::SIGTERM), Some(libc::SIGKILL)] {
            if self.exited.is_some() {
                break;
            }
            if let Some(signal) = signal {
                self.group.signal(signal);
            }
            if let Ok(status) = tokio::time::timeout(CLOSE_GRACE, self.child.wait()).await {
                self.reaped(status.ok());
            }
        }
        // A handler that exited may have left its group running: that is its business, as
        // for a command; one that had to be killed takes its group with it.
        if self.exited.is_none() {
            self.group.kill();
        }
        self.writer.abort();
        for (_, flight) in self.in_flight.drain() {
            let _ = flight
                .answer
                .send(Outcome::Failed("portaria stopped the handler".into()));
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Owns the handler's stdin: writes each line whole, in order; closes stdin (EOF) when the
/// session drops its sender.
async fn write_lines(
    mut stdin: ChildStdin,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
) -> io::Result<()> {
    while let Some(line) = lines.recv().await {
        stdin.write_all(&line).await?;
        stdin.flush().await?;
    }
    Ok(())
}

/// Logs the handler's stderr, one log line per line, each cut to [`STDERR_LINE`] bytes (the
/// rest of a long line is read and dropped), until EOF.
async fn log_stderr(stderr: impl AsyncRead + Unpin, endpoint: String, pid: u32) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut cut = false;
        // Read one line without ever holding more than STDERR_LINE of it.
        loop {
            let (used, done) = match reader.fill_buf().await {
                Ok([]) => (0, true),
                Ok(buf) => {
                    let end = buf.iter().position(|b| *b == b'\n');
                    let take = end.unwrap_or(buf.len());
                    let room = STDERR_LINE.saturating_sub(line.len());
                    cut |= take > room;
                    line.extend_from_slice(buf.get(..take.min(room)).unwrap_or_default());
                    (end.map_or(buf.len(), |e| e + 1), end.is_some())
                }
                Err(_) => (0, true),
            };
            reader.consume(used);
            if done {
                if used == 0 && line.is_empty() {
                    return;
                }
                break;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if !text.is_empty() {
            let more = if cut { " …" } else { "" };
            tracing::info!(endpoint, pid, stderr = %format_args!("{text}{more}"), "pipe handler");
        }
    }
}
