//! portaria serving in this process (`TestServer`, on 127.0.0.1:0 with a real SQLite file in
//! a temp dir) or as the real binary (`Process`, for signals and kills), and the database
//! underneath.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portaria::config::{Config, Source};
use portaria::server::Listeners;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;

use super::eventually;
use super::http::{post_pagarme, send};
use super::signing::{GITHUB_SECRET, PAGARME_SECRET, RELYA_SECRET, STRIPE_SECRET, payment_body};

/// A config with one endpoint per kind the contract tests need. `{extra}` lets a test add
/// keys to the pagarme endpoint (a forward target, say). The admin listener takes any free
/// port (never the default 9464, which parallel tests would fight over) unless `server_extra`
/// sets `admin_listen` itself.
pub fn base_config(db: &Path, server_extra: &str, pagarme_extra: &str) -> String {
    let admin = if server_extra.contains("admin_listen") {
        ""
    } else {
        "admin_listen = \"127.0.0.1:0\""
    };
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
{admin}
max_body_bytes = 4096
{server_extra}

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{PAGARME_SECRET}"
{pagarme_extra}

[[endpoint]]
path = "/webhooks/relya"
provider = "relya"
secrets = ["{RELYA_SECRET}", "old-relya-secret"]

[[endpoint]]
path = "/webhooks/github"
provider = "github"
secret = "{GITHUB_SECRET}"

[[endpoint]]
path = "/webhooks/stripe"
provider = "stripe"
secret = "{STRIPE_SECRET}"
"#,
        db = db.display()
    )
}

/// portaria's `serve`, in this process, on 127.0.0.1:0.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The admin listener, unless the config turns it off.
    pub admin: Option<SocketAddr>,
    pub dir: TempDir,
    pub db: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(server_extra: &str, pagarme_extra: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("portaria.db");
        let text = base_config(&db, server_extra, pagarme_extra);
        TestServer::start_with(dir, db, &text).await
    }

    pub async fn start_with(dir: TempDir, db: PathBuf, text: &str) -> TestServer {
        let path = dir.path().join("portaria.toml");
        std::fs::write(&path, text).unwrap();
        let mut config = Config::parse(text, Source::File(path)).expect("test config is valid");
        // Whatever the text says, both listeners take a free loopback port: tests run in parallel.
        let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
        config.server.listen = any_port;
        if let Some(admin) = &mut config.server.admin_listen {
            *admin = any_port;
        }
        let listeners = Listeners::bind(&config.server).await.unwrap();
        let addr = listeners.webhooks.local_addr().unwrap();
        let admin = listeners.admin.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            portaria::serve(config, listeners, async {
                let _ = stopped.await;
            })
            .await
            .expect("serve ends cleanly");
        });
        // The sockets are bound, but `serve` still opens the store and starts the worker:
        // wait until it answers, so that no test times the server's own start.
        if let Some(admin) = admin {
            let ready = send(admin, "GET", "/healthz", &[], b"");
            let reply = tokio::time::timeout(Duration::from_secs(20), ready)
                .await
                .expect("the server answers within 20 s");
            assert_eq!(reply.status, 200);
        }
        TestServer {
            addr,
            admin,
            dir,
            db,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("portaria.toml")
    }

    /// Graceful shutdown; waits for `serve` to return.
    pub async fn stop(mut self) -> TempDir {
        self.shutdown().await;
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("serve stops within 30 s")
                .expect("serve task did not panic");
        }
    }

    pub fn db(&self) -> rusqlite::Connection {
        open_db(&self.db)
    }

    /// The single value a query returns.
    pub fn one<T: rusqlite::types::FromSql>(&self, sql: &str) -> T {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    pub fn count_rows(&self) -> i64 {
        self.one("SELECT count(*) FROM events")
    }

    /// The events stored for `endpoint`.
    pub fn events_of(&self, endpoint: &str) -> i64 {
        self.db()
            .query_row(
                "SELECT count(*) FROM events WHERE endpoint = ?1",
                [endpoint],
                |r| r.get(0),
            )
            .unwrap()
    }
}

/// The count a query returns.
pub fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

pub fn open_db(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// One event as `events show` reads it (its routes and attempts), through a read-only store
/// on a thread and runtime of its own: callable from sync code inside an async test.
pub fn event_detail(db: &Path, id: i64) -> portaria::store::EventDetail {
    let db = db.to_path_buf();
    std::thread::spawn(move || {
        let store = portaria::store::Store::open_read_only(&db).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let detail = runtime.block_on(store.event_detail(id)).unwrap();
        store.close();
        detail.unwrap()
    })
    .join()
    .unwrap()
}

/// The real binary, with a clean environment for config lookup.
pub fn portaria() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portaria"));
    cmd.env_remove("PORTARIA_CONFIG").env("RUST_LOG", "info");
    // Not systemd's socket of whatever runs the tests: a test that wants one sets its own.
    for var in [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "CREDENTIALS_DIRECTORY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `portaria ARGS --config CONFIG` to the end.
pub fn run_cli(args: &[&str], config: &Path) -> std::process::Output {
    portaria()
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

/// Checks that a command exited 0 (showing its stderr if not) and returns its stdout.
pub fn ok_stdout(out: &std::process::Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The binary serving `config`, with its bound addresses read from its log.
pub struct Process {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin listener, None when the log says `admin=off`.
    pub admin: Option<SocketAddr>,
    pub log: Arc<Mutex<String>>,
}

impl Process {
    pub async fn spawn(config: &Path) -> Process {
        let mut serve = portaria();
        serve.args(["serve", "--config"]).arg(config);
        Process::spawn_command(serve).await
    }

    /// Starts `serve` as `command` says (arguments, environment).
    pub async fn spawn_command(mut command: Command) -> Process {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = tokio::process::ChildStderr::from_std(child.stderr.take().unwrap()).unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = oneshot::channel();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut addr_tx = Some(addr_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("addr=").nth(1)
                    && line.contains("listening")
                    && let Some(tx) = addr_tx.take()
                {
                    let addr: SocketAddr = rest.split_whitespace().next().unwrap().parse().unwrap();
                    let admin = line
                        .split(" admin=")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next()?.parse().ok());
                    let _ = tx.send((addr, admin));
                }
                // `--log-format json`: the same line as an object.
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                    && v["message"] == "listening"
                    && let Some(tx) = addr_tx.take()
                {
                    let addr: SocketAddr = v["addr"].as_str().unwrap().parse().unwrap();
                    let admin = v["admin"].as_str().and_then(|a| a.parse().ok());
                    let _ = tx.send((addr, admin));
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (addr, admin) = tokio::time::timeout(Duration::from_secs(20), addr_rx)
            .await
            .expect("the server reports its address within 20 s")
            .expect("the server started");
        Process {
            child,
            addr,
            admin,
            log,
        }
    }

    pub fn signal(&self, signal: i32) {
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one pagarme webhook and waits until the worker has made it dead.
pub async fn a_dead_event(server: &TestServer) -> i64 {
    let reply = post_pagarme(server.addr, &payment_body(1)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    eventually(Duration::from_secs(15), "the event dead", || {
        server
            .db()
            .query_row(
                "SELECT count(*) FROM deliveries WHERE status = 'dead'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == 1
    })
    .await;
    server.one("SELECT id FROM events")
}
