//! systemd integration, against the real binary: the notify protocol (`READY=1` with a status
//! line, `STOPPING=1` after SIGTERM, a path or an abstract socket name), the watchdog (pings
//! while healthy, none while another connection holds the database's write lock, pings again
//! once it is released), and secrets read from systemd credentials (`$CREDENTIALS_DIRECTORY`).
//! Each test binds its own datagram socket and plays systemd's part.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::net::UnixDatagram;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// systemd's end of the notify socket, bound at a path in a temp dir.
fn manager(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    (socket, path.display().to_string())
}

/// The next datagram, or None after `limit`.
async fn next(socket: &UnixDatagram, limit: Duration) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(limit, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(e)) => panic!("reading the notify socket: {e}"),
        Err(_) => None,
    }
}

/// Reads datagrams until one has the line `line`; returns it. Panics after `limit`.
async fn expect_line(socket: &UnixDatagram, line: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(msg) = next(socket, deadline.saturating_duration_since(Instant::now())).await {
        if msg.lines().any(|l| l == line) {
            return msg;
        }
        seen.push(msg);
    }
    panic!("no `{line}` within {limit:?}; got {seen:?}");
}

/// `portaria serve` on the contract-test config, with these variables set.
async fn serve_with(dir: &Path, env: &[(&str, &str)]) -> Process {
    let config = dir.join("portaria.toml");
    std::fs::write(&config, base_config(&dir.join("p.db"), "", "")).unwrap();
    let mut serve = portaria();
    serve.args(["serve", "--config"]).arg(&config);
    for (k, v) in env {
        serve.env(k, v);
    }
    Process::spawn_command(serve).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_with_a_status_line_then_stopping_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let mut server = serve_with(dir.path(), &[("NOTIFY_SOCKET", &name)]).await;
    let ready = expect_line(&socket, "READY=1", WAIT).await;
    assert!(
        ready
            .lines()
            .any(|l| l == "STATUS=serving 4 endpoints; 0 pending, 0 dead"),
        "{ready:?}"
    );
    // Ready means ready: a webhook is stored and answered at once.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    server.signal(libc::SIGTERM);
    let stopping = expect_line(&socket, "STOPPING=1", WAIT).await;
    assert!(stopping.contains("STATUS=stopping"), "{stopping:?}");
    assert!(server.wait(WAIT).await.success());
    // No watchdog was asked for, so there were no pings.
    while let Some(msg) = next(&socket, Duration::from_millis(50)).await {
        assert!(!msg.contains("WATCHDOG=1"), "{msg:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abstract_socket_name_is_reached() {
    use std::os::linux::net::SocketAddrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = format!("portaria-it-{}-{}", std::process::id(), now_secs());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
    socket.set_nonblocking(true).unwrap();
    let socket = UnixDatagram::from_std(socket).unwrap();
    let mut server = serve_with(dir.path(), &[("NOTIFY_SOCKET", &format!("@{name}"))]).await;
    expect_line(&socket, "READY=1", WAIT).await;
    server.signal(libc::SIGTERM);
    expect_line(&socket, "STOPPING=1", WAIT).await;
    assert!(server.wait(WAIT).await.success());
}

/// Counts `WATCHDOG=1` pings over `span`.
async fn pings(socket: &UnixDatagram, span: Duration) -> (usize, Vec<String>) {
    let deadline = Instant::now() + span;
    let (mut n, mut other) = (0, Vec::new());
    while let Some(msg) = next(socket, deadline.saturating_duration_since(Instant::now())).await {
        if msg == "WATCHDOG=1" {
            n += 1;
        } else {
            other.push(msg);
        }
    }
    (n, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_pings_every_half_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let env = [
        ("NOTIFY_SOCKET", name.as_str()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let mut server = serve_with(dir.path(), &env).await;
    expect_line(&socket, "READY=1", WAIT).await;
    // Every 100 ms: 2 s hold about 20; a loaded machine may miss a few.
    let (n, _) = pings(&socket, Duration::from_secs(2)).await;
    assert!((8..=25).contains(&n), "{n} pings in 2 s");
    server.signal(libc::SIGTERM);
    expect_line(&socket, "STOPPING=1", WAIT).await;
    assert!(server.wait(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_meant_for_another_process_is_not_pinged() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let env = [
        ("NOTIFY_SOCKET", name.as_str()),
        ("WATCHDOG_USEC", "200000"),
        ("WATCHDOG_PID", "1"),
    ];
    let _server = serve_with(dir.path(), &env).await;
    expect_line(&socket, "READY=1", WAIT).await;
    let (n, _) = pings(&socket, Duration::from_secs(1)).await;
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_writer_stops_the_pings_until_it_is_free_again() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let env = [
        ("NOTIFY_SOCKET", name.as_str()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let mut server = serve_with(dir.path(), &env).await;
    expect_line(&socket, "READY=1", WAIT).await;
    expect_line(&socket, "WATCHDOG=1", WAIT).await;

    // Another connection takes the write lock: the writer cannot begin a transaction.
    let other = open_db(&dir.path().join("p.db"));
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    // The check under way may still pass; after that, the writer is wedged.
    let unhealthy = expect_line(
        &socket,
        "STATUS=unhealthy: the database writer did not answer within 50ms",
        WAIT,
    )
    .await;
    assert!(!unhealthy.contains("WATCHDOG"), "{unhealthy:?}");
    let (n, _) = pings(&socket, Duration::from_millis(1500)).await;
    assert_eq!(n, 0, "no pings while the writer is wedged");

    other.execute_batch("COMMIT").unwrap();
    // The writer's busy wait (3 s) ends with the lock; the next check passes.
    expect_line(&socket, "WATCHDOG=1", WAIT).await;
    let (n, _) = pings(&socket, Duration::from_secs(1)).await;
    assert!(n >= 3, "pinging again: {n} in 1 s");
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("systemd watchdog: the database writer did not answer")
            && log.contains("healthy again"),
        "{log}"
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_command_never_sees_the_notify_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let program = dir.path().join("dump-env.sh");
    let dump = dir.path().join("env");
    write_executable(
        &program,
        format!(
            "#!/bin/sh\ncat > /dev/null\nenv > '{0}.tmp' && mv '{0}.tmp' '{0}'\n",
            dump.display()
        ),
    );
    let config = dir.path().join("portaria.toml");
    let forward = format!("forward = {{ command = [\"{}\"] }}", program.display());
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", &forward)).unwrap();
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &name)
        .env("WATCHDOG_USEC", "30000000");
    let server = Process::spawn_command(serve).await;
    expect_line(&socket, "READY=1", WAIT).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    eventually(WAIT, "the command ran", || dump.exists()).await;
    let env = std::fs::read_to_string(&dump).unwrap();
    assert!(env.contains("PORTARIA_EVENT_ID="), "{env}");
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC"] {
        assert!(!env.contains(var), "{var} reached the command: {env}");
    }
}

/// The contract config with pagarme's secret in the file `secret_file` names.
fn config_with_secret_file(dir: &Path, secret_file: &str) -> std::path::PathBuf {
    let config = dir.join("portaria.toml");
    let text = base_config(&dir.join("p.db"), "", "").replace(
        &format!("secret = \"{PAGARME_SECRET}\""),
        &format!("secret_file = \"{secret_file}\""),
    );
    assert!(text.contains(secret_file));
    std::fs::write(&config, text).unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_comes_from_a_systemd_credential() {
    let dir = tempfile::tempdir().unwrap();
    // What systemd lays out for LoadCredential=pagarme:...: one read-only file per credential.
    let credentials = tempfile::tempdir().unwrap();
    let file = credentials.path().join("pagarme");
    std::fs::write(&file, format!("{PAGARME_SECRET}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();

    let config = config_with_secret_file(dir.path(), "credential:pagarme");
    let check = |env: Option<&Path>| {
        let mut cmd = portaria();
        cmd.args(["check", "--config"]).arg(&config);
        if let Some(dir) = env {
            cmd.env("CREDENTIALS_DIRECTORY", dir);
        }
        cmd.output().unwrap()
    };
    assert_eq!(
        ok_stdout(&check(Some(credentials.path()))).trim(),
        format!("ok: {}", config.display())
    );

    let unset = check(None);
    let stderr = String::from_utf8_lossy(&unset.stderr);
    assert_eq!(unset.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("secret_file: credential `pagarme`: $CREDENTIALS_DIRECTORY is not set"),
        "{stderr}"
    );
    let empty = tempfile::tempdir().unwrap();
    let missing = check(Some(empty.path()));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("credential `pagarme` is not in $CREDENTIALS_DIRECTORY"),
        "{stderr}"
    );

    // The other spelling, served: a request signed with the credential's secret is stored.
    let config = config_with_secret_file(dir.path(), "$CREDENTIALS_DIRECTORY/pagarme");
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("CREDENTIALS_DIRECTORY", credentials.path());
    let server = Process::spawn_command(serve).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains(PAGARME_SECRET), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_is_announced_reloading_then_ready_and_a_refused_one_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let server = serve_with(dir.path(), &[("NOTIFY_SOCKET", &name)]).await;
    expect_line(&socket, "READY=1", WAIT).await;

    // One more endpoint: the status systemd shows counts it.
    let config = dir.path().join("portaria.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "\n[[endpoint]]\npath = \"/webhooks/github2\"\nprovider = \"github\"\nsecret = \"x\"\n",
    );
    std::fs::write(&config, text).unwrap();
    server.signal(libc::SIGHUP);
    let reloading = expect_line(&socket, "RELOADING=1", WAIT).await;
    let usec = reloading
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .expect("MONOTONIC_USEC with RELOADING=1");
    assert!(usec.parse::<u64>().is_ok_and(|u| u > 0), "{reloading:?}");
    let ready = expect_line(&socket, "READY=1", WAIT).await;
    assert!(ready.contains("STATUS=configuration reloaded"), "{ready:?}");
    assert!(ready.contains("serving 5 endpoints"), "{ready:?}");

    // A broken file: still RELOADING=1 then READY=1 (the old config serves), saying so.
    std::fs::write(dir.path().join("portaria.toml"), "[server\n").unwrap();
    server.signal(libc::SIGHUP);
    expect_line(&socket, "RELOADING=1", WAIT).await;
    let ready = expect_line(&socket, "READY=1", WAIT).await;
    assert!(ready.contains("STATUS=reload refused"), "{ready:?}");
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_line_names_the_paused_routes() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, name) = manager(dir.path());
    let config = dir.path().join("portaria.toml");
    let forward = "forward = { command = [\"/bin/true\"] }";
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", forward)).unwrap();
    let serve = |notify: Option<&str>| {
        let mut serve = portaria();
        serve.args(["serve", "--config"]).arg(&config);
        if let Some(name) = notify {
            serve.env("NOTIFY_SOCKET", name);
        }
        Process::spawn_command(serve)
    };
    let mut first = serve(None).await;
    first.signal(libc::SIGTERM);
    assert!(first.wait(WAIT).await.success());
    // The route is paused while the service is down; the next start says so.
    let out = run_cli(
        &[
            "route",
            "pause",
            "--endpoint",
            "pagarme",
            "--route",
            "default",
        ],
        &config,
    );
    ok_stdout(&out);
    let mut server = serve(Some(&name)).await;
    let ready = expect_line(&socket, "READY=1", WAIT).await;
    assert!(
        ready
            .lines()
            .any(|l| l == "STATUS=serving 4 endpoints; 0 pending, 0 dead; paused: pagarme"),
        "{ready:?}"
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait(WAIT).await.success());
}
