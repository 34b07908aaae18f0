//! The command line, as an operator uses it: `check`, config lookup, `events`, signals.

use std::time::Duration;

use crate::support::*;

#[test]
fn check_says_ok_for_a_valid_file_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let out = portaria()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert!(
        !dir.path().join("p.db").exists(),
        "check serves nothing and creates nothing"
    );
}

#[test]
fn check_lists_every_problem_with_file_and_key_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[endpoint]]\npath = \"/a\"\nprovider = \"paypal\"\nsecret = \"x\"\n\n[[endpoint]]\npath = \"/b\"\nprovider = \"github\"\nsecret_env = \"PORTARIA_IT_UNSET\"\n",
    )
    .unwrap();
    let out = portaria()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .env_remove("PORTARIA_IT_UNSET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: endpoint[0] (line 1)") && err.contains("paypal"),
        "{err}"
    );
    assert!(
        err.contains("endpoint[1] (line 6).secret_env") && err.contains("PORTARIA_IT_UNSET"),
        "{err}"
    );
}

#[test]
fn serve_refuses_to_start_on_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[server]\nlisten = \"nowhere\"\n").unwrap();
    let out = portaria()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("server.listen") && err.contains("nowhere"),
        "{err}"
    );
}

#[test]
fn config_lookup_prefers_the_flag_then_the_env_then_the_user_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let user_dir = home.join(".config/portaria");
    std::fs::create_dir_all(&user_dir).unwrap();
    // Each candidate file is broken in its own way, so the error says which one was read.
    std::fs::write(user_dir.join("portaria.toml"), "user_file_marker = 1\n").unwrap();
    let env_file = dir.path().join("env.toml");
    std::fs::write(&env_file, "env_file_marker = 1\n").unwrap();
    let flag_file = dir.path().join("flag.toml");
    std::fs::write(&flag_file, "flag_file_marker = 1\n").unwrap();
    let run = |args: &[&std::ffi::OsStr], env: Option<&std::path::Path>| {
        let mut cmd = portaria();
        cmd.arg("check")
            .args(args)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME");
        if let Some(env) = env {
            cmd.env("PORTARIA_CONFIG", env);
        }
        String::from_utf8_lossy(&cmd.output().unwrap().stderr).into_owned()
    };
    assert!(
        run(
            &["--config".as_ref(), flag_file.as_os_str()],
            Some(&env_file)
        )
        .contains("flag_file_marker")
    );
    assert!(run(&[], Some(&env_file)).contains("env_file_marker"));
    assert!(run(&[], None).contains("user_file_marker"));
}

#[test]
fn with_no_config_anywhere_check_reports_the_embedded_demo() {
    let home = tempfile::tempdir().unwrap();
    let out = portaria()
        .arg("check")
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    if std::path::Path::new(portaria::config::SYSTEM_PATH).exists() {
        return; // this machine has a system config; the order test above covers the rest
    }
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("embedded demo"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_stores_lists_shows_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let mut server = Process::spawn(&config).await;

    let body = payment_body(5);
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_headers(&body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 200);
    let relya = br#"{"event":"messages_update"}"#;
    let headers = relya_headers(RELYA_SECRET, "dlv_cli", now_secs(), relya);
    assert_eq!(
        post(server.addr, "/webhooks/relya", &headers, relya)
            .await
            .status,
        200
    );

    // The CLI reads while the server runs (WAL).
    let out = portaria()
        .args(["events", "list", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["endpoint"], "relya", "newest first");
    assert_eq!(lines[0]["dedup_key"], "dlv_cli");
    assert_eq!(lines[0]["event_type"], "messages_update");
    assert_eq!(lines[0]["status"], "stored");
    assert!(lines[0]["received_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[1]["endpoint"], "pagarme");
    for key in [
        "id",
        "endpoint",
        "dedup_key",
        "event_type",
        "received_at",
        "status",
    ] {
        assert!(lines[1].get(key).is_some(), "missing {key}");
    }

    let out = portaria()
        .args(["events", "list", "--endpoint", "pagarme", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("pagarme") && !table.contains("relya"),
        "{table}"
    );

    let id = lines[1]["id"].as_i64().unwrap().to_string();
    let out = portaria()
        .args(["events", "show", &id, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("x-hub-signature: sha256="), "{shown}");
    assert!(
        shown.contains(std::str::from_utf8(&body).unwrap()),
        "{shown}"
    );

    let out = portaria()
        .args(["events", "show", "999", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no event 999"));

    server.signal(libc::SIGTERM);
    let status = server.wait(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean exit");
    assert!(server.log.lock().unwrap().contains("SIGTERM"));
    // Closed cleanly: the WAL was checkpointed into the main file.
    let wal = dir.path().join("p.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
}
