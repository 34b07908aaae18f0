//! The systemd notify protocol (`sd_notify(3)`): newline-separated `KEY=VALUE` states in one
//! datagram to the Unix socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the Linux
//! abstract namespace), and the watchdog settings systemd passes in `$WATCHDOG_USEC` and
//! `$WATCHDOG_PID`. Without `$NOTIFY_SOCKET` every call does nothing.
//!
//! Telling systemd is never worth failing for: the socket is non-blocking, and the first
//! error is logged at debug, later ones not at all.

use std::ffi::OsString;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The variables systemd sets for the service process alone: kept out of forward commands'
/// environment, so a program portaria runs never talks to systemd in portaria's name.
pub const VARIABLES: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// A handle on the service manager's notify socket (or on nothing).
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// Set once an error has been logged.
    failed: AtomicBool,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`; a notifier that does nothing when it is unset or empty.
    pub fn from_env() -> Notifier {
        Notifier::new(std::env::var_os("NOTIFY_SOCKET"))
    }

    /// For the socket `name` (`/path` or `@abstract`), or for nothing.
    pub fn new(name: Option<OsString>) -> Notifier {
        let target = name.filter(|n| !n.is_empty()).and_then(|name| {
            match address(&name).and_then(|addr| {
                let socket = UnixDatagram::unbound()?;
                socket.set_nonblocking(true)?;
                Ok((socket, addr))
            }) {
                Ok(target) => Some(target),
                Err(e) => {
                    tracing::debug!(socket = ?name, error = %e, "NOTIFY_SOCKET is unusable; not notifying systemd");
                    None
                }
            }
        });
        Notifier {
            target,
            failed: AtomicBool::new(false),
        }
    }

    /// A notifier that never sends.
    pub fn disabled() -> Notifier {
        Notifier::new(None)
    }

    /// Whether there is a socket to send to.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `states` (`KEY=VALUE` lines) in one datagram. False when nothing was sent.
    pub fn send(&self, states: &str) -> bool {
        let Some((socket, addr)) = &self.target else {
            return false;
        };
        match socket.send_to_addr(states.as_bytes(), addr) {
            Ok(_) => true,
            Err(e) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    tracing::debug!(error = %e, "cannot notify systemd (further errors not logged)");
                }
                false
            }
        }
    }

    /// `READY=1`, with the status line to show.
    pub fn ready(&self, status: &str) -> bool {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// `STOPPING=1`: a graceful stop has begun.
    pub fn stopping(&self, status: &str) -> bool {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
    }

    /// `STATUS=`: what `systemctl status` shows.
    pub fn status(&self, status: &str) -> bool {
        self.send(&format!("STATUS={}", one_line(status)))
    }

    /// `WATCHDOG=1`: the service is alive.
    pub fn watchdog(&self) -> bool {
        self.send("WATCHDOG=1")
    }
}

/// A status is one line: a newline would start another state.
fn one_line(status: &str) -> String {
    status.replace(['\n', '\r'], " ")
}

fn address(name: &OsString) -> std::io::Result<SocketAddr> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    match bytes.first() {
        Some(b'/') => SocketAddr::from_pathname(name),
        Some(b'@') => abstract_address(&bytes[1..]),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not an absolute path or an @abstract name",
        )),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn abstract_address(name: &[u8]) -> std::io::Result<SocketAddr> {
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn abstract_address(_: &[u8]) -> std::io::Result<SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract socket names exist on Linux only",
    ))
}

/// How often to send `WATCHDOG=1`, from the process environment (see [`watchdog_interval`]).
pub fn watchdog_from_env() -> Option<Duration> {
    let var = |name| std::env::var(name).ok();
    watchdog_interval(
        var("WATCHDOG_USEC").as_deref(),
        var("WATCHDOG_PID").as_deref(),
        std::process::id(),
    )
}

/// Half of `WATCHDOG_USEC` (what `sd_watchdog_enabled(3)` recommends), when it is set to a
/// positive number of microseconds and `WATCHDOG_PID` is absent or names `our_pid`; None
/// otherwise: the watchdog is off, or meant for another process.
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, our_pid: u32) -> Option<Duration> {
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(our_pid)
    {
        return None;
    }
    let usec = usec?.trim().parse::<u64>().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (tempfile::TempDir, UnixDatagram, OsString) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (dir, socket, path.into_os_string())
    }

    fn recv(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn states_arrive_as_one_datagram_each() {
        let (_dir, socket, name) = listener();
        let notifier = Notifier::new(Some(name));
        assert!(notifier.is_enabled());
        assert!(notifier.ready("serving 2 endpoints"));
        assert_eq!(recv(&socket), "READY=1\nSTATUS=serving 2 endpoints");
        assert!(notifier.watchdog());
        assert_eq!(recv(&socket), "WATCHDOG=1");
        assert!(notifier.status("two\nlines"));
        assert_eq!(recv(&socket), "STATUS=two lines");
        assert!(notifier.stopping("stopping"));
        assert_eq!(recv(&socket), "STOPPING=1\nSTATUS=stopping");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_name_is_reached() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "portaria-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier::new(Some(format!("@{name}").into()));
        assert!(notifier.watchdog());
        assert_eq!(recv(&socket), "WATCHDOG=1");
    }

    #[test]
    fn without_a_socket_nothing_is_sent_and_nothing_fails() {
        for name in [None, Some(OsString::new()), Some("relative/path".into())] {
            let notifier = Notifier::new(name);
            assert!(!notifier.is_enabled());
            assert!(!notifier.ready("x"));
        }
        // A socket that went away: an error, once, never a panic or a block.
        let (dir, socket, name) = listener();
        let notifier = Notifier::new(Some(name));
        drop(socket);
        drop(dir);
        assert!(!notifier.watchdog());
        assert!(!notifier.watchdog());
        assert!(notifier.failed.load(Ordering::Relaxed));
    }

    #[test]
    fn the_watchdog_interval_is_half_the_timeout_for_this_process_only() {
        let half = Some(Duration::from_millis(100));
        assert_eq!(watchdog_interval(Some("200000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("200000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("200000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("200000"), Some("x"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
        assert_eq!(
            watchdog_interval(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
    }
}
