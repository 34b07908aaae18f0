//! TLS to PostgreSQL (docs/postgres.md, "TLS"), against a real PostgreSQL started with
//! `ssl = on` and a certificate made here (rcgen) for `db.portaria.test`, reached on
//! 127.0.0.1 through `hostaddr`: `verify-full` against the right CA takes webhooks with
//! every connection of the instance on TLS (the pool's and the listening one); another CA or
//! another host name is refused at start, saying why and never the password; `verify-ca`
//! does not check the name; `require` without a CA encrypts and SCRAM's channel binding
//! holds; `require` against a server without TLS is refused; `disable` is plain, still.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::support::pg_cluster::{self, Cluster};
use crate::support::postgres::{config, count};
use crate::support::*;

const HOST: &str = "db.portaria.test";
/// A role that logs in with SCRAM over TLS only (`hostssl` first in `pg_hba.conf`).
const SCRAM_USER: &str = "binder";
const PASSWORD: &str = "Tls-Secret-Pw-7";

/// The server's CA and its certificate for [`HOST`], and a CA that signed nothing.
struct Pki {
    ca_pem: String,
    other_ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki() -> Pki {
    let issuer = ca("portaria test database CA");
    let mut params = CertificateParams::new(vec![HOST.to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, HOST);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem: issuer.pem(),
        other_ca_pem: ca("another CA").pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// A TLS cluster serving `pki`'s certificate, with [`SCRAM_USER`] on SCRAM over TLS.
async fn tls_cluster(pki: &Pki) -> Option<Cluster> {
    let hba = format!("hostssl all {SCRAM_USER} 127.0.0.1/32 scram-sha-256");
    let pg = Cluster::start_tls(&pki.cert_pem, &pki.key_pem, &[&hba])?;
    pg.connect("postgres")
        .await
        .batch_execute(&format!(
            "CREATE ROLE {SCRAM_USER} LOGIN SUPERUSER PASSWORD '{PASSWORD}'"
        ))
        .await
        .unwrap();
    Some(pg)
}

/// A URL for `db` on `pg` through 127.0.0.1, naming `host` (for the certificate's check).
fn url(pg: &Cluster, db: &str, host: &str, query: &str) -> String {
    format!(
        "postgres://portaria@{host}:{}/{db}?hostaddr=127.0.0.1&{query}",
        pg.port
    )
}

/// Writes both CAs and the config `name` on `url_line` into `dir`; returns the config's path.
fn write_config(dir: &Path, name: &str, pki: &Pki, url_line: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("ca.pem"), &pki.ca_pem).unwrap();
    std::fs::write(dir.join("other-ca.pem"), &pki.other_ca_pem).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, config(url_line, "")).unwrap();
    path
}

/// `portaria serve` on the config, the URL with a password in its environment, expected to
/// fail at start: its output, within 20 s.
fn serve_refused(path: &Path, url_with_password: &str) -> Output {
    let mut child = portaria()
        .args(["serve", "--config"])
        .arg(path)
        .env("PORTARIA_TEST_PG_URL", url_with_password)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("serve started: {:?}", child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    out
}

/// `portaria events list` (which connects like a server) on the URL in the environment.
fn events_list(path: &Path, url: &str) -> Output {
    portaria()
        .args(["events", "list", "--config"])
        .arg(path)
        .env("PORTARIA_TEST_PG_URL", url)
        .output()
        .unwrap()
}

/// The instance's sessions on `db` (application_name `portaria`): (on TLS, not on TLS,
/// the listening one on TLS).
async fn sessions(client: &tokio_postgres::Client, db: &str) -> (i64, i64, i64) {
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl), \
                    count(*) FILTER (WHERE s.ssl AND a.query LIKE 'LISTEN%') \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = 'portaria' AND a.datname = $1",
            &[&db],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_against_the_right_ca_takes_webhooks_over_tls_on_every_connection() {
    let pki = pki();
    let Some(pg) = tls_cluster(&pki).await else {
        return;
    };
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let line = format!(
        "url = \"{}\"\nca_file = \"ca.pem\"",
        url(&pg, &db, HOST, "sslmode=verify-full")
    );
    let text = config(&line, "");
    write_config(dir.path(), "portaria.toml", &pki, &line);
    let unused = dir.path().join("unused.db");
    let s = TestServer::start_with(dir, unused, &text).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    let client = pg.connect(&db).await;
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 1);
    // The pool's connections and the listening one, all on TLS.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (tls, plain, listening) = sessions(&client, &db).await;
        assert_eq!(plain, 0, "a session of the instance without TLS");
        if tls >= 2 && listening == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sessions on TLS: {tls}, listening: {listening}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_ca_or_another_host_name_is_refused_at_start_saying_why() {
    let pki = pki();
    let Some(pg) = tls_cluster(&pki).await else {
        return;
    };
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let with_password = |host: &str, query: &str| {
        url(&pg, &db, host, query).replace("portaria@", &format!("portaria:{PASSWORD}@"))
    };
    let other = write_config(
        dir.path(),
        "other-ca.toml",
        &pki,
        "url_env = \"PORTARIA_TEST_PG_URL\"\nca_file = \"other-ca.pem\"",
    );
    let out = serve_refused(&other, &with_password(HOST, "sslmode=verify-full"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error performing TLS handshake: invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    let right = write_config(
        dir.path(),
        "right-ca.toml",
        &pki,
        "url_env = \"PORTARIA_TEST_PG_URL\"\nca_file = \"ca.pem\"",
    );
    let out = serve_refused(
        &right,
        &with_password("wrong.portaria.test", "sslmode=verify-full"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("certificate not valid for name \"wrong.portaria.test\""),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // verify-ca checks the chain, not the name; verify-full with the right name connects.
    for (host, mode) in [("wrong.portaria.test", "verify-ca"), (HOST, "verify-full")] {
        let out = events_list(&right, &with_password(host, &format!("sslmode={mode}")));
        ok_stdout(&out);
    }
    let out = events_list(
        &other,
        &with_password("wrong.portaria.test", "sslmode=verify-ca"),
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_a_ca_and_scram_channel_binding_holds() {
    let pki = pki();
    let Some(pg) = tls_cluster(&pki).await else {
        return;
    };
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "portaria.toml",
        &pki,
        "url_env = \"PORTARIA_TEST_PG_URL\"",
    );
    // A SCRAM login that PostgreSQL accepts only with the binding to this TLS session's
    // certificate (`-PLUS`), which the client sends only if it has one.
    let bound = format!(
        "postgres://{SCRAM_USER}:{PASSWORD}@127.0.0.1:{}/{db}?sslmode=require&channel_binding=require",
        pg.port
    );
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&path)
        .env("PORTARIA_TEST_PG_URL", &bound);
    let mut p = Process::spawn_command(serve).await;
    assert_eq!(post_pagarme(p.addr, &payment_body(2)).await.status, 200);
    p.signal(libc::SIGTERM);
    assert!(p.wait(Duration::from_secs(20)).await.success());
    let log = p.log.lock().unwrap().clone();
    assert!(!log.contains(PASSWORD), "{log}");
    let client = pg.connect(&db).await;
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_is_refused_and_disable_is_plain() {
    let Some(plain) = pg_cluster::shared() else {
        return;
    };
    let db = plain.database().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let path = write_config(
        dir.path(),
        "portaria.toml",
        &pki,
        "url_env = \"PORTARIA_TEST_PG_URL\"",
    );
    let on = |query: &str| format!("postgres://portaria@127.0.0.1:{}/{db}?{query}", plain.port);
    for mode in ["require", "verify-full&sslrootcert=ca.pem"] {
        let out = serve_refused(&path, &on(&format!("sslmode={mode}")));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("error performing TLS handshake: server does not support TLS"),
            "{mode}: {stderr}"
        );
    }
    // prefer falls back to plain on a server without TLS; disable never asks.
    for mode in ["prefer", "disable"] {
        ok_stdout(&events_list(&path, &on(&format!("sslmode={mode}"))));
    }

    // On a server with TLS, disable is plain all the same, and takes webhooks.
    let Some(pg) = tls_cluster(&pki).await else {
        return;
    };
    let db = pg.database().await;
    let line = format!("url = \"{}\"", url(&pg, &db, HOST, "sslmode=disable"));
    let text = config(&line, "");
    let unused = dir.path().join("unused.db");
    let s = TestServer::start_with(dir, unused, &text).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(3)).await.status, 200);
    let client = pg.connect(&db).await;
    let (tls, plain_sessions, _) = sessions(&client, &db).await;
    assert_eq!(tls, 0);
    assert!(plain_sessions >= 1);
    s.stop().await;
}
