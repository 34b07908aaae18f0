//! What a target is told to trust (issue 23): the id a provider signed apart from the body
//! (Mercado Pago's query `data.id`) reaches every kind of target, and so does whether the
//! event type came from signed bytes (GitHub's `X-GitHub-Event` header did not, Stripe's body
//! did). The real binary serves, its own environment holding a forged `PORTARIA_SIGNED_ID`;
//! a real command, a real HTTP listener and the contrib Python pipe handler receive. The id
//! stays with the event through `events show`, the status API and page, the archive and its
//! replay. `check` and `serve` warn about a route that filters on an unsigned event type.

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

/// A command target that appends one line per call: the endpoint, the event type, whether
/// it was signed, and the signed id (`<unset>` when the variable is not set at all).
fn recorder(dir: &Path) -> PathBuf {
    record_calls(
        dir,
        "on-event.sh",
        "",
        "$PORTARIA_ENDPOINT type=$PORTARIA_EVENT_TYPE \
         type_signed=${PORTARIA_EVENT_TYPE_SIGNED-<unset>} \
         signed_id=${PORTARIA_SIGNED_ID-<unset>}",
        "",
    )
}

fn pipe_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An endpoint with a command, a URL and a pipe route.
fn endpoint(provider: &str, secret: &str, work: &Path, target: &Target) -> String {
    format!(
        r#"
[[endpoint]]
path = "/webhooks/{provider}"
provider = "{provider}"
secret = "{secret}"

[[endpoint.route]]
name = "command"
forward = {{ command = ["{command}"], timeout_secs = 10 }}

[[endpoint.route]]
name = "url"
forward = {{ url = "http://{addr}/in" }}

[[endpoint.route]]
name = "pipe"
forward = {{ pipe = ["/usr/bin/env", "PIPE_HANDLER_FILE={work}/pipe-{provider}.jsonl", "python3", "{handler}"], timeout_secs = 10 }}
"#,
        command = work.join("on-event.sh").display(),
        addr = target.addr,
        work = work.display(),
        handler = contrib("pipe-handler.py"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_hears_the_signed_id_and_whether_the_event_type_was_signed() {
    let work = tempfile::tempdir().unwrap();
    recorder(work.path());
    let target = Target::start(vec![200]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portaria.toml");
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\n[storage]\npath = \"{}\"\n",
        dir.path().join("portaria.db").display()
    );
    for (provider, secret) in [
        ("mercadopago", MP_SECRET),
        ("github", GITHUB_SECRET),
        ("stripe", STRIPE_SECRET),
    ] {
        text.push_str(&endpoint(provider, secret, work.path(), &target));
    }
    std::fs::write(&config, text).unwrap();
    // A variable of that name in portaria's own environment must never pass for a signed id.
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_SIGNED_ID", "forged-by-the-environment");
    let server = Process::spawn_command(serve).await;

    let (path, headers, body) = mercadopago("/webhooks/mercadopago", "123456", "req-1");
    let reply = post(server.addr, &path, &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = br#"{"ref":"refs/heads/main"}"#;
    let reply = post(
        server.addr,
        "/webhooks/github",
        &github_headers(Some("d-1"), body),
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = br#"{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}"#;
    let reply = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs(), body),
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    let pipe = |provider: &str| work.path().join(format!("pipe-{provider}.jsonl"));
    eventually(WAIT, "every route of every endpoint delivered", || {
        calls_sorted(work.path()).len() == 3
            && target.count() == 3
            && ["mercadopago", "github", "stripe"]
                .iter()
                .all(|p| pipe_lines(&pipe(p)).len() == 1)
    })
    .await;

    // The command.
    assert_eq!(
        calls_sorted(work.path()),
        [
            "github type=push type_signed=0 signed_id=<unset>",
            "mercadopago type=payment type_signed=0 signed_id=123456",
            "stripe type=charge.succeeded type_signed=1 signed_id=<unset>",
        ]
    );

    // The URL.
    let seen = target.seen.lock().unwrap().clone();
    let of = |endpoint: &str| {
        seen.iter()
            .find(|r| r.headers["portaria-endpoint"] == endpoint)
            .unwrap_or_else(|| panic!("no request for {endpoint}"))
            .headers
            .clone()
    };
    let mp = of("mercadopago");
    assert_eq!(mp["portaria-signed-id"], "123456");
    assert_eq!(mp["portaria-event-type"], "payment");
    assert_eq!(mp["portaria-event-type-signed"], "0");
    let github = of("github");
    assert_eq!(github.get("portaria-signed-id"), None);
    assert_eq!(github["portaria-event-type"], "push");
    assert_eq!(github["portaria-event-type-signed"], "0");
    let stripe = of("stripe");
    assert_eq!(stripe.get("portaria-signed-id"), None);
    assert_eq!(stripe["portaria-event-type"], "charge.succeeded");
    assert_eq!(stripe["portaria-event-type-signed"], "1");

    // The pipe.
    let line = |provider: &str| pipe_lines(&pipe(provider)).remove(0);
    let mp = line("mercadopago");
    assert_eq!(
        (&mp["signed_id"], &mp["event_type_signed"]),
        (&"123456".into(), &false.into()),
        "{mp}"
    );
    let github = line("github");
    assert!(github["signed_id"].is_null(), "{github}");
    assert_eq!(github["event_type_signed"], false, "{github}");
    let stripe = line("stripe");
    assert!(stripe["signed_id"].is_null(), "{stripe}");
    assert_eq!(stripe["event_type_signed"], true, "{stripe}");
}

/// A config whose github and stripe endpoints each have a route filtered on the event type.
fn filtered_config(dir: &Path) -> PathBuf {
    let path = dir.join("portaria.toml");
    let route = "[[endpoint.route]]\nname = \"deploy\"\nevents = [\"push\", \"release\"]\n\
                 forward = { command = [\"/bin/true\"] }\n";
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\n[storage]\n\
             path = \"{db}\"\n\n[[endpoint]]\npath = \"/webhooks/github\"\nprovider = \"github\"\n\
             secret = \"{GITHUB_SECRET}\"\n{route}\n[[endpoint]]\npath = \"/webhooks/stripe\"\n\
             provider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n{route}",
            db = dir.join("portaria.db").display()
        ),
    )
    .unwrap();
    // Inline secrets: others may not read it (else `check` warns about that too).
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_serve_warn_about_a_route_filtering_on_an_unsigned_event_type() {
    let dir = tempfile::tempdir().unwrap();
    let config = filtered_config(dir.path());
    let out = run_cli(&["check"], &config);
    assert_eq!(ok_stdout(&out), format!("ok: {}\n", config.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    let [warning] = warnings.as_slice() else {
        panic!("one warning, github's: {stderr}")
    };
    assert!(
        warning
            .contains("(`github`), route `deploy`: its `events` filter relies on the event type")
            && warning.contains("`x-github-event` header, which provider `github` does not sign")
            && warning
                .contains("whoever captured one delivery can send it again under another type"),
        "{warning}"
    );
    // Stripe signs the body its type is read from: no word about it.
    assert!(!stderr.contains("`stripe`"), "{stderr}");

    // The same at serve's start, in the log, before it listens.
    let mut server = Process::spawn(&config).await;
    let log = server.log.lock().unwrap().clone();
    let line = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("route `deploy`"))
        .unwrap_or_else(|| panic!("no warning at start: {log}"));
    assert!(line.contains("(`github`)"), "{line}");
    server.signal(libc::SIGTERM);
    assert!(server.wait(WAIT).await.success());
}

/// The server's status API and page, and `events show`, name the signed id; the archive keeps
/// it, and the event replayed from there is delivered with it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signed_id_is_shown_archived_and_replayed_with_the_event() {
    let work = tempfile::tempdir().unwrap();
    let program = recorder(work.path());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    // Pruned events go to `archive/` beside the config; a Mercado Pago endpoint forwards.
    let mut text =
        base_config(&db, "", "").replace("[storage]\n", "[storage]\narchive_dir = \"archive\"\n");
    text.push_str(&format!(
        "\n[[endpoint]]\npath = \"/webhooks/mercadopago\"\nprovider = \"mercadopago\"\n\
         secret = \"{MP_SECRET}\"\nforward = {{ command = [\"{}\"], timeout_secs = 10 }}\n",
        program.display()
    ));
    let server = TestServer::start_with(dir, db, &text).await;
    let (path, headers, body) = mercadopago("/webhooks/mercadopago", "987654321", "req-7");
    let reply = post(server.addr, &path, &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let id: i64 = server.one("SELECT id FROM events");
    eventually(WAIT, "delivered", || calls_sorted(work.path()).len() == 1).await;
    assert_eq!(
        calls_sorted(work.path()),
        ["mercadopago type=payment type_signed=0 signed_id=987654321"]
    );

    // `events show`, the status API and the event's page.
    let shown = ok_stdout(&run_cli(
        &["events", "show", &id.to_string()],
        &server.config_path(),
    ));
    assert!(shown.contains("\nsigned id:   987654321\n"), "{shown}");
    assert!(
        shown.contains("\nevent type:  payment (not covered by the signature)\n"),
        "{shown}"
    );
    let admin = server.admin.unwrap();
    let api = send(admin, "GET", &format!("/api/events/{id}"), &[], b"").await;
    assert_eq!(api.status, 200, "{}", api.body);
    let api: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(api["signed_id"], "987654321", "{api}");
    assert_eq!(api["event_type_signed"], false, "{api}");
    let page = send(admin, "GET", &format!("/events/{id}"), &[], b"").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("<dt>Signed id</dt><dd><code>987654321</code></dd>"),
        "{}",
        page.body
    );

    // Forty days on it is pruned into the archive, then replayed from it.
    eventually(WAIT, "rolled up", || {
        server.one::<String>("SELECT status FROM events") == "delivered"
    })
    .await;
    server
        .db()
        .execute(
            "UPDATE events SET received_at = received_at - ?1",
            [40 * 86_400_000_i64],
        )
        .unwrap();
    let config = server.config_path();
    let pruned = ok_stdout(&run_cli(&["prune"], &config));
    assert!(pruned.contains("removed 1 event(s)"), "{pruned}");
    let archive = server.dir.path().join("archive");
    let file = std::fs::read_dir(&archive)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let gz = flate2::read::MultiGzDecoder::new(std::fs::File::open(&file).unwrap());
    let line: serde_json::Value = serde_json::from_reader(gz).unwrap();
    assert_eq!(line["signed_id"], "987654321", "{line}");
    assert_eq!(line["event_type_signed"], false, "{line}");
    let replayed = ok_stdout(&run_cli(
        &["archive", "replay", file.to_str().unwrap()],
        &config,
    ));
    assert!(replayed.contains("1 new"), "{replayed}");
    eventually(WAIT, "delivered again", || {
        calls_sorted(work.path()).len() == 2
    })
    .await;
    assert_eq!(
        calls_sorted(work.path()),
        ["mercadopago type=payment type_signed=0 signed_id=987654321"; 2]
    );
    server.stop().await;
}
