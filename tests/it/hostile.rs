//! Hostile HTTP input on loopback, against the real `serve`: slow and many clients (the header
//! deadline, the connection cap making room by closing idle connections), oversized and
//! numerous headers, invalid UTF-8, HTTP/1.0, pipelining, `Expect: 100-continue`, and the
//! routing rule (an exact match on the raw path; the query string only goes to the verifier).
//! Promises: docs/guarantees/input.md.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// One answer read off a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Reads one HTTP/1.1 answer (head, then a Content-Length body) from `stream`, keeping what
/// was read past it in `pending` for the next call. None when the connection closed first.
async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Answer> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while pending.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                pending.extend_from_slice(&chunk[..n]);
            }
            let body = pending[end + 4..end + 4 + length].to_vec();
            pending.drain(..end + 4 + length);
            return Some(Answer { status, head, body });
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes `bytes` on a new connection and reads one answer (within 5 s).
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Option<Answer> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        read_answer(&mut stream, &mut Vec::new()),
    )
    .await
    .expect("answered within 5 s")
}

/// A signed Pagar.me request as raw bytes: `target` is the request target as sent.
fn pagarme_request(target: &str, body: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut request = format!(
        "POST {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-hub-signature: sha256={}\r\ncontent-length: {}\r\n{extra_headers}\r\n",
        hmac_hex(PAGARME_SECRET, &[body]),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// The connection is closed by the server: a read ends (EOF or reset) within `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_head_one_byte_a_second_is_cut_at_the_header_deadline() {
    let server = TestServer::start("header_timeout_secs = 2", "").await;
    let body = payment_body(1);
    let request = pagarme_request("/webhooks/pagarme", &body, "");
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    // Bytes keep coming, so only a deadline on the whole head (not an idle timer) cuts it.
    let trickle = tokio::spawn(async move {
        let mut sent = 0;
        for byte in request.iter().take(30) {
            if write.write_all(&[*byte]).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        sent
    });
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(8), read.read_to_end(&mut buf)).await;
    let elapsed = started.elapsed();
    assert!(closed.is_ok(), "the server never cut the trickling client");
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_millis(4500),
        "cut after {elapsed:?}, the deadline is 2 s"
    );
    let sent = trickle.await.unwrap();
    assert!(sent < 6, "{sent} bytes went out before the cut");
    assert!(
        !String::from_utf8_lossy(&buf).contains("200"),
        "no answer to a head that never ended"
    );
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_idle_connections_are_closed_longest_idle_first_to_answer_new_webhooks() {
    const CAP: usize = 50;
    // A long header deadline: only making room can free a slot within the test's bounds.
    let server = TestServer::start(
        &format!("max_connections = {CAP}\nheader_timeout_secs = 60"),
        "",
    )
    .await;
    // One client in the middle of its second request on a kept-alive connection (the oldest
    // connection, and hyper would close it as idle): it must be left alone however full the
    // cap is.
    let body = payment_body(1000);
    let request = pagarme_request("/webhooks/pagarme", &body, "");
    let (half, rest) = request.split_at(40);
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    busy.write_all(b"GET /webhooks/pagarme HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut busy, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.status, 405);
    busy.write_all(half).await.unwrap();
    // Kept-alive connections that were answered once, then connections that send nothing.
    let mut idle = Vec::new();
    for _ in 0..(CAP - 1) / 2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET /webhooks/pagarme HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
        assert_eq!(answer.status, 405);
        idle.push(stream);
    }
    while idle.len() < CAP - 1 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // Let the server register the silent ones: the cap is now full.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    for n in 0..10 {
        let sent = Instant::now();
        let reply = tokio::time::timeout(
            Duration::from_secs(3),
            post_pagarme(server.addr, &payment_body(n)),
        )
        .await
        .expect("a new webhook is answered at the cap, not queued behind idle connections");
        assert_eq!(reply.status, 200);
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "{:?}",
            sent.elapsed()
        );
    }
    println!(
        "10 webhooks at a full cap of {CAP}: answered in {:?}",
        started.elapsed()
    );
    // The longest idle went first; the newest idle one is still open.
    assert!(
        closed_within(&mut idle[0], Duration::from_secs(1)).await,
        "the longest-idle connection was closed"
    );
    let last = idle.last_mut().unwrap();
    assert!(
        !closed_within(last, Duration::from_millis(200)).await,
        "the newest idle connection was kept"
    );
    // The client mid-request was never cut: it finishes and gets its answer.
    busy.write_all(rest).await.unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        read_answer(&mut busy, &mut Vec::new()),
    )
    .await
    .unwrap()
    .expect("the connection mid-request was not closed");
    assert_eq!(answer.status, 200);
    assert_eq!(server.count_rows(), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_hypers_limits_get_431_and_the_server_goes_on() {
    let server = TestServer::start("", "").await;
    let body = payment_body(1);
    // One header of 512 KiB: past hyper's read buffer (about 400 KiB).
    let huge = format!("x-padding: {}\r\n", "a".repeat(512 * 1024));
    let answer = exchange(
        server.addr,
        &pagarme_request("/webhooks/pagarme", &body, &huge),
    )
    .await;
    assert_eq!(answer.map(|a| a.status), Some(431));
    // 200 small headers: past hyper's count (100).
    let many: String = (0..200).map(|n| format!("x-h{n}: v\r\n")).collect();
    let answer = exchange(
        server.addr,
        &pagarme_request("/webhooks/pagarme", &body, &many),
    )
    .await;
    assert_eq!(answer.map(|a| a.status), Some(431));
    assert_eq!(server.count_rows(), 0);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_signature_headers_is_401_and_in_a_signed_body_is_stored() {
    let server = TestServer::start("", "").await;
    let body = payment_body(2);
    // A signature header of bytes that are not UTF-8, for each kind of parser.
    for (path, header) in [
        ("/webhooks/pagarme", "x-hub-signature: sha256=\u{0}"),
        ("/webhooks/github", "x-hub-signature-256: sha256=\u{0}"),
        ("/webhooks/stripe", "stripe-signature: t=1,v1=\u{0}"),
        ("/webhooks/relya", "x-relya-signature: v1=\u{0}"),
    ] {
        let (name, value) = header.split_once(": ").unwrap();
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nx-relya-delivery-id: d1\r\nx-relya-timestamp: {}\r\n\
             content-length: {}\r\n{name}: ",
            now_secs(),
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(value.trim_end_matches('\u{0}').as_bytes());
        request.extend_from_slice(b"\xff\xfe\xc3\x28\x80");
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(&body);
        let answer = exchange(server.addr, &request).await;
        assert_eq!(answer.map(|a| a.status), Some(401), "{path}");
    }
    assert_eq!(server.count_rows(), 0);

    // A body that is not UTF-8, signed: Pagar.me dedups on the body bytes, so it is stored
    // byte for byte.
    let bytes = b"\xff\xfe{\"id\":\"\xc3\x28\"}\x80".to_vec();
    let reply = post_pagarme(server.addr, &bytes).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let stored: Vec<u8> = server.one("SELECT body FROM payloads");
    assert_eq!(stored, bytes);
    // The same bytes under a key that needs JSON: 400 with a reason, no panic.
    let github = github_headers(None, &bytes);
    let reply = post(server.addr, "/webhooks/github", &github, &bytes).await;
    assert!(
        reply.status == 400 || reply.status == 200,
        "{} {}",
        reply.status,
        reply.body
    );
    assert_eq!(
        post_pagarme(server.addr, &payment_body(3)).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_is_answered_and_closed_unless_keep_alive_is_asked() {
    let server = TestServer::start("", "").await;
    let body = payment_body(4);
    let request = String::from_utf8(pagarme_request("/webhooks/pagarme", &body, ""))
        .unwrap()
        .replacen("HTTP/1.1", "HTTP/1.0", 1);
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.head);
    assert!(
        closed_within(&mut stream, Duration::from_secs(2)).await,
        "HTTP/1.0 without keep-alive is closed after the answer"
    );

    // Asked for, keep-alive holds: a second request on the same connection is answered.
    let keep = request.replacen("host: x\r\n", "host: x\r\nconnection: keep-alive\r\n", 1);
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..2 {
        stream.write_all(keep.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, &mut pending).await.unwrap();
        assert_eq!(answer.status, 200);
        assert!(
            answer
                .head
                .to_ascii_lowercase()
                .contains("connection: keep-alive"),
            "{}",
            answer.head
        );
    }
    assert_eq!(server.count_rows(), 1, "the same body: one event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pipelined_requests_get_two_answers_in_order() {
    let server = TestServer::start("", "").await;
    let mut both = pagarme_request("/webhooks/pagarme", &payment_body(5), "");
    both.extend_from_slice(b"GET /webhooks/pagarme HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(&both).await.unwrap();
    let mut pending = Vec::new();
    let first = read_answer(&mut stream, &mut pending).await.unwrap();
    let second = read_answer(&mut stream, &mut pending).await.unwrap();
    assert_eq!((first.status, second.status), (200, 405));
    assert_eq!(first.body, br#"{"received":true}"#);
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_with_an_oversized_length_gets_413_without_reading_the_body() {
    let server = TestServer::start("", "").await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(
            b"POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n\
              x-hub-signature: sha256=00\r\ncontent-length: 104857600\r\n\r\n",
        )
        .await
        .unwrap();
    // Not one byte of the 100 MiB is sent: the answer comes by the declared length alone.
    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        read_answer(&mut stream, &mut Vec::new()),
    )
    .await
    .expect("answered without the body")
    .unwrap();
    assert_eq!(answer.status, 413, "{}", answer.head);

    // Within the limit, the client is told to go on (hyper sends 100 once the body is read).
    let body = payment_body(6);
    let request = pagarme_request("/webhooks/pagarme", &body, "expect: 100-continue\r\n");
    let end = find(&request, b"\r\n\r\n").unwrap() + 4;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(&request[..end]).await.unwrap();
    let mut pending = Vec::new();
    let go_on = read_answer(&mut stream, &mut pending).await.unwrap();
    assert_eq!(go_on.status, 100);
    stream.write_all(&request[end..]).await.unwrap();
    let answer = read_answer(&mut stream, &mut pending).await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_is_an_exact_match_on_the_raw_path_and_ignores_the_query() {
    let server = TestServer::start("", "").await;
    let body = payment_body(7);
    // None of these is the endpoint's path as sent: none reaches an endpoint.
    for target in [
        "/webhooks/../webhooks/pagarme",
        "/webhooks/./pagarme",
        "/webhooks/x/../pagarme",
        "/webhooks%2Fpagarme",
        "/webhooks%2fpagarme",
        "/webhooks/%70agarme",
        "/webhooks/pagarme/",
        "/webhooks//pagarme",
        "//webhooks/pagarme",
        "/WEBHOOKS/pagarme",
        "/webhooks/pagarme%00",
        "/webhooks/pagarme/..",
        "/webhooks/github/../pagarme",
    ] {
        let answer = exchange(server.addr, &pagarme_request(target, &body, "")).await;
        assert_eq!(answer.map(|a| a.status), Some(404), "{target}");
    }
    assert_eq!(server.count_rows(), 0);
    // An absolute-form target routes by its path, like the origin form.
    let answer = exchange(
        server.addr,
        &pagarme_request("http://x/webhooks/pagarme", &body, ""),
    )
    .await;
    assert_eq!(answer.map(|a| a.status), Some(200));
    // A query string does not change the route (it is handed to the verifier).
    let answer = exchange(
        server.addr,
        &pagarme_request(
            "/webhooks/pagarme?source=retry&a=%2F..",
            &payment_body(8),
            "",
        ),
    )
    .await;
    assert_eq!(answer.map(|a| a.status), Some(200));
    assert_eq!(server.count_rows(), 2);
}
