//! A panic in a background task ends the real binary with a non-zero status (70) and an error
//! log line naming the task, so that systemd restarts it, rather than leaving the queue
//! silently stopped or intake answering 503 forever. The panics are injected with the
//! test-only `PORTARIA_TEST_FAULT` (debug builds only: `src/fault.rs`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

/// Runs `serve` with the fault `fault`, sends one forwarded webhook once it listens (what
/// the worker and the writer need to reach their fault), and returns the exit status and log.
async fn run_with_fault(fault: &str) -> (std::process::ExitStatus, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let config = dir.path().join("portaria.toml");
    std::fs::write(
        &config,
        base_config(&db, "", "forward = { command = [\"/bin/true\"] }"),
    )
    .unwrap();
    let log_path = dir.path().join("stderr.log");
    let started = Instant::now();
    let mut child = portaria()
        .env("PORTARIA_TEST_FAULT", fault)
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut sent = false;
    let mut held = Vec::new();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{fault}: still running after 15 s:\n{}",
                std::fs::read_to_string(&log_path).unwrap()
            );
        }
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let addr: Option<std::net::SocketAddr> =
            log.lines().find(|l| l.contains("listening")).and_then(|l| {
                l.split("addr=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            });
        if let (false, Some(addr)) = (sent, addr) {
            sent = true;
            // The answer does not matter (the process may die under it): only that it came.
            let body = payment_body(1);
            let mut request = format!(
                "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 x-hub-signature: {}\r\ncontent-length: {}\r\n\r\n",
                pagarme_headers(&body)[1].1,
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body);
            let stream: Option<tokio::net::TcpStream> =
                tokio::net::TcpStream::connect(addr).await.ok();
            if let Some(mut stream) = stream {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, &request).await;
                // Kept open until the end of the test: the server may die under it.
                held.push(stream);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed();
    (status, std::fs::read_to_string(&log_path).unwrap(), elapsed)
}

async fn exits_naming(fault: &str, task: &str) {
    let (status, log, elapsed) = run_with_fault(fault).await;
    eprintln!("{fault}: exited {status:?} after {elapsed:?}");
    assert_eq!(status.code(), Some(70), "{fault}: {status:?}\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("a task panicked"))
        .unwrap_or_else(|| panic!("{fault}: no error line:\n{log}"));
    assert!(
        line.contains(&format!("task=\"{task}\"")),
        "{fault}: {line}"
    );
    assert!(
        log.contains(&format!("injected fault {fault}")),
        "the panic message: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_forward_worker_ends_the_process() {
    exits_naming("panic-worker", "forward worker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_pruner_ends_the_process() {
    exits_naming("panic-pruner", "pruner").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_checkpoint_thread_ends_the_process() {
    exits_naming("panic-checkpoint", "checkpoint thread").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_writer_thread_ends_the_process() {
    exits_naming("panic-writer", "writer thread").await;
}
