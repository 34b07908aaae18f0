//! The command target: one delivery attempt as a child process.
//!
//! The event's raw body goes to the program's stdin and its metadata to `PORTARIA_*` environment
//! variables; exit status 0 means delivered. This file owns the child's whole life: it writes
//! the body into a sealed in-memory file, starts the program on it without a shell in a process
//! group of its own, drains stdout and stderr, enforces the timeout, and reaps the child.
//! What every program portaria runs shares lives here too: [`hidden_variables`], the one list
//! of what none inherits (the pipe handler and the alert command included), `hide_env` and
//! `GroupKill` (the whole group killed), which `pipe` uses as well.
//!
//! Invariants:
//! - The program sees the whole body or nothing: its stdin is a complete file (a sealed
//!   `memfd`, else an unlinked temporary file) at offset 0 before it starts, not a pipe fed
//!   while it runs. A SIGKILLed portaria can thus never hand a program that outlives it (it
//!   is in its own process group) an empty or truncated body; the event goes out again after
//!   the restart, its cut-off attempt recorded as `interrupted`. `PR_SET_PDEATHSIG` is not
//!   used: it reaches only the group's leader (a `sh -c` leaves its children running), fires
//!   when the forking *thread* ends rather than the process, and the sealed stdin already
//!   makes every run whole.
//! - While the program runs, nothing it started outlives the attempt: a timeout, or the
//!   `deliver` future being dropped, sends SIGKILL to the whole process group.
//! - Once the program has exited on its own, anything it deliberately left running in the
//!   background is its business and is not killed.
//! - An event verified by fetching (`forward/fetch.rs`) gives the program the object too, in
//!   a second sealed file, its descriptor 3, named by `PORTARIA_FETCHED_FILE=/dev/fd/3`.
//! - The child never blocks on a full pipe: output past the first few KiB is read and thrown
//!   away; stdin is a file, so there is no writer to deadlock with.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::pin::pin;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::time::Instant;

use super::{Delivery, Outcome};

/// How much of each of stdout and stderr is kept for the failure message.
const CAPTURE_LIMIT: usize = 4096;

/// How much of each stream a `Failed` message quotes, so that both together stay within the
/// ~4 KiB an outcome may carry.
const QUOTE_LIMIT: usize = 1800;

/// After the program exits, how long its output pipes may stay open before we stop reading.
/// Only a background process it left behind can hold them open, and we do not wait for that.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// Runs one configured program per delivery attempt.
#[derive(Debug, Clone)]
pub struct CommandTarget {
    /// Program and arguments, run directly (no shell). Config guarantees it is non-empty.
    argv: Vec<String>,
    /// How long the program may run before its process group is killed.
    timeout: Duration,
    /// Variables of portaria's own environment the program must not see (the secrets).
    hidden_env: Vec<String>,
}

impl CommandTarget {
    pub fn new(argv: Vec<String>, timeout: Duration) -> Self {
        Self {
            argv,
            timeout,
            hidden_env: Vec::new(),
        }
    }

    /// Keeps these variables of portaria's environment from the program.
    pub fn hiding_env(mut self, names: Vec<String>) -> Self {
        self.hidden_env = names;
        self
    }

