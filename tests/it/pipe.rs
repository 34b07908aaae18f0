//! The pipe target with real parts: the real server (in process, or the binary where a crash
//! is involved), real handler processes (the Python and Node handlers of `contrib/`, and
//! Python test handlers), a real SQLite file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

fn contrib(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(name)
        .display()
        .to_string()
}

/// A TOML array of strings.
fn toml_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The base config with a pipe forward on the github endpoint (it accepts any body, so a
/// binary one too) as well; `pagarme` takes `pagarme_extra`.
async fn server_with_github_pipe(argv: &[&str], github_extra: &str) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = base_config(&db, "", "").replace(
        &format!("secret = \"{GITHUB_SECRET}\"\n"),
        &format!(
            "secret = \"{GITHUB_SECRET}\"\nforward = {{ pipe = {}, timeout_secs = 10 }}\n{github_extra}\n",
            toml_list(argv)
        ),
    );
    TestServer::start_with(dir, db, &text).await
}

async fn post_github(server: &TestServer, delivery: &str, body: &[u8]) {
    let headers = github_headers(Some(delivery), body);
    let reply = post(server.addr, "/webhooks/github", &headers, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn statuses(server: &TestServer) -> Vec<(String, u32)> {
    let conn = server.db();
    let mut stmt = conn
        .prepare("SELECT status, attempts FROM deliveries ORDER BY event_id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn errors(server: &TestServer) -> Vec<(i64, String)> {
    let conn = server.db();
    let mut stmt = conn
        .prepare("SELECT event_id, error FROM attempts WHERE error IS NOT NULL ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn all_delivered(server: &TestServer, n: usize) -> bool {
    let s = statuses(server);
    s.len() == n && s.iter().all(|(status, _)| status == "delivered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_and_node_handlers_get_every_field_of_each_event() {
    for interpreter in ["python3", "node"] {
        let work = tempfile::tempdir().unwrap();
        let out = work.path().join("handled.jsonl");
        let file = format!("PIPE_HANDLER_FILE={}", out.display());
        let script = contrib(match interpreter {
            "python3" => "pipe-handler.py",
            _ => "pipe-handler.js",
        });
        let server =
            server_with_github_pipe(&["/usr/bin/env", &file, interpreter, &script], "").await;
        let text = br#"{"ref":"refs/heads/main","note":"caf\u00e9 \u00e7a"}"#.to_vec();
        let binary = vec![0xff, 0xfe, 0x00, 0x41];
        post_github(&server, "d-1", &text).await;
        post_github(&server, "d-2", &binary).await;
        eventually(WAIT, "both delivered", || all_delivered(&server, 2)).await;

        let seen = lines(&out);
        assert_eq!(seen.len(), 2, "{interpreter}: {seen:?}");
        let first = &seen[0];
        assert_eq!(first["id"], 1, "{interpreter}");
        assert_eq!(first["endpoint"], "github");
        assert_eq!(first["route"], "default");
        // GitHub's key: the signed body's SHA-256 (its delivery header is not signed).
        let key = hex::encode(portaria::digest::sha256(&[&text]));
        assert_eq!(first["dedup_key"], key.as_str());
        assert_eq!(first["event_type"], "push");
        assert_eq!(first["attempt"], 1);
        let received = first["received_at"].as_str().unwrap();
        assert!(
            received.len() == 24 && received.ends_with('Z') && received.as_bytes()[10] == b'T',
            "{received}"
        );
        assert_eq!(first["headers"]["x-github-event"], "push");
        assert_eq!(first["headers"]["x-github-delivery"], "d-1");
        assert_eq!(first["body"].as_str().unwrap().as_bytes(), &text[..]);
        assert!(first.get("body_base64").is_none());
        let second = &seen[1];
        assert_eq!(second["id"], 2);
        assert_eq!(second["body_base64"], "//4AQQ==");
        assert!(second.get("body").is_none());
        assert_eq!(statuses(&server), vec![("delivered".into(), 1); 2]);
        server.stop().await;
    }
}

/// Writes a Python test handler; `D` in it is `dir`, `answer(obj)` writes one answer line.
fn python_handler(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("handler.py");
    std::fs::write(
        &path,
        format!(
            "import json, os, select, sys, time\nD = {:?}\n\
             def answer(o):\n    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n{body}\n",
            dir.display().to_string()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_concurrency_several_events_are_in_flight_and_answered_out_of_order() {
    let work = tempfile::tempdir().unwrap();
    // Gathers what arrives until stdin is quiet for 300 ms, then answers it last first, and
    // writes down each batch's ids.
    let handler = python_handler(
        work.path(),
        "pending, buf = [], b''\n\
         while True:\n    \
             ready, _, _ = select.select([0], [], [], 0.3)\n    \
             if ready:\n        \
                 chunk = os.read(0, 65536)\n        \
                 if not chunk: break\n        \
                 buf += chunk\n        \
                 *done, buf = buf.split(b'\\n')\n        \
                 pending += [json.loads(l)['id'] for l in done if l]\n    \
             elif pending:\n        \
                 open(D + '/batches', 'a').write(' '.join(map(str, pending)) + '\\n')\n        \
                 for i in reversed(pending): answer({'id': i, 'ok': True})\n        \
                 pending = []",
    );
    let handler = handler.display().to_string();
    let server = server_with_github_pipe(&["python3", &handler], "concurrency = 4").await;
    for n in 0..8 {
        post_github(
            &server,
            &format!("d-{n}"),
            format!("{{\"n\":{n}}}").as_bytes(),
        )
        .await;
    }
    eventually(WAIT, "all delivered", || all_delivered(&server, 8)).await;
    let batches = std::fs::read_to_string(work.path().join("batches")).unwrap();
    let sizes: Vec<usize> = batches
        .lines()
        .map(|l| l.split_whitespace().count())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 8, "{batches}");
    assert!(
        sizes.iter().any(|&s| s > 1) && sizes.iter().all(|&s| s <= 4),
        "several in flight, never more than the concurrency: {batches}"
    );
    assert!(
        statuses(&server).iter().all(|(_, attempts)| *attempts == 1),
        "each answer settled its own event"
    );
    server.stop().await;
}

/// A handler whose first run misbehaves on the third event (`bad`); later runs answer all.
fn third_event_breaks_first_run(dir: &Path, bad: &str) -> String {
    python_handler(
        dir,
        &format!(
            "first = not os.path.exists(D + '/ran')\n\
             open(D + '/ran', 'a').write(str(os.getpid()) + '\\n')\n\
             for n, line in enumerate(sys.stdin):\n    \
                 e = json.loads(line)\n    \
                 open(D + '/seen', 'a').write(str(e['id']) + ' ' + str(e['attempt']) + '\\n')\n    \
                 if first and n == 2:\n        {bad}\n    \
                 answer({{'id': e['id'], 'ok': True}})"
        ),
    )
    .display()
    .to_string()
}

async fn five_events_one_broken_attempt(bad: &str, timeout_secs: u64) -> (TestServer, String) {
    let work = tempfile::tempdir().unwrap();
    let handler = third_event_breaks_first_run(work.path(), bad);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = base_config(
        &db,
        "",
        &format!(
            "forward = {{ pipe = [\"python3\", {handler:?}], timeout_secs = {timeout_secs} }}\nretry = [\"200ms\"]\n"
        ),
    );
    let server = TestServer::start_with(dir, db, &text).await;
    for n in 0..5 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    eventually(WAIT, "all delivered", || all_delivered(&server, 5)).await;
    let runs = std::fs::read_to_string(work.path().join("ran")).unwrap();
    assert_eq!(runs.lines().count(), 2, "restarted once: {runs}");
    let seen = std::fs::read_to_string(work.path().join("seen")).unwrap();
    assert!(seen.contains("3 1\n") && seen.contains("3 2\n"), "{seen}");
    let mut attempts: Vec<u32> = statuses(&server).iter().map(|(_, a)| *a).collect();
    attempts.sort();
    assert_eq!(
        attempts,
        [1, 1, 1, 1, 2],
        "only the broken attempt was retried"
    );
    let errors = errors(&server);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, 3);
    (server, errors[0].1.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_exits_mid_stream_fails_its_event_which_the_restarted_one_delivers() {
    let (server, error) = five_events_one_broken_attempt("sys.exit(4)", 10).await;
    assert_eq!(
        error,
        "pipe handler failed: the handler exited (exit status 4); killed and restarted"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_stdout_fails_the_event_and_restarts_the_handler() {
    let (server, error) =
        five_events_one_broken_attempt("print('<html>oops</html>', flush=True)", 10).await;
    assert!(
        error.starts_with("pipe handler failed: the handler wrote a line that is not an answer")
            && error.contains("<html>oops</html>"),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_timeout_fails_the_event_and_restarts_the_handler() {
    // 3 s, not 1: every event's answer is timed, the first one's with the handler's start
    // (python3), which a loaded machine (CI's) can stretch past a second.
    let (server, error) = five_events_one_broken_attempt("time.sleep(60)", 3).await;
    assert_eq!(
        error,
        "pipe handler failed: the handler did not answer event 3 within 3s; killed and restarted"
    );
    server.stop().await;
}

fn alive(pid: i32) -> bool {
    // A zombie (exited, not yet reaped by whoever inherited it) runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

/// The real binary: the handler never sees the secret variables, dies when portaria is
/// SIGKILLed (though it ignores EOF), and the event it held is delivered after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_portaria_takes_its_handler_along_and_loses_no_event() {
    let work = tempfile::tempdir().unwrap();
    // First run: answers event 1, holds event 2 without an answer, and never exits by itself.
    let handler = python_handler(
        work.path(),
        "first = not os.path.exists(D + '/ran')\n\
         open(D + '/ran', 'a').write(str(os.getpid()) + '\\n')\n\
         open(D + '/env', 'a').write(repr(sorted(k for k in os.environ if 'SECRET' in k)) + '\\n')\n\
         for line in sys.stdin:\n    \
             e = json.loads(line)\n    \
             open(D + '/seen', 'a').write(str(e['id']) + '\\n')\n    \
             if first and e['id'] == 2: continue\n    \
             answer({'id': e['id'], 'ok': True})\n\
         time.sleep(600)",
    );
    let dir = work.path();
    let config = dir.join("portaria.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret_env = "PORTARIA_TEST_PIPE_SECRET"
forward = {{ pipe = ["python3", "{handler}"], timeout_secs = 60 }}
retry = ["100ms"]
"#,
            db = dir.join("portaria.db").display(),
            handler = handler.display()
        ),
    )
    .unwrap();
    let start = || async {
        let mut serve = portaria();
        serve
            .env("PORTARIA_TEST_PIPE_SECRET", PAGARME_SECRET)
            .env("OTHER_TEST_SECRET_VISIBLE", "not a config secret")
            .args(["serve", "--config"])
            .arg(&config);
        Process::spawn_command(serve).await
    };
    let seen = || std::fs::read_to_string(dir.join("seen")).unwrap_or_default();
    let status_of = |id: i64| -> String {
        open_db(&dir.join("portaria.db"))
            .query_row(
                "SELECT status FROM deliveries WHERE event_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    };

    let mut first = start().await;
    for n in 1..=2 {
        assert_eq!(post_pagarme(first.addr, &payment_body(n)).await.status, 200);
    }
    eventually(WAIT, "event 1 delivered", || status_of(1) == "delivered").await;
    eventually(WAIT, "event 2 handed to the handler", || {
        seen().lines().any(|l| l == "2")
    })
    .await;
    let pid: i32 = std::fs::read_to_string(dir.join("ran"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    first.signal(libc::SIGKILL);
    first.wait(WAIT).await;
    eventually(
        Duration::from_secs(5),
        "the handler died with portaria",
        || !alive(pid),
    )
    .await;
    assert_eq!(status_of(2), "delivering", "held when portaria died");

    let second = start().await;
    eventually(WAIT, "event 2 delivered after the restart", || {
        status_of(2) == "delivered"
    })
    .await;
    assert_eq!(seen(), "1\n2\n2\n", "event 2 at least once, event 1 once");
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    assert_eq!(
        env, "['OTHER_TEST_SECRET_VISIBLE']\n['OTHER_TEST_SECRET_VISIBLE']\n",
        "the config's secret variable is hidden, other variables are inherited"
    );
    drop(second);
}

/// The real binary: a reload closes the running handler (EOF) and the next delivery starts a
/// new one; a graceful stop closes that one too, waiting for it (it takes 0.5 s after EOF),
/// and portaria exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_and_a_stop_close_the_handler_with_eof() {
    let work = tempfile::tempdir().unwrap();
    let handler = python_handler(
        work.path(),
        "log = lambda what: open(D + '/life', 'a').write(what + ' ' + str(os.getpid()) + '\\n')\n\
         log('start')\n\
         for line in sys.stdin:\n    answer({'id': json.loads(line)['id'], 'ok': True})\n\
         time.sleep(0.5)\n\
         log('eof')",
    );
    let dir = work.path();
    let config = dir.join("portaria.toml");
    std::fs::write(
        &config,
        base_config(
            &dir.join("portaria.db"),
            "",
            &format!(
                "forward = {{ pipe = [\"python3\", \"{}\"] }}\n",
                handler.display()
            ),
        ),
    )
    .unwrap();
    let life = || std::fs::read_to_string(dir.join("life")).unwrap_or_default();
    let delivered = |n: i64| {
        open_db(&dir.join("portaria.db"))
            .query_row(
                "SELECT count(*) FROM deliveries WHERE status = 'delivered'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == n
    };
    let mut server = Process::spawn(&config).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    eventually(WAIT, "event 1 delivered", || delivered(1)).await;
    server.signal(libc::SIGHUP);
    eventually(WAIT, "the first handler closed at the reload", || {
        life().lines().filter(|l| l.starts_with("eof")).count() == 1
    })
    .await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    eventually(WAIT, "event 2 delivered", || delivered(2)).await;
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait(WAIT).await.code(), Some(0));
    let life = life();
    let pids: Vec<&str> = life.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(pids.len(), 4, "{life}");
    assert!(
        pids[0] == pids[1] && pids[2] == pids[3] && pids[0] != pids[2],
        "{life}"
    );
    assert!(
        life.starts_with("start") && life.lines().nth(3).unwrap().starts_with("eof"),
        "the second handler got EOF at the stop: {life}"
    );
}
