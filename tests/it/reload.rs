//! Reloading the configuration: in-process `serve_with` with a reload trigger (the file on
//! disk rewritten, then reloaded), and the real binary with SIGHUP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use portaria::config::Config;
use portaria::server::{Listeners, Options, ReloadTrigger, Reloaded};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// The in-process server, started from a file (as the binary is) with a reload trigger.
struct Reloading {
    addr: SocketAddr,
    admin: SocketAddr,
    dir: TempDir,
    path: PathBuf,
    db: PathBuf,
    trigger: ReloadTrigger,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reloading {
    /// Binds both listeners first, so the file can name the addresses actually served (a
    /// reload compares `listen` with them).
    async fn start(endpoints: &str) -> Reloading {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portaria.toml");
        let db = dir.path().join("portaria.db");
        let webhooks = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (webhooks.local_addr().unwrap(), admin.local_addr().unwrap());
        write_config(&path, addr, admin_addr, &db, endpoints);
        let config = Config::load(Some(&path)).expect("test config is valid");
        let (trigger, requests) = portaria::server::reload_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let listeners = Listeners {
            webhooks,
            admin: Some(admin),
        };
        let options = Options {
            reload: Some(requests),
            ..Options::default()
        };
        let task = tokio::spawn(async move {
            portaria::server::serve_with(
                config,
                listeners,
                async {
                    let _ = stopped.await;
                },
                options,
            )
            .await
            .expect("serve ends cleanly");
        });
        let ready = send(admin_addr, "GET", "/healthz", &[], b"");
        let reply = tokio::time::timeout(Duration::from_secs(20), ready)
            .await
            .expect("the server answers within 20 s");
        assert_eq!(reply.status, 200);
        Reloading {
            addr,
            admin: admin_addr,
            dir,
            path,
            db,
            trigger,
            stop: Some(stop),
            task,
        }
    }

    /// Rewrites the config file with this `listen` (the other addresses as served).
    fn write(&self, listen: SocketAddr, endpoints: &str) {
        write_config(&self.path, listen, self.admin, &self.db, endpoints);
    }

    /// Rewrites the file (same addresses) with more `[server]` keys.
    fn write_with(&self, endpoints: &str, server: &str) {
        self.write(self.addr, endpoints);
        let text = std::fs::read_to_string(&self.path).unwrap();
        let text = text.replace("max_body_bytes = 4096\n", server);
        std::fs::write(&self.path, text).unwrap();
    }

    /// Rewrites the file (same addresses) and reloads it.
    async fn reload(&self, endpoints: &str) -> Reloaded {
        self.write(self.addr, endpoints);
        self.trigger.reload().await.expect("the server is running")
    }

    fn one<T: rusqlite::types::FromSql>(&self, sql: &str) -> T {
        open_db(&self.db).query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Every attempt, event by event, as `events show` lists them (a delivered attempt is
    /// recorded on its delivery row, the others in `attempts`: schema 4).
    fn attempts(&self) -> Vec<(i64, i64, String, Option<String>)> {
        let ids: Vec<i64> = {
            let conn = open_db(&self.db);
            let mut query = conn.prepare("SELECT id FROM events ORDER BY id").unwrap();
            query
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        ids.into_iter()
            .flat_map(|id| {
                event_detail(&self.db, id)
                    .attempts
                    .into_iter()
                    .map(move |a| (id, i64::from(a.attempt), a.outcome, a.error))
            })
            .collect()
    }

    fn statuses(&self) -> Vec<String> {
        let db = open_db(&self.db);
        let mut query = db.prepare("SELECT status FROM events ORDER BY id").unwrap();
        query
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("serve stops within 30 s")
            .expect("serve did not panic");
        drop(self.dir);
    }
}

/// The config file: these addresses and database, and `endpoints` (which may begin with
/// more `[storage]` keys).
fn write_config(path: &Path, listen: SocketAddr, admin: SocketAddr, db: &Path, endpoints: &str) {
    let text = format!(
        "[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\nmax_body_bytes = 4096\n\n[storage]\npath = \"{}\"\n{endpoints}",
        db.display()
    );
    std::fs::write(path, text).unwrap();
}

fn applied() -> Reloaded {
    Reloaded::Applied {
        restart_needed: Vec::new(),
    }
}

fn pagarme(extra: &str) -> String {
    format!(
        "[[endpoint]]\npath = \"/webhooks/pagarme\"\nprovider = \"pagarme\"\nsecret = \"{PAGARME_SECRET}\"\n{extra}\n"
    )
}

fn relya(secrets: &[&str]) -> String {
    let list: Vec<String> = secrets.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[[endpoint]]\npath = \"/webhooks/relya\"\nprovider = \"relya\"\nsecrets = [{}]\n",
        list.join(", ")
    )
}

fn github() -> String {
    format!(
        "[[endpoint]]\npath = \"/webhooks/github\"\nprovider = \"github\"\nsecret = \"{GITHUB_SECRET}\"\n"
    )
}

async fn post_relya(addr: SocketAddr, secret: &str, id: &str) -> u16 {
    let body = format!(r#"{{"event":"messages_update","id":"{id}"}}"#);
    let headers = relya_headers(secret, id, now_secs(), body.as_bytes());
    post(addr, "/webhooks/relya", &headers, body.as_bytes())
        .await
        .status
}

async fn post_github(addr: SocketAddr, n: usize) -> u16 {
    let body = payment_body(n);
    let id = format!("gh-{n}");
    post(
        addr,
        "/webhooks/github",
        &github_headers(Some(&id), &body),
        &body,
    )
    .await
    .status
}

const NEW_RELYA: &str = "rotated-relya-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_reload_adds_removes_and_rotates_endpoints() {
    let server = Reloading::start(&(pagarme("") + &relya(&[RELYA_SECRET]))).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    assert_eq!(post_github(server.addr, 1).await, 404);
    assert_eq!(post_relya(server.addr, NEW_RELYA, "r1").await, 401);

    // Pagar.me goes, GitHub comes, Relya's secret is being rotated: both verify.
    let rotating = relya(&[NEW_RELYA, RELYA_SECRET]) + &github();
    assert_eq!(server.reload(&rotating).await, applied());
    assert_eq!(post_github(server.addr, 2).await, 200);
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        404
    );
    assert_eq!(post_relya(server.addr, NEW_RELYA, "r2").await, 200);
    assert_eq!(post_relya(server.addr, RELYA_SECRET, "r3").await, 200);

    // The new endpoint has its series; the removed one's are gone.
    let metrics = send(server.admin, "GET", "/metrics", &[], b"").await.body;
    assert!(
        metrics.contains(r#"portaria_requests_total{endpoint="github",outcome="accepted"} 1"#),
        "{metrics}"
    );
    assert!(!metrics.contains(r#"endpoint="pagarme""#), "{metrics}");
    assert!(
        metrics.contains(r#"portaria_requests_total{endpoint="relya",outcome="accepted"} 2"#),
        "{metrics}"
    );

    // The rotation is over: the old secret alone is refused now.
    let rotated = relya(&[NEW_RELYA]) + &github();
    assert_eq!(server.reload(&rotated).await, applied());
    assert_eq!(post_relya(server.addr, RELYA_SECRET, "r4").await, 401);
    assert_eq!(post_relya(server.addr, NEW_RELYA, "r5").await, 200);
    assert_eq!(server.one::<i64>("SELECT count(*) FROM events"), 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_queued_before_a_reload_are_delivered_after_it() {
    // The target is down: events wait, pending, for their next try.
    let closed = ClosedPort::new();
    let down = closed.addr;
    let forward = |addr: SocketAddr, concurrency: usize| {
        format!(
            "forward = {{ url = \"http://{addr}/x\", timeout_secs = 2 }}\nretry = [\"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\"]\nconcurrency = {concurrency}\n"
        )
    };
    // Three at once: each event waits for its own retry.
    let server = Reloading::start(&pagarme(&forward(down, 3))).await;
    for n in 1..=3 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    eventually(WAIT, "a failed attempt each", || {
        server.one::<i64>("SELECT count(DISTINCT event_id) FROM attempts WHERE outcome = 'failed'")
            == 3
    })
    .await;

    // The endpoint stops forwarding: its events wait, untouched, however long.
    assert_eq!(server.reload(&pagarme("")).await, applied());
    // Attempts running at the reload finish and are recorded; after that, none start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attempts: i64 = server.one("SELECT count(*) FROM attempts");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.one::<i64>("SELECT count(*) FROM attempts"), attempts);
    assert_eq!(
        server.statuses(),
        ["pending", "pending", "pending"],
        "{:?}",
        server.attempts()
    );
    // A new event of an endpoint that does not forward is only stored.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(4)).await.status,
        200
    );

    // A forward target again, one that is up (and one at a time): the waiting events go out,
    // each once.
    let target = Target::start(vec![200]).await;
    let up = pagarme(&forward(target.addr, 1));
    assert_eq!(server.reload(&up).await, applied());
    eventually(WAIT, "the queued events delivered", || {
        server.statuses() == ["delivered", "delivered", "delivered", "stored"]
    })
    .await;
    assert_eq!(target.count(), 3);
    assert_eq!(
        server.one::<i64>("SELECT count(*) FROM attempts WHERE outcome = 'interrupted'"),
        0,
        "a reload recovers nothing: no attempt was cut off"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_during_a_reload_completes_under_the_config_it_started_with() {
    let server = Reloading::start(&pagarme("")).await;
    let body = payment_body(3);
    let signature = pagarme_headers(&body)[1].1.clone();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nx-hub-signature: {signature}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    // Let the server read the head and route the request (nothing signals that).
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The secret changes under it.
    let rotated = pagarme("").replace(PAGARME_SECRET, "another-pagarme-secret");
    assert_eq!(server.reload(&rotated).await, applied());
    stream.write_all(&body[10..]).await.unwrap();
    let mut answer = vec![0; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A request that starts now is judged by the new secret.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(4)).await.status,
        401
    );
    assert_eq!(server.one::<i64>("SELECT count(*) FROM events"), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_reload_names_every_problem_and_the_old_config_still_serves() {
    let server = Reloading::start(&pagarme("")).await;
    let broken = pagarme("")
        + "[[endpoint]]\npath = \"/webhooks/x\"\nprovider = \"no-such-gateway\"\nsecret = \"s\"\n\n"
        + "[[endpoint]]\npath = \"/webhooks/y\"\nprovider = \"github\"\n";
    let Reloaded::Refused { problems } = server.reload(&broken).await else {
        panic!("a broken config is refused");
    };
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].contains("no-such-gateway"), "{problems:#?}");
    // The very lines `portaria check` prints.
    let check = run_cli(&["check"], &server.path);
    assert_eq!(check.status.code(), Some(1));
    // (Its warnings, a short secret and a readable file here, follow the problems.)
    let mut printed: Vec<String> = String::from_utf8_lossy(&check.stderr)
        .lines()
        .filter(|line| !line.contains(": warning: "))
        .map(str::to_string)
        .collect();
    // ... and then their count.
    let count = printed.pop().unwrap();
    assert!(count.starts_with("2 problems in "), "{count}");
    assert_eq!(problems, printed);
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    assert_eq!(post_github(server.addr, 1).await, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_listen_needs_a_restart_and_the_rest_is_applied() {
    let server = Reloading::start(&pagarme("")).await;
    let closed = ClosedPort::new();
    let elsewhere = closed.addr;
    server.write(elsewhere, &(pagarme("") + &github()));
    let Reloaded::Applied { restart_needed } = server.trigger.reload().await.unwrap() else {
        panic!("a valid config is applied");
    };
    assert_eq!(restart_needed.len(), 1, "{restart_needed:#?}");
    assert!(
        restart_needed[0].starts_with(&format!(
            "server.listen changed from {} to {elsewhere}, which needs a restart",
            server.addr
        )),
        "{restart_needed:#?}"
    );
    // The old address still serves, with the new endpoint; the new one is not bound.
    assert_eq!(post_github(server.addr, 1).await, 200);
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    assert!(std::net::TcpStream::connect(elsewhere).is_err());
    // The listen address in force is still the old one: the next reload, with the same
    // file, says so again rather than thinking it moved.
    let Reloaded::Applied { restart_needed } = server.trigger.reload().await.unwrap() else {
        panic!("a valid config is applied");
    };
    assert_eq!(restart_needed.len(), 1, "{restart_needed:#?}");
    server.stop().await;
}

/// The binary, configured by `endpoints` and `log`, listening on any free port.
fn binary_config(dir: &Path, log: &str, endpoints: &str) -> PathBuf {
    let path = dir.join("portaria.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\n[storage]\npath = \"{}\"\n\n[log]\nlevel = \"{log}\"\n\n{endpoints}",
        dir.join("portaria.db").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_binary_and_a_broken_file_leaves_it_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = binary_config(dir.path(), "info", &pagarme(""));
    let mut serve = portaria();
    // The config's level decides, as under systemd.
    serve
        .env_remove("RUST_LOG")
        .args(["serve", "--config"])
        .arg(&path);
    let mut server = Process::spawn_command(serve).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    assert_eq!(post_github(server.addr, 1).await, 404);
    let shared_log = server.log.clone();
    let log = move || shared_log.lock().unwrap().clone();
    assert!(!log().contains("signature verified"), "{}", log());

    // A new endpoint and the debug level.
    binary_config(dir.path(), "debug", &(pagarme("") + &github()));
    server.signal(libc::SIGHUP);
    eventually(WAIT, "the reload", || {
        log().contains("configuration reloaded")
    })
    .await;
    assert_eq!(post_github(server.addr, 2).await, 200);
    eventually(WAIT, "a debug line", || {
        log().contains("signature verified")
    })
    .await;

    // A broken file: every problem logged, the old config serving.
    let broken =
        github() + "[[endpoint]]\npath = \"/webhooks/y\"\nprovider = \"no-such-gateway\"\n";
    binary_config(dir.path(), "info", &broken);
    server.signal(libc::SIGHUP);
    eventually(WAIT, "the refusal", || log().contains("reload refused")).await;
    let text = log();
    let problem = text
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("no-such-gateway"))
        .unwrap_or_else(|| panic!("the problem is logged: {text}"));
    assert!(problem.contains(&path.display().to_string()), "{problem}");
    assert_eq!(post_github(server.addr, 3).await, 200);
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );

    server.signal(libc::SIGTERM);
    assert!(server.wait(WAIT).await.success(), "{}", log());
}

/// A command target that appends `<name> <event id>` to `dir/calls` when it starts and
/// `<name>-done <event id>` when it ends, sleeping `sleep` in between.
fn script(dir: &Path, name: &str, sleep: &str) -> PathBuf {
    record_calls(
        dir,
        &format!("{name}.sh"),
        "cat > /dev/null",
        &format!("{name} $PORTARIA_EVENT_ID"),
        &format!("sleep {sleep}\necho \"{name}-done $PORTARIA_EVENT_ID\" >> \"$D/calls\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_in_flight_at_a_reload_finishes_with_its_target_and_is_not_retried() {
    let work = tempfile::tempdir().unwrap();
    let forward = |program: &Path| {
        format!(
            "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\n",
            program.display()
        )
    };
    let slow = script(work.path(), "old", "1.5");
    let server = Reloading::start(&pagarme(&forward(&slow))).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    eventually(WAIT, "the slow delivery starts", || {
        calls(work.path()) == ["old 1"]
    })
    .await;

    // A new target while the old one is still running: the old attempt runs to its end.
    let quick = script(work.path(), "new", "0");
    assert_eq!(server.reload(&pagarme(&forward(&quick))).await, applied());
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    eventually(WAIT, "both delivered", || {
        server.statuses() == ["delivered", "delivered"]
    })
    .await;
    // In order (concurrency 1): event 2 waited for event 1, and went to the new target.
    assert_eq!(
        calls(work.path()),
        ["old 1", "old-done 1", "new 2", "new-done 2"]
    );
    assert_eq!(
        server
            .attempts()
            .iter()
            .map(|a| (a.0, a.1, a.2.as_str()))
            .collect::<Vec<_>>(),
        [(1, 1, "delivered"), (2, 1, "delivered")],
        "one attempt each: nothing was cut off or recovered"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limits_header_timeout_and_retention_change_without_a_restart() {
    let server = Reloading::start(&pagarme("")).await;
    let big = format!(
        r#"{{"id":"hook_big","type":"charge.paid","pad":"{}"}}"#,
        "x".repeat(950)
    )
    .into_bytes();
    assert_eq!(post_pagarme(server.addr, &big).await.status, 200);
    // An event received ten days ago: kept by the default retention (30 days).
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    open_db(&server.db)
        .execute(
            "UPDATE events SET received_at = received_at - 10 * 86400000",
            [],
        )
        .unwrap();

    let tighter = format!("retention_days = 5\n\n{}", pagarme(""));
    server.write_with(&tighter, "max_body_bytes = 500\nheader_timeout_secs = 1\n");
    assert_eq!(server.trigger.reload().await.unwrap(), applied());
    assert_eq!(post_pagarme(server.addr, &big).await.status, 413);
    eventually(WAIT, "the old event pruned by the new retention", || {
        server.one::<i64>("SELECT count(*) FROM events") == 0
    })
    .await;
    // A connection accepted after the reload gets the new header deadline.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    assert!(closed.is_ok(), "closed after the new 1 s header timeout");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_added_by_a_reload_starts_the_worker() {
    // Nothing forwards at start, so no worker task runs.
    let server = Reloading::start(&pagarme("")).await;
    let target = Target::start(vec![200]).await;
    let forward = format!(
        "forward = {{ url = \"http://{}/x\", timeout_secs = 5 }}\n",
        target.addr
    );
    assert_eq!(server.reload(&pagarme(&forward)).await, applied());
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    eventually(WAIT, "delivered", || server.statuses() == ["delivered"]).await;
    assert_eq!(target.count(), 1);
    server.stop().await;
}