    /// Runs the program once for `d`. Never panics on event data; every problem becomes
    /// [`Outcome::Failed`] with a short, loggable reason.
    pub async fn deliver(&self, d: &Delivery) -> Outcome {
        let Some((program, args)) = self.argv.split_first() else {
            return Outcome::Failed("no command configured".to_string());
        };

        let stdin = match sealed_stdin(&d.body) {
            Ok(file) => file,
            Err(e) => {
                return Outcome::Failed(format!(
                    "could not prepare the body for {program}'s stdin: {}",
                    describe_io_error(&e)
                ));
            }
        };
        // Verified by fetching: the object in a sealed file of its own, the program's fd 3.
        let fetched = match d.fetched.as_deref().map(|f| sealed_stdin(f.as_bytes())) {
            Some(Err(e)) => {
                let e = describe_io_error(&e);
                return Outcome::Failed(format!("could not prepare the fetched object: {e}"));
            }
            Some(Ok(file)) => Some(file),
            None => None,
        };
        let mut command = Command::new(program);
        hide_env(&mut command, &self.hidden_env);
        set_delivery_env(&mut command, d);
        if let Some(file) = &fetched {
            pass_fetched(&mut command, file);
        }
        command
            .args(args)
            .stdin(Stdio::from(stdin))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own lets one kill(-pgid) reach grandchildren too, and keeps a
            // terminal's Ctrl-C aimed at portaria from hitting the program directly.
            .process_group(0)
            // Backstop for the leader if this future is dropped; `GroupKill` handles the rest.
            .kill_on_drop(true);

        let spawned = command.spawn();
        // Our copy of the stdin file goes with the command: the child holds its own.
        drop(command);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                return Outcome::Failed(format!(
                    "could not start {program}: {}",
                    describe_io_error(&e)
                ));
            }
        };

        // Declared after `child` so that it drops first: the group is killed while the
        // leader is still unreaped, which keeps its pid (= the pgid) from being reused.
        let mut group = match child.id().and_then(GroupKill::arm) {
            Some(group) => group,
            None => {
                // Only possible if the pid were out of range; the child is killed on drop.
                return Outcome::Failed(format!("started {program} but could not track its pid"));
            }
        };

        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut out = Captured::default();
        let mut err = Captured::default();
        let deadline = Instant::now() + self.timeout;

        let ended = {
            let mut io = pin!(async {
                tokio::join!(capture(stdout, &mut out), capture(stderr, &mut err),);
            });
            let mut io_done = false;
            let ended = loop {
                tokio::select! {
                    () = &mut io, if !io_done => io_done = true,
                    status = child.wait() => break Ended::Exited(status),
                    () = tokio::time::sleep_until(deadline) => break Ended::TimedOut,
                }
            };
            if let Ended::Exited(Ok(_)) = ended {
                // The leader is reaped, so its pgid may be recycled once the group empties:
                // never signal it again.
                group.disarm();
                if !io_done {
                    // Usually instant (EOF follows exit); bounded in case a background
                    // process inherited the pipes.
                    let _ = tokio::time::timeout(DRAIN_GRACE, &mut io).await;
                }
            }
            ended
        };

        match ended {
            Ended::Exited(Ok(status)) if status.success() => Outcome::Delivered,
            Ended::Exited(Ok(status)) => {
                let output = format!("{}{}", quote("stderr", &err), quote("stdout", &out));
                exit_outcome(status, &output)
            }
            Ended::Exited(Err(e)) => {
                group.kill();
                Outcome::Failed(format!("could not wait for {program}: {e}"))
            }
            Ended::TimedOut => {
                group.kill();
                // SIGKILL cannot be caught, so this is prompt; the bound only guards against a
                // process stuck in the kernel. If it expires, `kill_on_drop` hands the child to
                // tokio's orphan reaper, so no zombie is left either way.
                let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
                Outcome::Failed(format!(
                    "timed out after {:?} (process group killed)",
                    self.timeout
                ))
            }
        }
    }
}

/// What the programs portaria runs (forward commands, pipe handlers, the alert command) must
/// not inherit from its environment: the variables the config reads secrets from (the binary
/// took those named at start out of its environment already; one named first by a reload is
/// still there), systemd's notify socket and watchdog, and `CREDENTIALS_DIRECTORY` (systemd's
/// credentials, readable by the service's user: a program of that user can still read them if
/// it finds them, but is not told where).
pub fn hidden_variables(secret_variables: &[String]) -> Vec<String> {
    let mut hidden = secret_variables.to_vec();
    hidden.extend(crate::notify::VARIABLES.map(String::from));
    hidden.push(crate::config::CREDENTIALS_DIRECTORY.to_string());
    hidden
}

/// Keeps `names` (the config's secret variables) out of the environment `command` inherits.
/// The one way a forward program's environment is cleaned: shared with the pipe target.
pub(super) fn hide_env(command: &mut Command, names: &[String]) {
    for name in names {
        command.env_remove(name);
    }
}

