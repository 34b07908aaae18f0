//! Crowds at the connection cap, against the real `serve` on loopback: thousands of idle
//! connections at a cap of 1024, and clients that trickle their request heads filling the cap,
//! while valid webhooks must still be answered within a second or two.
//! Promises: docs/guarantees/input.md, "Slow and many clients".

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// Raises this process's soft limit on open files to at least `wanted` (within the hard
/// limit); the test process holds both ends of every loopback connection.
fn raise_open_files(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    limit.rlim_cur
}

/// The server closed this connection: a non-blocking read sees the end (or a reset).
fn is_closed(mut stream: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Sends signed webhooks one after the other, each on a new connection, and returns the
/// slowest answer's time; every one must be a 200 within `limit`.
async fn webhooks_answered_within(addr: SocketAddr, count: usize, limit: Duration) -> Duration {
    let mut slowest = Duration::ZERO;
    for n in 0..count {
        let sent = Instant::now();
        let reply = tokio::time::timeout(
            limit + Duration::from_secs(3),
            post_pagarme(addr, &payment_body(n)),
        )
        .await
        .unwrap_or_else(|_| panic!("webhook {n} not answered within {limit:?} and 3 s more"));
        assert_eq!(reply.status, 200);
        let took = sent.elapsed();
        assert!(
            took < limit,
            "webhook {n} took {took:?}, the bound is {limit:?}"
        );
        slowest = slowest.max(took);
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_at_a_cap_of_1024_never_hold_webhooks_off() {
    const CAP: usize = 1024;
    const IDLE: usize = 2500;
    // Both ends of each connection live in this process, beside the other tests' files.
    let limit = raise_open_files(16_384);
    assert!(
        limit >= 2 * IDLE as u64 + 1024,
        "RLIMIT_NOFILE's hard limit ({limit}) is too low for {IDLE} connections"
    );
    // A long header deadline: only making room can free a slot within the test's bounds.
    let server = TestServer::start(
        &format!("max_connections = {CAP}\nheader_timeout_secs = 60"),
        "",
    )
    .await;
    let addr = server.addr;
    let started = Instant::now();
    // The older 2000, then, once those are past the idle grace, the newest 500.
    let mut idle = open_idle(addr, IDLE - 500).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    idle.extend(open_idle(addr, 500).await);
    let opened = started.elapsed();
    // The server works through the kernel's queue: each connection past the cap closes the
    // longest-idle one. Wait until it has (all but CAP closed).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut closed = 0;
    while Instant::now() < deadline {
        closed = idle.iter().filter(|s| is_closed(s)).count();
        if closed >= IDLE - CAP {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(closed, IDLE - CAP, "idle connections closed to make room");
    let settled = started.elapsed();
    // A burst deeper than the accept queue loses SYNs, each connect then waiting a second for
    // its retry (std's queue of 128 took 10-18 s here).
    assert!(
        settled < Duration::from_secs(5),
        "{IDLE} connections took {settled:?} to be accepted"
    );

    let slowest = webhooks_answered_within(addr, 20, Duration::from_secs(2)).await;
    // Twenty at once too.
    let burst = Instant::now();
    let replies = futures_join_all(
        (100..120)
            .map(|n| async move { post_pagarme(addr, &payment_body(n)).await.status })
            .collect(),
    )
    .await;
    assert!(replies.iter().all(|s| *s == 200), "{replies:?}");
    let burst = burst.elapsed();
    assert!(burst < Duration::from_secs(2), "20 at once took {burst:?}");
    assert_eq!(server.count_rows(), 40);

    // Longest idle first: the newest 500 are all still open.
    let newest_open = idle[IDLE - 500..].iter().filter(|s| !is_closed(s)).count();
    assert_eq!(newest_open, 500, "the newest 500 idle connections are kept");
    println!(
        "{IDLE} idle connections at a cap of {CAP}: opened in {opened:?}, {} closed to make \
         room within {settled:?}; 20 webhooks one by one, slowest {slowest:?}; 20 at once in \
         {burst:?}",
        IDLE - CAP
    );
}

/// Opens `count` connections that send nothing, ten at a time (a loopback connect now and then
/// waits a second for its SYN to be sent again: in parallel, those waits overlap).
async fn open_idle(addr: SocketAddr, count: usize) -> Vec<std::net::TcpStream> {
    let threads: Vec<_> = (0..10)
        .map(|t| {
            tokio::task::spawn_blocking(move || {
                (t..count)
                    .step_by(10)
                    .map(|_| {
                        let stream = std::net::TcpStream::connect(addr).unwrap();
                        stream.set_nonblocking(true).unwrap();
                        stream
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = Vec::with_capacity(count);
    for thread in threads {
        all.extend(thread.await.unwrap());
    }
    all
}

/// A tiny join_all on tokio alone: spawns each and waits for all, in order.
async fn futures_join_all<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_trickling_their_heads_cannot_starve_webhooks_at_the_cap() {
    const CAP: usize = 8;
    // A long header deadline: it alone would hold each trickler's slot for 60 s.
    let server = TestServer::start(
        &format!("max_connections = {CAP}\nheader_timeout_secs = 60"),
        "",
    )
    .await;
    let addr = server.addr;
    // CAP clients, each sending a request head a byte a second and reconnecting at once when
    // cut: an attacker keeping every slot busy.
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicUsize::new(0));
    let head = format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-hub-signature: sha256={}\r\ncontent-length: 2\r\n\r\n{{}}",
        "0".repeat(64)
    )
    .into_bytes();
    let mut tricklers = Vec::new();
    for _ in 0..CAP {
        let (stop, connects, head) = (stop.clone(), connects.clone(), head.clone());
        tricklers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let Ok(stream) = TcpStream::connect(addr).await else {
                    break;
                };
                connects.fetch_add(1, Ordering::AcqRel);
                let (mut read, mut write) = stream.into_split();
                let mut buf = [0u8; 64];
                for byte in &head {
                    if stop.load(Ordering::Acquire) || write.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    // A second's pause, unless the server cuts the connection meanwhile.
                    let pause = tokio::time::sleep(Duration::from_secs(1));
                    tokio::select! {
                        _ = pause => {}
                        _ = read.read(&mut buf) => break,
                    }
                }
            }
        }));
    }
    // Every slot is now taken by a head that has been arriving for over a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(connects.load(Ordering::Acquire), CAP);

    let slowest = webhooks_answered_within(addr, 5, Duration::from_millis(2500)).await;
    eventually(Duration::from_secs(3), "cut tricklers reconnect", || {
        connects.load(Ordering::Acquire) >= CAP + 5
    })
    .await;
    let reconnects = connects.load(Ordering::Acquire) - CAP;
    stop.store(true, Ordering::Release);
    for trickler in tricklers {
        trickler.abort();
    }
    assert_eq!(server.count_rows(), 5);
    println!(
        "{CAP} trickling clients at a cap of {CAP}: 5 webhooks answered, slowest {slowest:?}; \
         {reconnects} trickling connections cut"
    );
}
