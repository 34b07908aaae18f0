//! What the tests of `portaria reconcile` share: a fake gateway API's answers and how it
//! reads a query, and the real binary's run and its `--json` report.

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;

use super::portaria;
use super::server::TestServer;

/// A JSON answer of a fake API, with `Retry-After` when given.
pub fn answer(
    status: u16,
    body: Value,
    retry_after: Option<&str>,
) -> ::http::Response<Full<Bytes>> {
    let mut reply = ::http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(wait) = retry_after {
        reply = reply.header("retry-after", wait);
    }
    reply
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// The value of `name` in a request target's query.
pub fn query<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let (_, query) = target.split_once('?')?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
}

/// `portaria reconcile ARGS`, the real binary, off the runtime's threads.
pub async fn reconcile(server: &TestServer, args: &[&str]) -> std::process::Output {
    let config = server.config_path();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut all = vec!["reconcile".to_string()];
        all.extend(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        portaria()
            .args(&all)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The one JSON object of a `--json` run, and its exit code.
pub fn report(out: &std::process::Output) -> (Value, Option<i32>) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().next().unwrap_or_else(|| {
        panic!(
            "no output; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (value, out.status.code())
}
