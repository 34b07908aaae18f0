//! A throwaway PostgreSQL server for the PostgreSQL backend's tests, from the system's own
//! binaries (Debian's `postgresql` package: /usr/lib/postgresql/N/bin): `initdb` into a temp
//! dir, `postgres` on a free loopback port, trust authentication, no Unix socket. As root
//! (CI), both run as `nobody`, who owns the temp dir (initdb refuses root). One server is
//! shared by the tests of this binary ([`shared`]), one database per test
//! ([`Cluster::database`]); a test that stops the server starts its own ([`Cluster::start`]).
//!
//! Each `postgres` is the child of a thread that lives as long as it runs, with a parent-death
//! signal (SIGINT, a fast shutdown) set after the switch of user: when the test binary exits,
//! its servers stop with it; the shared one's files are removed at exit (`atexit`).
//!
//! [`Cluster::start_tls`] starts one with `ssl = on` and a certificate the test made (and
//! extra `pg_hba.conf` lines first), for the TLS tests (`pg_tls.rs`).
//!
//! Without the binaries the tests skip with a message naming the package, unless
//! `PORTARIA_REQUIRE_POSTGRES=1` (set by `.ci/run`), when they fail.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The superuser the clusters are made with.
pub const USER: &str = "portaria";

pub struct Cluster {
    bin: PathBuf,
    dir: TempDir,
    pub port: u16,
    /// `ssl = on`, with `server.crt` and `server.key` in the data directory.
    tls: bool,
    /// The running server's pid and the channel its thread reports the exit on.
    running: Mutex<Option<(i32, mpsc::Receiver<()>)>>,
}

/// The cluster shared by this binary's tests; None (after a message) when PostgreSQL is not
/// installed and not required.
pub fn shared() -> Option<&'static Cluster> {
    SHARED
        .get_or_init(|| {
            let cluster = Cluster::start();
            // A static is never dropped: stop it and remove its files when the binary exits.
            if cluster.is_some() {
                unsafe {
                    libc::atexit(remove_shared);
                }
            }
            cluster
        })
        .as_ref()
}

static SHARED: OnceLock<Option<Cluster>> = OnceLock::new();

extern "C" fn remove_shared() {
    if let Some(Some(cluster)) = SHARED.get() {
        // Its files go next, so no shutdown checkpoint: that one fsyncs every file of every
        // test's database (11,018 files in 43 s at the end of a whole `cargo test` here, past
        // the 20 s `stop` waits, and the binary aborted).
        cluster.stop_with(libc::SIGQUIT);
        let _ = std::fs::remove_dir_all(cluster.dir.path());
    }
}

impl Cluster {
    /// A new cluster of its own, started; None when PostgreSQL is not installed and not
    /// required.
    pub fn start() -> Option<Cluster> {
        Cluster::start_with(None)
    }

    /// [`Cluster::start`] with `ssl = on`, serving the certificate chain `cert_pem` with
    /// `key_pem`, and `hba` (lines of `pg_hba.conf`) before the trust rules initdb wrote.
    pub fn start_tls(cert_pem: &str, key_pem: &str, hba: &[&str]) -> Option<Cluster> {
        Cluster::start_with(Some((cert_pem, key_pem, hba)))
    }

    fn start_with(tls: Option<(&str, &str, &[&str])>) -> Option<Cluster> {
        let Some(bin) = binaries() else {
            let message = "PostgreSQL's server binaries are not installed (Debian: apt-get \
                           install postgresql-15); the PostgreSQL backend's tests need them";
            if std::env::var_os("PORTARIA_REQUIRE_POSTGRES").is_some_and(|v| v == "1") {
                panic!("{message} (PORTARIA_REQUIRE_POSTGRES=1)");
            }
            eprintln!("skipped: {message}");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            chown_nobody(dir.path());
        }
        let data = dir.path().join("data");
        let out = as_owner(Command::new(bin.join("initdb")))
            .arg("-D")
            .arg(&data)
            .args(["-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some((cert, key, hba)) = tls {
            let written = [("server.crt", cert), ("server.key", key)];
            for (name, pem) in written {
                let path = data.join(name);
                std::fs::write(&path, pem).unwrap();
                // PostgreSQL refuses a key others can read.
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .unwrap();
                if is_root() {
                    chown_nobody(&path);
                }
            }
            let rules = data.join("pg_hba.conf");
            let initdb_rules = std::fs::read_to_string(&rules).unwrap();
            std::fs::write(&rules, format!("{}\n{initdb_rules}", hba.join("\n"))).unwrap();
        }
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let cluster = Cluster {
            bin,
            dir,
            port,
            tls: tls.is_some(),
            running: Mutex::new(None),
        };
        cluster.resume();
        Some(cluster)
    }

    /// A URL for `database` (trust authentication: no password).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// A new, empty database; returns its name.
    pub async fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let client = self.connect("postgres").await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        name
    }

    /// A client on `database`, its connection driven by a task of its own.
    pub async fn connect(&self, database: &str) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }

    /// Stops the server (a fast shutdown: open sessions are cut) and waits for its exit.
    pub fn stop(&self) {
        self.stop_with(libc::SIGINT);
    }

    /// Stops the server by `signal` (SIGINT: a fast shutdown; SIGQUIT: an immediate one, no
    /// checkpoint, for data that is thrown away) and waits for its exit.
    fn stop_with(&self, signal: i32) {
        if let Some((pid, exited)) = self.running.lock().unwrap().take() {
            unsafe {
                libc::kill(pid, signal);
            }
            exited
                .recv_timeout(Duration::from_secs(20))
                .expect("postgres stops within 20 s");
        }
    }

    /// Starts the server again on the same data and port, and waits until it takes
    /// connections.
    pub fn resume(&self) {
        let mut running = self.running.lock().unwrap();
        assert!(running.is_none(), "already running");
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join("postgres.log"))
                    .unwrap(),
            ));
        if self.tls {
            command.args(["-c", "ssl=on"]);
        }
        let mut command = as_owner(command);
        // After the switch of user (which clears it): the server stops with the test binary.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (pid_tx, pid_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut child = command.spawn().unwrap();
            pid_tx.send(child.id() as i32).unwrap();
            let _ = child.wait();
            let _ = exit_tx.send(());
        });
        let pid = pid_rx.recv().unwrap();
        *running = Some((pid, exit_rx));
        drop(running);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            if out.success() {
                return;
            }
            let log = std::fs::read_to_string(self.dir.path().join("postgres.log"));
            assert!(
                Instant::now() < deadline,
                "postgres did not start within 30 s: {}",
                log.unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The newest /usr/lib/postgresql/N/bin that has initdb and postgres.
fn binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").exists() && bin.join("postgres").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

const NOBODY: u32 = 65534;

fn chown_nobody(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::chown(path.as_ptr(), NOBODY, NOBODY) }, 0);
}

/// `command`, as `nobody` when the tests run as root.
fn as_owner(mut command: Command) -> Command {
    if is_root() {
        command.uid(NOBODY).gid(NOBODY).env("HOME", "/tmp");
    }
    command
}
