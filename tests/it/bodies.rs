//! Hostile bodies on loopback (issue 23, "Memory and connection slots cannot be exhausted"):
//! bodies in one-byte chunks against the real binary's memory, the budget of body bytes
//! buffered across requests, the minimum body rate, and clients trickling bodies into every
//! connection slot while webhooks must still be answered. A body cut by any of these is
//! answered (408 or 503) and never stored.
//! Promises: docs/guarantees/input.md, "Memory" and "Slow and many clients".

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// A Pagar.me request head for a chunked body, signed for `body` (or with a wrong signature).
fn chunked_head(body: &[u8], signed: bool) -> Vec<u8> {
    let signature = if signed {
        hmac_hex(PAGARME_SECRET, &[body])
    } else {
        "0".repeat(64)
    };
    format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-hub-signature: sha256={signature}\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .into_bytes()
}

/// `bytes` as one-byte chunks of HTTP/1.1 chunked encoding (no final chunk).
fn one_byte_chunks(bytes: &[u8]) -> Vec<u8> {
    let mut wire = Vec::with_capacity(bytes.len() * 6);
    for byte in bytes {
        wire.extend_from_slice(b"1\r\n");
        wire.push(*byte);
        wire.extend_from_slice(b"\r\n");
    }
    wire
}

const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A Pagar.me request with a Content-Length body, signed.
fn signed_request(body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-hub-signature: sha256={}\r\ncontent-length: {}\r\n\r\n",
        hmac_hex(PAGARME_SECRET, &[body]),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// The status code and head of the one answer on `stream` (read to the end of its head).
async fn answer_head(stream: &mut TcpStream, limit: Duration) -> Option<(u16, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + limit;
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&got).into_owned();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head))
}

/// A memory figure of `pid` from /proc/PID/status, in bytes: `VmRSS`, `VmHWM`.
fn memory_of(pid: u32, name: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"));
    kib * 1024
}

