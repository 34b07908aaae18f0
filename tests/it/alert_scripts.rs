//! The ready alert commands in `contrib/alerts/`, with real parts: ntfy end to end (the real
//! binary runs the script when an event goes dead) and Telegram against a real local HTTP
//! listener standing in for the service (their base URLs come from the environment), e-mail
//! with a fake `sendmail` on PATH that records what it was given.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::*;

const ALERT: &str = r#"{"kind":"dead","endpoint":"pagarme","route":null,"count":2,"first_event_id":7,"last_event_id":9,"message":"2 events of endpoint pagarme went dead (ids 7 to 9): every delivery attempt failed.\nSee the log.","time":"2026-12-01T11:00:00.000Z"}"#;

fn contrib(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib/alerts")
        .join(name)
}

/// A listener that records each request's raw text (head and body) and answers `status`.
async fn service(status: u16) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Head, then as much body as Content-Length says.
            loop {
                let n = stream.read(&mut buf).await.unwrap_or(0);
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (name, value) = l.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if raw.len() >= end + 4 + length || n == 0 {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            record
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&raw).into_owned());
            let answer =
                format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (addr, seen)
}

/// Runs `script` with `env` and the alert on stdin, on a blocking thread; its exit status
/// and stderr.
async fn run(script: PathBuf, env: Vec<(String, String)>) -> (bool, String) {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(script)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A script that stops at a missing setting does not read it.
        let _ = child.stdin.take().unwrap().write_all(ALERT.as_bytes());
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn ntfy_gets_the_alert_of_a_dead_event_from_the_real_server() {
    let (addr, seen) = service(200).await;
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let fail = w.join("fail.sh");
    write_executable(&fail, "#!/bin/sh\ncat > /dev/null\nexit 1\n");
    let config = w.join("portaria.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"off\"\n\
             [alerts]\ncommand = [\"{ntfy}\"]\nalert_every = \"1s\"\n\
             [storage]\npath = \"{db}\"\n\
             [[endpoint]]\npath = \"/webhooks/pagarme\"\nprovider = \"pagarme\"\n\
             secret = \"{PAGARME_SECRET}\"\n\
             forward = {{ command = [\"{fail}\"] }}\nretry = [\"50ms\"]\n",
            ntfy = contrib("ntfy.sh").display(),
            db = w.join("portaria.db").display(),
            fail = fail.display(),
        ),
    )
    .unwrap();
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("NTFY_URL", format!("http://{addr}/portaria-test"))
        .env("NTFY_TOKEN", "tk_test_token");
    let server = Process::spawn_command(serve).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let limit = Duration::from_secs(20);
    eventually(limit, "ntfy is called", || !seen.lock().unwrap().is_empty()).await;
    let request = seen.lock().unwrap()[0].clone();
    assert!(
        request.starts_with("POST /portaria-test HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains("Title: portaria: dead on pagarme\r\n"),
        "{request}"
    );
    assert!(request.contains("Priority: high\r\n"), "{request}");
    assert!(request.contains("Authorization: Bearer tk_test_token\r\n"));
    assert!(
        request.contains("1 event of endpoint pagarme went dead"),
        "{request}"
    );
    eventually(limit, "portaria logs the alert as sent", || {
        server.log.lock().unwrap().contains("alert sent")
    })
    .await;
}

#[tokio::test]
async fn telegram_gets_a_message_and_a_refusal_is_a_failure() {
    let (addr, seen) = service(200).await;
    let env = |addr: SocketAddr| {
        vec![
            ("TELEGRAM_API".to_string(), format!("http://{addr}")),
            (
                "TELEGRAM_BOT_TOKEN".to_string(),
                "123456:ABC-test".to_string(),
            ),
            ("TELEGRAM_CHAT_ID".to_string(), "-1001".to_string()),
        ]
    };
    let (ok, stderr) = run(contrib("telegram.sh"), env(addr)).await;
    assert!(ok, "{stderr}");
    let request = seen.lock().unwrap()[0].clone();
    assert!(
        request.starts_with("POST /bot123456:ABC-test/sendMessage HTTP/1.1\r\n"),
        "{request}"
    );
    let body = &request[request.find("\r\n\r\n").unwrap() + 4..];
    let sent: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(sent["chat_id"], "-1001");
    let text = sent["text"].as_str().unwrap();
    assert!(
        text.starts_with("portaria: dead on pagarme\n2 events"),
        "{text}"
    );

    let (refusing, _) = service(400).await;
    let (ok, _) = run(contrib("telegram.sh"), env(refusing)).await;
    assert!(!ok, "a refused message must fail, so portaria tries again");
    let (ok, stderr) = run(contrib("telegram.sh"), Vec::new()).await;
    assert!(!ok && stderr.contains("TELEGRAM_BOT_TOKEN"), "{stderr}");
}

#[tokio::test]
async fn sendmail_gets_one_mail_with_safe_headers() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let bin = w.join("bin");
    std::fs::create_dir(&bin).unwrap();
    write_executable(
        &bin.join("sendmail"),
        format!(
            "#!/bin/sh\necho \"$@\" > '{0}/args'\ncat > '{0}/mail'\n",
            w.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let env = vec![
        ("PATH".to_string(), path),
        ("MAIL_TO".to_string(), "ops@example.com".to_string()),
        ("MAIL_FROM".to_string(), "portaria@example.com".to_string()),
    ];
    let (ok, stderr) = run(contrib("sendmail.sh"), env).await;
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read_to_string(w.join("args")).unwrap(), "-t -i\n");
    let mail = std::fs::read_to_string(w.join("mail")).unwrap();
    let (head, body) = mail.split_once("\n\n").unwrap();
    assert_eq!(
        head,
        "To: ops@example.com\nFrom: portaria@example.com\n\
         Subject: portaria: dead on pagarme\nContent-Type: text/plain; charset=utf-8"
    );
    // The message's own line break stays out of the head.
    assert!(
        body.starts_with("2 events of endpoint pagarme went dead"),
        "{body}"
    );
    assert!(body.contains(ALERT), "the JSON as sent: {body}");
    let (ok, stderr) = run(contrib("sendmail.sh"), Vec::new()).await;
    assert!(!ok && stderr.contains("MAIL_TO"), "{stderr}");
}