/// How the wait for the program ended.
enum Ended {
    Exited(io::Result<ExitStatus>),
    TimedOut,
}

/// Kills the child's process group when dropped while armed, so that a cancelled attempt
/// (worker shutdown) cannot leave the program or its children running.
pub(super) struct GroupKill {
    /// The group id, which equals the leader's pid because of `process_group(0)`.
    pgid: libc::pid_t,
    armed: bool,
}

impl GroupKill {
    pub(super) fn arm(pid: u32) -> Option<Self> {
        let pgid = libc::pid_t::try_from(pid).ok()?;
        // kill(0, ..) and kill(-1, ..) would hit our own group or every process we may signal.
        (pgid > 1).then_some(Self { pgid, armed: true })
    }

    pub(super) fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        self.armed = false;
    }

    /// Sends `signal` to the whole group, if still armed (the pipe target's SIGTERM).
    pub(super) fn signal(&self, signal: libc::c_int) {
        if self.armed {
            // SAFETY: kill(2) takes plain integers and touches no memory of ours. `pgid > 1`
            // was checked in `arm`, so this targets exactly the child's group.
            // ESRCH (the group is already gone) is the desired state, so the result is unused.
            unsafe {
                libc::kill(-self.pgid, signal);
            }
        }
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first bytes of one output stream, plus whether more followed.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    truncated: bool,
}

/// The body as the program's stdin: a file that holds all of it, at offset 0, before the program
/// starts. A sealed `memfd` (no disk, no name, neither side can change it); where the kernel or
/// a seccomp filter refuses `memfd_create`, an unlinked `O_TMPFILE` in the temporary directory.
/// Writing a body (at most `max_body_bytes`) into either is a copy into the page cache.
fn sealed_stdin(body: &[u8]) -> io::Result<File> {
    let mut file = match memfd() {
        Ok(file) => file,
        Err(_) => unlinked_temp_file(&std::env::temp_dir())?,
    };
    file.write_all(body)?;
    file.rewind()?;
    seal(&file);
    Ok(file)
}