/// Every byte sent to or from `port` on loopback has been read: no TCP socket of that port
/// (the server's end) has bytes waiting to be read, and none to it (a client's end) has bytes
/// waiting to be sent (/proc/net/tcp: `tx_queue:rx_queue`, in hex).
fn all_read(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).all(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) =
            (fields.get(1), fields.get(2), fields.get(4))
        else {
            return true;
        };
        let Some((tx, rx)) = queues.split_once(':') else {
            return true;
        };
        let waiting = |hex: &str| u64::from_str_radix(hex, 16).unwrap_or(0) > 0;
        let unread = port_of(local) == Some(port) && waiting(rx);
        let unsent = port_of(remote) == Some(port) && waiting(tx);
        !unread && !unsent
    })
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_one_byte_chunks_cost_the_real_binary_their_bytes_not_a_frame_each() {
    // 256 Ki one-byte frames in all: a few seconds in a debug build. `Limited::collect` kept
    // about 37 bytes per frame (9 MiB here, 75 MiB with 8 bodies of 256 KiB).
    const CONNECTIONS: usize = 4;
    const MAX_BODY: usize = 64 * 1024;
    /// Allowed beyond the bodies themselves: each connection's read buffer (64 KiB at most)
    /// and task, allocator slack.
    const SLACK: u64 = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    // A budget of exactly the bodies sent: every one fits.
    let server = format!(
        "max_body_bytes = {MAX_BODY}\nbody_budget_bytes = {}\nmin_body_bytes_per_sec = 0\n\
         body_timeout_secs = 120",
        CONNECTIONS * MAX_BODY
    );
    let config = dir.path().join("portaria.toml");
    std::fs::write(
        &config,
        base_config(&db, "", "").replace("max_body_bytes = 4096", &server),
    )
    .unwrap();
    let process = Process::spawn(&config).await;
    let pid = process.child.id();
    // One request first, so that what start-up and a first request allocate is in the baseline.
    assert_eq!(
        post_pagarme(process.addr, &payment_body(1)).await.status,
        200
    );
    let rss_before = memory_of(pid, "VmRSS");

    // Every connection sends all of its body but the last byte, one byte a chunk.
    let body = vec![b'x'; MAX_BODY];
    let head = chunked_head(&body, false);
    let wire = one_byte_chunks(&body[..MAX_BODY - 1]);
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(process.addr).await.unwrap();
        stream.write_all(&head).await.unwrap();
        streams.push(stream);
    }
    let mut writers = Vec::new();
    for mut stream in streams {
        let wire = wire.clone();
        writers.push(tokio::spawn(async move {
            stream.write_all(&wire).await.unwrap();
            stream
        }));
    }
    let mut streams = Vec::new();
    for writer in writers {
        streams.push(writer.await.unwrap());
    }
    // The server has read it all: every body is buffered at once, none complete.
    let started = Instant::now();
    eventually(
        Duration::from_secs(60),
        "the server read every chunk",
        || all_read(process.addr.port()),
    )
    .await;
    let rss_buffered = memory_of(pid, "VmRSS");
    println!(
        "the server read the chunks {:?} after they were sent",
        started.elapsed()
    );

    for stream in &mut streams {
        stream.write_all(&one_byte_chunks(b"x")).await.unwrap();
        stream.write_all(LAST_CHUNK).await.unwrap();
    }
    for stream in &mut streams {
        let answer = answer_head(stream, Duration::from_secs(30)).await;
        assert_eq!(
            answer.map(|a| a.0),
            Some(401),
            "a wrong signature, read whole"
        );
    }
    let peak = memory_of(pid, "VmHWM");
    let bound = rss_before + (CONNECTIONS * MAX_BODY) as u64 + SLACK;
    println!(
        "{CONNECTIONS} bodies of {} KiB in one-byte chunks: RSS {} KiB before, {} KiB with all \
         buffered, peak {} KiB (bound {} KiB)",
        MAX_BODY >> 10,
        rss_before >> 10,
        rss_buffered >> 10,
        peak >> 10,
        bound >> 10
    );
    assert!(
        peak <= bound,
        "peak RSS {peak} passed {bound}: RSS before {rss_before} + {CONNECTIONS} x {MAX_BODY} + {SLACK}"
    );
    let events: i64 = open_db(&db)
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(events, 1, "only the first webhook is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_body_budget_a_request_gets_503_with_retry_after_and_nothing_is_stored() {
    // Room for three bodies of the largest size (4096 bytes in the test config).
    let server =
        TestServer::start("body_budget_bytes = 12288\nmin_body_bytes_per_sec = 0", "").await;
    // Three clients send all but the last byte of a 4096-byte body, and wait.
    let big = vec![b'y'; 4096];
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let request = signed_request(&big);
        stream
            .write_all(&request[..request.len() - 1])
            .await
            .unwrap();
        held.push((stream, request[request.len() - 1]));
    }
    // Once the server holds their bytes, a fourth body does not fit: 503 with Retry-After, not
    // stored, even signed and valid.
    // How long the test waits is patience, not a bound on portaria: a probe taken (200) before
    // the three bodies are read waits for its commit, which a disk busy with other tests'
    // writes can stretch to seconds. A full `.ci/run` here, 4 tests at a time, once ran out
    // of the 5 s this was (why was not seen: the panic now says how many probes were taken).
    let (mut refused, mut taken) = (None, 0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(20);
    while refused.is_none() && Instant::now() < deadline {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(&signed_request(&[b'z'; 100]))
            .await
            .unwrap();
        let (status, head) = answer_head(&mut stream, Duration::from_secs(5))
            .await
            .unwrap();
        match status {
            503 => refused = Some(head),
            // The server has not read all three bodies yet: it took this one.
            200 => {
                taken += 1;
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("{other}: {head}"),
        }
    }
    let head = refused.unwrap_or_else(|| {
        panic!(
            "no body refused past the budget in {:?}: {taken} probes taken",
            start.elapsed()
        )
    });
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 5"),
        "{head}"
    );
    let stored_before = server.count_rows();
    let reply = post_pagarme(server.addr, &payment_body(2)).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(reply.body.contains("retry later"), "{}", reply.body);
    assert_eq!(
        server.count_rows(),
        stored_before,
        "a refused body is not stored"
    );

    // The held bodies complete and are stored; their bytes go back to the budget, and the
    // refused webhook, sent again, is taken.
    for (stream, last) in &mut held {
        stream.write_all(&[*last]).await.unwrap();
        let answer = answer_head(stream, Duration::from_secs(5)).await;
        assert_eq!(answer.map(|a| a.0), Some(200));
    }
    assert_eq!(
        server.count_rows(),
        stored_before + 1,
        "the three: one event"
    );
    let reply = post_pagarme(server.addr, &payment_body(2)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.count_rows(), stored_before + 2);

    let admin = server.admin.unwrap();
    let metrics = send(admin, "GET", "/metrics", &[], b"").await.body;
    let refusals = metric(
        &metrics,
        "portaria_requests_total{endpoint=\"pagarme\",outcome=\"over_budget\"}",
    );
    assert!(refusals >= 2.0, "{refusals}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_minimum_rate_gets_408_long_before_the_body_deadline() {
    let server =
        TestServer::start("min_body_bytes_per_sec = 100\nbody_timeout_secs = 60", "").await;
    // A valid, signed webhook whose body comes a byte a second: after the 2 s grace it needs
    // 100 bytes a second.
    let request = signed_request(&payment_body(3));
    let head_end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    write.write_all(&request[..head_end]).await.unwrap();
    let started = Instant::now();
    let body = request[head_end..].to_vec();
    let trickle = tokio::spawn(async move {
        for byte in body {
            if write.write_all(&[byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut answer)).await;
    let elapsed = started.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{elapsed:?}: {answer}");
    assert!(
        elapsed < Duration::from_secs(10),
        "cut after {elapsed:?}, by the rate, not the 60 s deadline"
    );
    assert_eq!(server.count_rows(), 0);
    // At the rate or faster, a body is taken.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(3)).await.status,
        200
    );
}

/// Sends a signed webhook on a new connection; its status, within `limit` or panics.
async fn webhook_within(addr: SocketAddr, n: usize, limit: Duration) -> Duration {
    let sent = Instant::now();
    let reply = tokio::time::timeout(limit, post_pagarme(addr, &payment_body(n)))
        .await
        .unwrap_or_else(|_| panic!("webhook {n} not answered within {limit:?}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    sent.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_slot_held_by_trickling_bodies_a_webhook_is_answered_within_5_s() {
    const CAP: usize = 8;
    // No minimum rate and a long body deadline: only making room can free a slot.
    let server = TestServer::start(
        &format!(
            "max_connections = {CAP}\nmin_body_bytes_per_sec = 0\nbody_timeout_secs = 60\n\
             header_timeout_secs = 60"
        ),
        "",
    )
    .await;
    let addr = server.addr;
    // CAP clients, each sending a signed webhook's head at once and its body a byte a second,
    // reconnecting as soon as they are cut: an attacker keeping every slot busy. Were one
    // ever read whole, it would be stored.
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicUsize::new(0));
    let answered_503 = Arc::new(AtomicUsize::new(0));
    let mut tricklers = Vec::new();
    for t in 0..CAP {
        let (stop, connects, answered_503) = (stop.clone(), connects.clone(), answered_503.clone());
        tricklers.push(tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::Acquire) {
                round += 1;
                let request = signed_request(&payment_body(1000 + t * 1000 + round));
                let head_end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let Ok(stream) = TcpStream::connect(addr).await else {
                    break;
                };
                connects.fetch_add(1, Ordering::AcqRel);
                let (mut read, mut write) = stream.into_split();
                if write.write_all(&request[..head_end]).await.is_err() {
                    continue;
                }
                let mut answer = Vec::new();
                for byte in &request[head_end..] {
                    if stop.load(Ordering::Acquire) || write.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    // A second's pause, unless the server answers (and closes) meanwhile.
                    let mut buf = [0u8; 512];
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        read = read.read(&mut buf) => {
                            if let Ok(n) = read {
                                answer.extend_from_slice(&buf[..n]);
                            }
                            break;
                        }
                    }
                }
                if answer.starts_with(b"HTTP/1.1 503") {
                    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
                    assert!(text.contains("retry-after: 5"), "{text}");
                    assert!(text.contains("connection: close"), "{text}");
                    answered_503.fetch_add(1, Ordering::AcqRel);
                }
            }
        }));
    }
    // Every slot is taken by a body that has been arriving for over a second.
    eventually(Duration::from_secs(5), "every slot taken", || {
        connects.load(Ordering::Acquire) >= CAP
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut slowest = Duration::ZERO;
    for n in 0..5 {
        slowest = slowest.max(webhook_within(addr, n, Duration::from_secs(5)).await);
    }
    eventually(Duration::from_secs(5), "cut bodies answered 503", || {
        answered_503.load(Ordering::Acquire) >= 5
    })
    .await;
    stop.store(true, Ordering::Release);
    for trickler in tricklers {
        trickler.abort();
    }
    // Only the five webhooks: no trickled body was stored, cut or not.
    assert_eq!(server.count_rows(), 5);
    println!(
        "{CAP} clients trickling bodies at a cap of {CAP}: 5 webhooks answered, slowest \
         {slowest:?}; {} bodies cut with 503",
        answered_503.load(Ordering::Acquire)
    );
}
