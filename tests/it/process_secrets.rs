//! Secrets stay inside portaria (issue 23, section 3), against the real binary: a forward
//! command of portaria's own user reads neither its `/proc/PID/environ` nor its memory (the
//! process is not dumpable); the variables the config read secrets from are gone from
//! `/proc/PID/environ` (overwritten, not only unset), and a reload still has them; no program
//! portaria runs inherits `CREDENTIALS_DIRECTORY`, `NOTIFY_SOCKET` or a secret's variable,
//! before a reload or after; and the database, its `-wal` and `-shm`, the archive and a
//! backup are created 0600 with the umask at 000. Promises: docs/guarantees.md, "Never logged
//! or stored".

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
/// The pagarme secret, given to portaria in an environment variable only.
const ENV_SECRET: &str = "env-S3cr3t-of-pagarme-7f1e";
const VARIABLE: &str = "PORTARIA_TEST_PROC_SECRET";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn chown_nobody(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) }, 0);
}

/// A python forward command that reads what it can of its parent (portaria) and writes it to
/// `$D/seen.<event id>` as JSON: whether the parent's environ holds the secret (or the error
/// reading it), whether any readable region of its memory does (or the error opening it),
/// and the names in its own environment.
fn prober(dir: &Path) -> PathBuf {
    let path = dir.join("probe.py");
    std::fs::write(
        &path,
        format!(
            r#"import json, os, sys
D = {dir:?}
NEEDLE = {ENV_SECRET:?}.encode()
sys.stdin.buffer.read()
parent = os.getppid()
out = {{}}
try:
    out["environ"] = NEEDLE in open(f"/proc/{{parent}}/environ", "rb").read()
except OSError as e:
    out["environ"] = e.strerror
try:
    mem = open(f"/proc/{{parent}}/mem", "rb", buffering=0)
    found = False
    for line in open(f"/proc/{{parent}}/maps"):
        fields = line.split()
        if not fields[1].startswith("rw"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        try:
            mem.seek(start)
            found = found or NEEDLE in mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            pass
    out["mem"] = found
except OSError as e:
    out["mem"] = e.strerror
out["env"] = sorted(os.environ)
name = D + "/seen." + os.environ["PORTARIA_EVENT_ID"]
with open(name + ".tmp", "w") as f:
    json.dump(out, f)
os.rename(name + ".tmp", name)
"#,
            dir = dir.display().to_string()
        ),
    )
    .unwrap();
    path
}

/// A config whose pagarme endpoint reads its secret from [`VARIABLE`] and forwards to the
/// prober; github's secret is a systemd credential. `extra` goes at the end.
fn config_text(dir: &Path, extra: &str) -> String {
    sqlite_config(&dir.join("portaria.db"))
        .without_admin()
        .endpoint(
            "/webhooks/pagarme",
            "pagarme",
            &format!(
                "secret_env = \"{VARIABLE}\"\n\
                 forward = {{ command = [\"python3\", \"{}\"], timeout_secs = 60 }}\n\
                 retry = [\"100ms\"]",
                prober(dir).display()
            ),
        )
        .endpoint(
            "/webhooks/github",
            "github",
            "secret_file = \"credential:github\"",
        )
        .then(extra)
        .text()
}

/// `portaria serve` with the secret in its environment, systemd's credentials directory and
/// notify socket set (the socket is nobody's: portaria's messages go nowhere).
fn serve_command(dir: &Path, config: &Path) -> std::process::Command {
    let credentials = dir.join("credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::write(credentials.join("github"), format!("{GITHUB_SECRET}\n")).unwrap();
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(config)
        .env(VARIABLE, ENV_SECRET)
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("NOTIFY_SOCKET", dir.join("no-such-socket"))
        .env("PORTARIA_IT_HARMLESS", "inherited");
    serve
}

fn pagarme_signed(body: &[u8], secret: &str) -> Vec<(String, String)> {
    let sig = hmac_hex(secret, &[body]);
    vec![
        h("content-type", "application/json"),
        h("x-hub-signature", format!("sha256={sig}")),
    ]
}

async fn post_signed(addr: std::net::SocketAddr, n: usize) -> u16 {
    let body = payment_body(n);
    post(
        addr,
        "/webhooks/pagarme",
        &pagarme_signed(&body, ENV_SECRET),
        &body,
    )
    .await
    .status
}

/// What the prober saw at event `id`.
async fn seen(dir: &Path, id: i64) -> serde_json::Value {
    let file = dir.join(format!("seen.{id}"));
    eventually(WAIT, "the forward command ran", || file.exists()).await;
    serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
}

fn names(seen: &serde_json::Value) -> Vec<String> {
    seen["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The names a program portaria runs must never inherit.
fn assert_hidden(env: &[String], when: &str) {
    for hidden in [VARIABLE, "CREDENTIALS_DIRECTORY", "NOTIFY_SOCKET"] {
        assert!(
            !env.iter().any(|n| n == hidden),
            "{when}: {hidden} inherited: {env:?}"
        );
    }
    assert!(
        env.iter().any(|n| n == "PORTARIA_IT_HARMLESS"),
        "{when}: other variables are inherited: {env:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_command_of_portarias_user_reads_neither_its_environ_nor_its_memory() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let config = dir.join("portaria.toml");
    std::fs::write(&config, config_text(dir, "")).unwrap();
    let mut serve = serve_command(dir, &config);
    // The command runs as portaria's user: as root it could read anything (CAP_SYS_PTRACE),
    // so portaria runs as nobody then, as a packaged service runs as `portaria`.
    if is_root() {
        for path in [dir.to_path_buf(), dir.join("credentials")] {
            chown_nobody(&path);
        }
        chown_nobody(&dir.join("credentials/github"));
        serve.uid(NOBODY).gid(NOBODY).env("HOME", "/tmp");
    }
    let server = Process::spawn_command(serve).await;
    assert_eq!(post_signed(server.addr, 1).await, 200);
    let seen = seen(dir, 1).await;
    assert_eq!(
        seen["environ"], "Permission denied",
        "portaria's /proc/PID/environ: {seen}"
    );
    assert_eq!(
        seen["mem"], "Permission denied",
        "portaria's /proc/PID/mem: {seen}"
    );
    assert_hidden(&names(&seen), "a forward command");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secrets_variables_leave_portarias_environ_and_a_reload_still_has_them() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let config = dir.join("portaria.toml");
    std::fs::write(&config, config_text(dir, "")).unwrap();
    let server = Process::spawn_command(serve_command(dir, &config)).await;
    let pid = server.child.id();

    // Its environment as the kernel shows it (to root, or to nobody at all: not dumpable).
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(environ) => {
            let text = String::from_utf8_lossy(&environ);
            assert!(
                text.contains("PORTARIA_IT_HARMLESS=inherited"),
                "the environment is there: {text:?}"
            );
            assert!(
                !text.contains(ENV_SECRET),
                "the secret is overwritten: {text:?}"
            );
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
    assert_eq!(post_signed(server.addr, 1).await, 200);
    assert_hidden(&names(&seen(dir, 1).await), "before a reload");

    // A reload reads the config again, a new endpoint in it: the variable is gone from the
    // environment, and the secret is still known.
    let new = format!(
        "\n[[endpoint]]\npath = \"/webhooks/new\"\nprovider = \"pagarme\"\nsecret = \"{PAGARME_SECRET}\"\n"
    );
    std::fs::write(&config, config_text(dir, &new)).unwrap();
    server.signal(libc::SIGHUP);
    eventually(WAIT, "the reload", || {
        let log = server.log.lock().unwrap();
        log.contains("configuration reloaded") || log.contains("reload refused")
    })
    .await;
    let log = server.log.lock().unwrap().clone();
    assert!(
        !log.contains("reload refused") && log.contains("configuration reloaded"),
        "{log}"
    );
    assert_eq!(post_signed(server.addr, 2).await, 200);
    assert_hidden(&names(&seen(dir, 2).await), "after a reload");
    let body = payment_body(3);
    let reply = post(server.addr, "/webhooks/new", &pagarme_headers(&body), &body).await;
    assert_eq!(reply.status, 200, "the reloaded config is in force");
    assert!(!log.contains(ENV_SECRET), "never logged");
    drop(server);
}

/// `portaria ARGS` with the umask at 000.
fn with_umask_000(args: &[&str], config: &Path) -> std::process::Output {
    let mut command = portaria();
    command.args(args).arg("--config").arg(config);
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    command.output().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_its_wal_and_shm_the_archive_and_backups_are_0600_whatever_the_umask() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let data = dir.join("data");
    let db = data.join("portaria.db");
    let config = dir.join("portaria.toml");
    let text = base_config(&db, "", "").replace(
        &format!("path = \"{}\"", db.display()),
        &format!("path = \"{}\"\narchive_dir = \"archive\"", db.display()),
    );
    std::fs::write(&config, text).unwrap();
    let mut serve = portaria();
    serve.args(["serve", "--config"]).arg(&config);
    unsafe {
        serve.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let server = Process::spawn_command(serve).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    for file in ["portaria.db", "portaria.db-wal", "portaria.db-shm"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&data), 0o700, "the directory portaria made for it");

    // Forty days on, `portaria prune` archives the event.
    open_db(&db)
        .execute(
            "UPDATE events SET received_at = received_at - ?1",
            [40 * 86_400_000i64],
        )
        .unwrap();
    let pruned = with_umask_000(&["prune"], &config);
    assert!(
        ok_stdout(&pruned).contains("removed 1 event(s)"),
        "{pruned:?}"
    );
    let archive = dir.join("archive");
    assert_eq!(mode(&archive), 0o700);
    let files: Vec<_> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(mode(&files[0]), 0o600, "{}", files[0].display());

    let copy = dir.join("copy.db");
    let backup = with_umask_000(&["backup", copy.to_str().unwrap()], &config);
    ok_stdout(&backup);
    assert_eq!(mode(&copy), 0o600);
    drop(server);
}

#[test]
fn check_warns_when_others_can_read_a_config_that_holds_secrets() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("portaria.toml");
    // base_config writes every secret inline.
    std::fs::write(&config, base_config(&work.path().join("p.db"), "", "")).unwrap();
    for (mode, warned) in [(0o644, true), (0o640, true), (0o600, false)] {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = run_cli(&["check"], &config);
        assert_eq!(ok_stdout(&out).trim(), format!("ok: {}", config.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.contains("holds secrets inline (secret, secrets) and is readable by group or others; chmod 600 it"),
            warned,
            "{mode:o}: {stderr}"
        );
    }
}