/// A new, empty, close-on-exec memfd that accepts seals. (The child's stdin is a `dup2` of it,
/// which does not inherit close-on-exec; no other child sees it.)
fn memfd() -> io::Result<File> {
    // SAFETY: a NUL-terminated static name and flags; returns a new descriptor or -1.
    let fd = unsafe {
        libc::memfd_create(
            c"portaria-event-body".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// A file with no name in `dir` (readable only by us while it existed at all), for kernels
/// without `memfd_create`.
fn unlinked_temp_file(dir: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        // O_EXCL: it can never be linked into the directory later.
        .custom_flags(libc::O_TMPFILE | libc::O_EXCL | libc::O_CLOEXEC)
        .open(dir)
}

/// Seals a memfd so that its size and bytes are fixed: the program reads exactly the body, and
/// neither it nor anything it starts can change or grow the file. A no-op (EINVAL) on a temporary file, which is private.
fn seal(file: &File) {
    use std::os::fd::AsRawFd;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl(2) on a descriptor we own, with integer arguments.
    unsafe {
        libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals);
    }
}

/// Reads a stream to EOF, keeping the first `CAPTURE_LIMIT` bytes and discarding the rest, so
/// the program never blocks writing to a full pipe.
async fn capture(stream: Option<impl AsyncRead + Unpin>, into: &mut Captured) {
    let Some(mut stream) = stream else { return };
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let room = CAPTURE_LIMIT - into.kept.len();
        let chunk = buf.get(..n).unwrap_or_default();
        if chunk.len() > room {
            into.truncated = true;
        }
        into.kept
            .extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
    }
}

/// The variable holding the id the provider signed apart from the body, set only when the
/// event has one.
const SIGNED_ID: &str = "PORTARIA_SIGNED_ID";

/// The variable naming the file of the object fetched from the gateway (verify by fetching):
/// the program's descriptor [`FETCHED_FD`], set only for an event that has one.
const FETCHED_FILE: &str = "PORTARIA_FETCHED_FILE";
const FETCHED_FD: i32 = 3;

/// Gives the program `file` (a sealed memfd, as its stdin is) as its descriptor
/// [`FETCHED_FD`]: readable at `/dev/fd/3`, from the start each time it is opened, by the
/// program and what it starts; nothing on disk, nothing to remove.
fn pass_fetched(command: &mut Command, file: &File) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: between fork and exec the closure calls only `dup2` and `fcntl` (async-signal
    // safe) on a descriptor `file` keeps open until the child has started.
    unsafe {
        command.pre_exec(move || {
            // A descriptor dup'ed onto itself keeps close-on-exec: cleared instead.
            let done = match fd == FETCHED_FD {
                true => libc::fcntl(fd, libc::F_SETFD, 0),
                false => libc::dup2(fd, FETCHED_FD),
            };
            match done {
                -1 => Err(io::Error::last_os_error()),
                _ => Ok(()),
            }
        });
    }
}

/// Sets the `PORTARIA_*` variables describing the event. The parent environment is inherited
/// too, except [`SIGNED_ID`] for an event without one: a value of that name in portaria's own
/// environment must never pass for a signed id.
fn set_delivery_env(command: &mut Command, d: &Delivery) {
    command.envs(delivery_env(d));
    match &d.signed_id {
        Some(id) => command.env(SIGNED_ID, env_value(id)),
        None => command.env_remove(SIGNED_ID),
    };
    match &d.fetched {
        Some(_) => command.env(FETCHED_FILE, "/dev/fd/3"),
        None => command.env_remove(FETCHED_FILE),
    };
}

/// `PORTARIA_*` variables every event has. `PORTARIA_EVENT_TYPE_SIGNED` is `1` only when
/// there is an event type and the signature covers what it was read from.
fn delivery_env(d: &Delivery) -> [(&'static str, String); 10] {
    let type_signed = d.event_type_signed && d.event_type.is_some();
    [
        ("PORTARIA_EVENT_ID", d.event_id.to_string()),
        ("PORTARIA_ENDPOINT", env_value(&d.endpoint)),
        ("PORTARIA_ROUTE", env_value(&d.route)),
        ("PORTARIA_DEDUP_KEY", env_value(&d.dedup_key)),
        // `webhook`, or `reconcile` for an event taken from the gateway's API.
        ("PORTARIA_ORIGIN", d.origin.as_str().to_string()),
        (
            "PORTARIA_EVENT_TYPE",
            env_value(d.event_type.as_deref().unwrap_or("")),
        ),
        (
            "PORTARIA_EVENT_TYPE_SIGNED",
            String::from(if type_signed { "1" } else { "0" }),
        ),
        ("PORTARIA_ATTEMPT", d.attempt.to_string()),
        (
            "PORTARIA_RECEIVED_AT",
            crate::time::rfc3339(d.received_at_ms),
        ),
        (
            "PORTARIA_CONTENT_TYPE",
            env_value(d.content_type.as_deref().unwrap_or("")),
        ),
    ]
}

/// Environment values cannot hold NUL, and one NUL in event data must not make every retry
/// fail to spawn, so NUL becomes U+FFFD. Everything else passes through unchanged.
fn env_value(raw: &str) -> String {
    raw.replace('\0', "\u{FFFD}")
}

/// Exit codes after sysexits(3) that say the same event would fail the same way again: the
/// handler was called wrongly (`EX_USAGE`), the event is not one it can take (`EX_DATAERR`),
/// or the handler's own setup is wrong (`EX_CONFIG`). The delivery is dead at once.
const PERMANENT_EXITS: [(i32, &str); 3] = [(64, "EX_USAGE"), (65, "EX_DATAERR"), (78, "EX_CONFIG")];

/// `EX_TEMPFAIL`: try again later. Retried on the schedule, as every other non-zero exit is;
/// named in the error so an owner reading it sees the handler meant it.
const TEMPFAIL: i32 = 75;

/// What a non-zero exit comes to: dead now for the [`PERMANENT_EXITS`], a retry for anything
/// else. `output` is the quoted stderr and stdout, appended to the error.
fn exit_outcome(status: ExitStatus, output: &str) -> Outcome {
    let described = describe_status(status);
    let code = status.code();
    if let Some((_, name)) = PERMANENT_EXITS.iter().find(|(c, _)| Some(*c) == code) {
        return Outcome::Permanent(format!(
            "{described} ({name}: the handler says retrying cannot help; not retried){output}"
        ));
    }
    if code == Some(TEMPFAIL) {
        return Outcome::Failed(format!("{described} (EX_TEMPFAIL){output}"));
    }
    Outcome::Failed(format!("{described}{output}"))
}

pub(super) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) if status.core_dumped() => {
            format!("killed by signal {signal} (core dumped)")
        }
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    }
}

