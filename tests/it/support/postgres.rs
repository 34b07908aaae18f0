//! What the PostgreSQL tests share, on a database of `pg_cluster`: a config on it, a server
//! serving it, counts read from it, and rows seeded into it as instances would have left them.

use std::path::{Path, PathBuf};

use super::*;

const DAY_MS: i64 = 86_400_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A config on PostgreSQL `url`, with the pagarme endpoint (body dedup) and `pagarme_extra`.
pub fn config(url_line: &str, pagarme_extra: &str) -> String {
    storage_config(url_line)
        .server("max_body_bytes = 4096")
        .pagarme(pagarme_extra)
        .text()
}

/// [`config`] on the database at `url`.
pub fn config_at(url: &str, pagarme_extra: &str) -> String {
    config(&format!("url = \"{url}\""), pagarme_extra)
}

pub async fn server(url: &str, pagarme_extra: &str) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("unused.db");
    let text = config_at(url, pagarme_extra);
    TestServer::start_with(dir, unused, &text).await
}

pub async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Waits (up to 20 s) until `sql`'s count is `want`.
pub async fn until_count(client: &tokio_postgres::Client, sql: &str, want: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let n = count(client, sql).await;
        if n == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{sql}: {n}, not {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A config file on database `url` in `dir`, with `storage_extra` under `[storage]`.
pub fn write_config(dir: &Path, url: &str, storage_extra: &str, pagarme_extra: &str) -> PathBuf {
    let path = dir.join("portaria.toml");
    let url_line = format!("url = \"{url}\"\n{storage_extra}");
    std::fs::write(&path, config(&url_line, pagarme_extra)).unwrap();
    path
}

/// `n` events of `endpoint` in `status`, received `age_days` ago, keyed `{prefix}{i}`, each
/// with its payload, its dedup row and (unless stored) a delivery to route `default` in the
/// same state (a dead one with a failed attempt too, a delivering one claimed by an instance
/// that is gone, with a long lease). Returns `n`.
pub async fn seed(
    client: &tokio_postgres::Client,
    endpoint: &str,
    prefix: &str,
    status: &str,
    age_days: i64,
    n: i64,
) -> i64 {
    let now = now_ms();
    let received = now - age_days * DAY_MS;
    let (next, finished, delivered_ms, claimed, lease) = match status {
        "pending" => (
            format!("{}", now + DAY_MS),
            "NULL",
            "NULL",
            "NULL",
            "NULL".into(),
        ),
        "delivering" => (
            "NULL".into(),
            "NULL",
            "NULL",
            "'gone:1:1'",
            format!("{}", now + DAY_MS),
        ),
        "delivered" => (
            "NULL".into(),
            "received_at + 2000",
            "15",
            "NULL",
            "NULL".into(),
        ),
        _ => (
            "NULL".into(),
            "received_at + 5000",
            "NULL",
            "NULL",
            "NULL".into(),
        ),
    };
    let sql = format!(
        "WITH e AS (INSERT INTO events (endpoint, dedup_key, event_type, content_type, \
           payload_bytes, received_at, status) \
           SELECT '{endpoint}', '{prefix}' || g, 'charge.paid', 'application/json', 40, \
           {received}, '{status}' FROM generate_series(1, {n}) AS g \
           RETURNING id, endpoint, dedup_key, received_at), \
         p AS (INSERT INTO payloads (event_id, headers, body) \
           SELECT id, convert_to('x-test: ' || dedup_key || E'\\r\\n', 'UTF8'), \
           convert_to('{{\"key\":\"' || dedup_key || '\"}}', 'UTF8') FROM e), \
         k AS (INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
           SELECT endpoint, dedup_key, id, received_at FROM e), \
         d AS (INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
           next_attempt_at, finished_at, delivered_ms, claimed_by, lease_until) \
           SELECT id, 'default', endpoint, '{status}', 1, {next}, {finished}, {delivered_ms}, \
           {claimed}, {lease} FROM e WHERE '{status}' <> 'stored'), \
         a AS (INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, \
           outcome, error) SELECT id, 'default', 1, received_at + 1000, 12, 'failed', \
           'exit status 7' FROM e WHERE '{status}' = 'dead') \
         SELECT count(*) FROM e"
    );
    client.query_one(&sql, &[]).await.unwrap().get(0)
}