/// `; <name>: <excerpt>`, or nothing if the stream was empty or only whitespace.
fn quote(name: &str, captured: &Captured) -> String {
    let (text, cut) = excerpt(&captured.kept, QUOTE_LIMIT);
    if text.is_empty() {
        return String::new();
    }
    let more = if cut || captured.truncated {
        " …"
    } else {
        ""
    };
    format!("; {name}: {text}{more}")
}

/// Lossy UTF-8 of `bytes`, trimmed and cut to at most `limit` bytes on a character boundary.
/// Returns whether it was cut. Shared with the HTTP target's error excerpts.
pub(super) fn excerpt(bytes: &[u8], limit: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.len() <= limit {
        return (text.to_string(), false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].trim_end().to_string(), true)
}

/// An I/O error's text without Rust's ` (os error N)` suffix, which adds nothing for a person.
pub(super) fn describe_io_error(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn delivery(body: impl Into<Bytes>) -> Delivery {
        Delivery {
            origin: crate::store::Origin::Webhook,
            event_id: 42,
            endpoint: "github".to_string(),
            route: "default".to_string(),
            dedup_key: "gh:72d3162e-cc78-11e3-81ab-4c9367dc0958".to_string(),
            event_type: Some("push".to_string()),
            event_type_signed: false,
            signed_id: None,
            content_type: Some("application/json".to_string()),
            received_at_ms: 1_796_026_524_123,
            attempt: 3,
            headers: bytes::Bytes::new(),
            body: body.into(),
            fetched: None,
        }
    }

    fn sh(script: &str, timeout: Duration) -> CommandTarget {
        let argv = ["/bin/sh", "-c", script, "sh"].map(String::from).to_vec();
        CommandTarget::new(argv, timeout)
    }

    fn write_script(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.to_string_lossy().into_owned()
    }

    fn failure(outcome: Outcome) -> String {
        match outcome {
            Outcome::Failed(text) => text,
            other => panic!("expected a retried failure, got {other:?}"),
        }
    }

    /// Processes in group `pgid` that are still running (zombies waiting for a reaper that is
    /// not us do not count: they run nothing and hold no resources but a pid).
    fn live_members(pgid: i32) -> Vec<i32> {
        let mut live = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // Fields after the parenthesised command name: state, ppid, pgrp, ...
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
                live.push(pid);
            }
        }
        live
    }

    async fn assert_group_dies(pgid: i32) {
        let give_up = Instant::now() + Duration::from_secs(3);
        loop {
            let live = live_members(pgid);
            if live.is_empty() {
                return;
            }
            assert!(Instant::now() < give_up, "group {pgid} still has {live:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn read_pid_file(path: &Path) -> i32 {
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            assert!(Instant::now() < give_up, "the script never wrote its pid");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn hidden_variables_do_not_reach_the_program() {
        assert!(
            std::env::var_os("HOME").is_some(),
            "the test needs HOME set to hide it"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let script = write_script(
            dir.path(),
            "env.sh",
            "#!/bin/sh\nprintf '%s|%s' \"${HOME+set}\" \"${PATH+set}\" > \"$1/seen\"\n",
        );
        let out_dir = dir.path().to_string_lossy().into_owned();
        let target = CommandTarget::new(vec![script, out_dir], Duration::from_secs(10))
            .hiding_env(vec!["HOME".to_string()]);
        assert_eq!(
            target.deliver(&delivery(Bytes::new())).await,
            Outcome::Delivered
        );
        let seen = std::fs::read_to_string(dir.path().join("seen")).expect("seen");
        assert_eq!(seen, "|set", "HOME hidden, the rest inherited");
    }

    #[tokio::test]
    async fn passes_body_on_stdin_and_metadata_in_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = write_script(
            dir.path(),
            "dump.sh",
            r#"#!/bin/sh
out="$1"
cat > "$out/body"
{
  printf 'id=%s\n' "$PORTARIA_EVENT_ID"
  printf 'endpoint=%s\n' "$PORTARIA_ENDPOINT"
  printf 'dedup=%s\n' "$PORTARIA_DEDUP_KEY"
  printf 'type=%s|%s\n' "${PORTARIA_EVENT_TYPE+set}" "$PORTARIA_EVENT_TYPE"
  printf 'type_signed=%s\n' "$PORTARIA_EVENT_TYPE_SIGNED"
  printf 'signed_id=%s|%s\n' "${PORTARIA_SIGNED_ID+set}" "$PORTARIA_SIGNED_ID"
  printf 'attempt=%s\n' "$PORTARIA_ATTEMPT"
  printf 'origin=%s\n' "$PORTARIA_ORIGIN"
  printf 'received=%s\n' "$PORTARIA_RECEIVED_AT"
  printf 'ctype=%s|%s\n' "${PORTARIA_CONTENT_TYPE+set}" "$PORTARIA_CONTENT_TYPE"
  printf 'path=%s\n' "$PATH"
} > "$out/env"
"#,
        );
        let out_dir = dir.path().to_string_lossy().into_owned();
        let target = CommandTarget::new(vec![script.clone(), out_dir], Duration::from_secs(10));

        // Binary and multi-line content must arrive byte for byte.
        let body: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let outcome = target.deliver(&delivery(body.clone())).await;
        assert_eq!(outcome, Outcome::Delivered);
        assert_eq!(std::fs::read(dir.path().join("body")).expect("body"), body);
        let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(
            env,
            format!(
                "id=42\nendpoint=github\ndedup=gh:72d3162e-cc78-11e3-81ab-4c9367dc0958\n\
                 type=set|push\ntype_signed=0\nsigned_id=|\nattempt=3\norigin=webhook\n\
                 received=2026-11-30T08:15:24.123Z\n\
                 ctype=set|application/json\npath={path}\n"
            )
        );

        // Absent type and content type are present but empty.
        let mut bare = delivery(Bytes::new());
        bare.event_type = None;
        bare.content_type = None;
        assert_eq!(target.deliver(&bare).await, Outcome::Delivered);
        assert_eq!(std::fs::read(dir.path().join("body")).expect("body"), b"");
        let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
        assert!(env.contains("type=set|\n"), "{env}");
        assert!(env.contains("ctype=set|\n"), "{env}");

        // A signed id, and a type the signature covers; a type marked signed without a type
        // is no signed type.
        let mut signed = delivery(Bytes::new());
        signed.event_type = Some("payment".into());
        signed.event_type_signed = true;
        signed.signed_id = Some("123456".into());
        assert_eq!(target.deliver(&signed).await, Outcome::Delivered);
        let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
        assert!(env.contains("type=set|payment\ntype_signed=1\n"), "{env}");
        assert!(env.contains("signed_id=set|123456\n"), "{env}");
        signed.event_type = None;
        assert_eq!(target.deliver(&signed).await, Outcome::Delivered);
        let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
        assert!(env.contains("type=set|\ntype_signed=0\n"), "{env}");
        // An event a reconcile run took from the gateway's API says so.
        signed.origin = crate::store::Origin::Reconcile;
        assert_eq!(target.deliver(&signed).await, Outcome::Delivered);
        let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
        assert!(env.contains("origin=reconcile\n"), "{env}");
    }

    #[tokio::test]
    async fn a_fetched_object_is_a_file_of_its_own_read_whole_each_time() {
        // Read twice, and by a child of the program: descriptor 3 is inherited, and each open
        // of /dev/fd/3 starts at the beginning; stdin is still the body.
        let target = sh(
            r#"test "$PORTARIA_FETCHED_FILE" = /dev/fd/3 \
               && test "$(cat "$PORTARIA_FETCHED_FILE")" = '{"id":59}' \
               && test "$(sh -c 'cat /dev/fd/3')" = '{"id":59}' && test "$(cat)" = body"#,
            Duration::from_secs(10),
        );
        let mut d = delivery("body");
        d.fetched = Some(r#"{"id":59}"#.into());
        assert_eq!(target.deliver(&d).await, Outcome::Delivered);
        // Without one, the variable is not set (nor inherited) and descriptor 3 is closed.
        let target = sh(
            r#"test -z "${PORTARIA_FETCHED_FILE+set}" && ! test -e /dev/fd/3"#,
            Duration::from_secs(10),
        );
        assert_eq!(target.deliver(&delivery("body")).await, Outcome::Delivered);
    }

    #[tokio::test]
    async fn stdin_is_a_file_holding_the_whole_body_before_the_program_starts() {
        // With a pipe fed while the program runs, its size would be 0 (or what fits so far).
        let target = sh(
            r#"test -f /dev/stdin && test "$(stat -L -c %s /dev/stdin)" = 300000 \
               && test "$(wc -c)" = 300000"#,
            Duration::from_secs(10),
        );
        let body = vec![b'b'; 300_000];
        assert_eq!(target.deliver(&delivery(body)).await, Outcome::Delivered);
    }

    #[test]
    fn the_stdin_file_is_sealed_and_starts_at_the_body() {
        use std::io::Read;
        let mut file = sealed_stdin(b"the whole body").expect("sealed stdin");
        assert!(
            file.write_all(b"x").is_err(),
            "a sealed memfd refuses writes"
        );
        let mut read = String::new();
        file.read_to_string(&mut read).expect("read");
        assert_eq!(read, "the whole body");
    }

    #[test]
    fn the_fallback_file_has_no_name_and_holds_the_body() {
        use std::io::Read;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = unlinked_temp_file(dir.path()).expect("O_TMPFILE");
        file.write_all(b"body").expect("write");
        file.rewind().expect("rewind");
        let mut read = String::new();
        file.read_to_string(&mut read).expect("read");
        assert_eq!(read, "body");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
    }

    #[tokio::test]
    async fn nul_in_event_data_still_runs_the_program() {
        let mut d = delivery("x");
        d.dedup_key = "a\0b".to_string();
        let target = sh(
            r#"test "$PORTARIA_DEDUP_KEY" = "a�b""#,
            Duration::from_secs(10),
        );
        assert_eq!(target.deliver(&d).await, Outcome::Delivered);
    }

    #[tokio::test]
    async fn exit_zero_is_delivered() {
        let target = sh("cat >/dev/null; echo fine; exit 0", Duration::from_secs(10));
        assert_eq!(target.deliver(&delivery("{}")).await, Outcome::Delivered);
    }

    #[tokio::test]
    async fn nonzero_exit_fails_with_code_and_output() {
        let target = sh(
            "echo 'bad signature' >&2; echo partial; exit 3",
            Duration::from_secs(10),
        );
        let text = failure(target.deliver(&delivery("{}")).await);
        assert_eq!(
            text,
            "exit status 3; stderr: bad signature; stdout: partial"
        );
    }

    #[test]
    fn usage_data_and_config_exits_are_permanent_and_the_rest_retry() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        for (code, name) in [(64, "EX_USAGE"), (65, "EX_DATAERR"), (78, "EX_CONFIG")] {
            let Outcome::Permanent(text) = exit_outcome(exit(code), "; stderr: no") else {
                panic!("exit {code} should be permanent");
            };
            assert!(
                text.starts_with(&format!("exit status {code} ({name}")),
                "{text}"
            );
            assert!(text.ends_with("not retried); stderr: no"), "{text}");
        }
        assert_eq!(
            exit_outcome(exit(75), ""),
            Outcome::Failed("exit status 75 (EX_TEMPFAIL)".into())
        );
        for code in [1, 2, 63, 66, 69, 76, 77, 79, 255] {
            assert_eq!(
                exit_outcome(exit(code), ""),
                Outcome::Failed(format!("exit status {code}")),
            );
        }
        // A signal is no exit code: retried.
        assert!(matches!(
            exit_outcome(ExitStatus::from_raw(9), ""),
            Outcome::Failed(_)
        ));
    }

    #[tokio::test]
    async fn death_by_signal_fails() {
        let target = sh("kill -9 $$", Duration::from_secs(10));
        let text = failure(target.deliver(&delivery("{}")).await);
        assert_eq!(text, "killed by signal 9");
    }

    #[tokio::test]
    async fn large_output_does_not_deadlock_and_is_truncated() {
        // 1 MiB on each stream, written before stdin (also 1 MiB) is read.
        let target = sh(
            "head -c 1048576 /dev/zero | tr '\\0' o; head -c 1048576 /dev/zero | tr '\\0' e >&2; \
             cat >/dev/null; exit 1",
            Duration::from_secs(20),
        );
        let started = Instant::now();
        let text = failure(target.deliver(&delivery(vec![b'i'; 1 << 20])).await);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            text.starts_with("exit status 1; stderr: eeee"),
            "{}",
            &text[..80]
        );
        assert!(text.contains("e …; stdout: oooo"));
        assert!(text.ends_with("o …"));
        assert!(text.len() <= 4096, "message is {} bytes", text.len());
    }

    #[tokio::test]
    async fn program_ignoring_a_large_stdin_is_delivered() {
        for script in ["exit 0", "head -c 10 >/dev/null; exit 0"] {
            let target = sh(script, Duration::from_secs(10));
            let outcome = target.deliver(&delivery(vec![b'x'; 1 << 20])).await;
            assert_eq!(outcome, Outcome::Delivered, "{script}");
        }
    }

    #[tokio::test]
    async fn missing_program_fails_naming_the_path() {
        let target = CommandTarget::new(vec!["/bin/nope".to_string()], Duration::from_secs(5));
        let text = failure(target.deliver(&delivery("{}")).await);
        assert_eq!(text, "could not start /bin/nope: No such file or directory");
    }

    #[tokio::test]
    async fn non_executable_program_fails_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plain.txt");
        std::fs::write(&path, "not a program").expect("write");
        let path = path.to_string_lossy().into_owned();
        let target = CommandTarget::new(vec![path.clone()], Duration::from_secs(5));
        let text = failure(target.deliver(&delivery("{}")).await);
        assert_eq!(text, format!("could not start {path}: Permission denied"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let target = CommandTarget::new(
            vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                r#"echo $$ > "$1"; sleep 30 & sleep 30"#.to_string(),
                "sh".to_string(),
                pid_file.to_string_lossy().into_owned(),
            ],
            Duration::from_millis(300),
        );
        let started = Instant::now();
        let text = failure(target.deliver(&delivery("{}")).await);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(text, "timed out after 300ms (process group killed)");
        let pgid = read_pid_file(&pid_file).await;
        assert_group_dies(pgid).await;
    }

    #[tokio::test]
    async fn dropping_the_attempt_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let target = CommandTarget::new(
            vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                r#"sleep 30 & echo $$ > "$1"; sleep 30"#.to_string(),
                "sh".to_string(),
                pid_file.to_string_lossy().into_owned(),
            ],
            Duration::from_secs(60),
        );
        let d = delivery("{}");
        let attempt = target.deliver(&d);
        let pgid = tokio::select! {
            outcome = attempt => panic!("finished early: {outcome:?}"),
            pgid = read_pid_file(&pid_file) => pgid,
        };
        // `attempt` was dropped when the select finished.
        assert_group_dies(pgid).await;
    }
}
