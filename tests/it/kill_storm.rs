//! Kill storm: signed webhooks (about 20 % exact re-sends, some racing their original, and some
//! forgeries) go to the real binary while it is SIGKILLed at random moments and restarted, on
//! one real SQLite file, forwarding to a real HTTP listener. Afterwards every acknowledged
//! request is stored exactly once and forwarded at least once, a second forward is explained
//! by an `interrupted` attempt, nothing refused is stored, and the file passes
//! `PRAGMA integrity_check`.
//!
//! Kills: `PORTARIA_KILL_STORM_KILLS` (default 50); the figures are printed as `kill storm: ...`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::rng::Rng;
use crate::support::*;

const DEFAULT_KILLS: usize = 50;
const CLIENTS: usize = 4;

/// How one request ended, as its sender saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Status(u16),
    /// Connected and sent, but no answer came: the server died with it.
    CutOff,
}

/// What was sent, per distinct body.
#[derive(Default)]
struct Ledger {
    /// body -> every answer its sends got.
    answers: HashMap<Vec<u8>, Vec<Answer>>,
    /// Bodies sent with a forged signature.
    forged: Vec<Vec<u8>>,
    requests: usize,
    resends: usize,
    races: usize,
}

/// One POST over a fresh connection. None: no connection (the server is down), so nothing was
/// sent and the caller may try again.
async fn try_post(addr: SocketAddr, headers: &[(String, String)], body: &[u8]) -> Option<Answer> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let attempt = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method("POST")
            .uri("/webhooks/pagarme")
            .header("host", addr.to_string());
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(Full::new(Bytes::copy_from_slice(body))).ok()?;
        let res = sender.send_request(req).await.ok()?;
        let status = res.status().as_u16();
        res.into_body().collect().await.ok()?;
        Some(status)
    };
    Some(
        match tokio::time::timeout(Duration::from_secs(20), attempt).await {
            Ok(Some(status)) => Answer::Status(status),
            _ => Answer::CutOff,
        },
    )
}

/// Sends until the request reaches a server (one that accepted the connection).
async fn deliver_request(
    addr: &watch::Receiver<SocketAddr>,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let current = *addr.borrow();
        if let Some(answer) = try_post(current, headers, body).await {
            return answer;
        }
        assert!(Instant::now() < give_up, "no server to send to for 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn new_body(client: usize, n: usize, seed: u64) -> Vec<u8> {
    format!(
        r#"{{"id":"hook_{seed}_{client}_{n}","type":"charge.paid","data":{{"id":"ch_{client}_{n}","amount":{n},"status":"paid"}}}}"#
    )
    .into_bytes()
}

/// One client: new events, exact re-sends of earlier ones, races (the same new body twice at
/// once) and forgeries, until told to stop.
async fn client(
    id: usize,
    seed: u64,
    addr: watch::Receiver<SocketAddr>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut mine: Vec<Vec<u8>> = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let roll = rng.below(100);
        if roll < 10 {
            // A forgery: signed with the wrong secret.
            let body = new_body(id, n, seed);
            let mut headers = pagarme_headers(&body);
            headers[1].1 = format!("sha256={}", hmac_hex("not-the-secret", &[&body]));
            let answer = deliver_request(&addr, &headers, &body).await;
            let mut l = ledger.lock().unwrap();
            l.requests += 1;
            l.forged.push(body.clone());
            l.answers.entry(body).or_default().push(answer);
        } else if roll < 20 {
            // The same new body twice at once: the dedup barrier decides between them.
            let body = new_body(id, n, seed);
            let headers = pagarme_headers(&body);
            let (a, b) = tokio::join!(
                deliver_request(&addr, &headers, &body),
                deliver_request(&addr, &headers, &body)
            );
            let mut l = ledger.lock().unwrap();
            l.requests += 2;
            l.resends += 1;
            l.races += 1;
            l.answers.entry(body.clone()).or_default().extend([a, b]);
            mine.push(body);
        } else if roll < 32 && !mine.is_empty() {
            // An exact re-send of an earlier body, as a gateway retrying would.
            let body = mine[rng.below(mine.len() as u64) as usize].clone();
            let answer = deliver_request(&addr, &pagarme_headers(&body), &body).await;
            let mut l = ledger.lock().unwrap();
            l.requests += 1;
            l.resends += 1;
            l.answers.entry(body).or_default().push(answer);
        } else {
            let body = new_body(id, n, seed);
            let answer = deliver_request(&addr, &pagarme_headers(&body), &body).await;
            let mut l = ledger.lock().unwrap();
            l.requests += 1;
            l.answers.entry(body.clone()).or_default().push(answer);
            mine.push(body);
        }
    }
}

/// A forward target on loopback that records (event id, sha256 of the body) of every request
/// it read in full, then answers 200 after a short random pause (so kills land mid-delivery).
async fn recording_target(seed: u64) -> (SocketAddr, Arc<Mutex<Vec<(i64, String)>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let record = seen.clone();
    let rng = Arc::new(Mutex::new(Rng::new(seed ^ 0x5EED)));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            let rng = rng.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let record = record.clone();
                        let pause = rng.lock().unwrap().below(15);
                        async move {
                            let id: i64 = req
                                .headers()
                                .get("portaria-event-id")
                                .and_then(|v| v.to_str().ok()?.parse().ok())
                                .unwrap_or(-1);
                            let body = req.into_body().collect().await?.to_bytes();
                            record
                                .lock()
                                .unwrap()
                                .push((id, hex::encode(Sha256::digest(&body))));
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_storm_of_sigkills_every_acknowledged_webhook_is_stored_once_and_forwarded() {
    let kills: usize = std::env::var("PORTARIA_KILL_STORM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KILLS);
    let mut rng = Rng::from_clock();
    let seed = rng.seed();
    let started = Instant::now();
    let (target, forwarded) = recording_target(seed).await;
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    std::fs::write(
        &config,
        base_config(
            &db,
            "",
            &format!(
                "forward = {{ url = \"http://{target}/in\", timeout_secs = 30 }}\n\
                 retry = [\"1s\", \"1s\", \"1s\"]\nconcurrency = 8\n"
            ),
        ),
    )
    .unwrap();

    let first = Process::spawn(&config).await;
    let (addr_tx, addr_rx) = watch::channel(first.addr);
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(client(
                id,
                seed,
                addr_rx.clone(),
                ledger.clone(),
                stop.clone(),
            ))
        })
        .collect();

    // The storm: each life lasts a random 0-350 ms after it starts listening.
    let mut server = first;
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.below(350))).await;
        server.signal(libc::SIGKILL);
        server.wait(Duration::from_secs(10)).await;
        drop(server);
        server = Process::spawn(&config).await;
        addr_tx.send_replace(server.addr);
    }
    let storm = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    // The last life drains the queue.
    let conn = open_db(&db);
    eventually(
        Duration::from_secs(120),
        "every stored event delivered",
        || {
            conn.query_row(
                "SELECT count(*) FROM events WHERE status <> 'delivered'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 0
        },
    )
    .await;
    server.signal(libc::SIGTERM);
    server.wait(Duration::from_secs(30)).await;

    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");

    // What the database holds: rows per body, and each row's id.
    let mut stored: HashMap<Vec<u8>, Vec<i64>> = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT e.id, p.body FROM events e JOIN payloads p ON p.event_id = e.id")
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .unwrap();
        for row in rows {
            let (id, body) = row.unwrap();
            stored.entry(body).or_default().push(id);
        }
    }
    let keys_twice: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT 1 FROM events GROUP BY endpoint, dedup_key \
             HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(keys_twice, 0, "a dedup key has more than one row");
    let events: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        events as usize,
        stored.values().map(Vec::len).sum::<usize>()
    );

    let ledger = ledger.lock().unwrap();
    let mut problems = Vec::new();
    let (mut acked_bodies, mut acks, mut cut_off, mut cut_stored, mut refused) = (0, 0, 0, 0, 0);
    for (body, answers) in &ledger.answers {
        let rows = stored.get(body).map_or(0, Vec::len);
        let ok = answers
            .iter()
            .filter(|a| matches!(a, Answer::Status(200..=299)))
            .count();
        let cut = answers.iter().filter(|a| **a == Answer::CutOff).count();
        acks += ok;
        cut_off += cut;
        refused += answers.len() - ok - cut;
        let text = String::from_utf8_lossy(body);
        if ok > 0 {
            acked_bodies += 1;
            if rows != 1 {
                problems.push(format!("acknowledged, but {rows} rows: {text}"));
            }
        } else if cut > 0 {
            // Cut off without an answer: committed or not, both are allowed, once at most.
            cut_stored += rows;
            if rows > 1 {
                problems.push(format!("cut off, but {rows} rows: {text}"));
            }
        } else if rows > 0 {
            problems.push(format!("answered {answers:?}, but stored: {text}"));
        }
    }
    for body in &ledger.forged {
        let answers = &ledger.answers[body];
        if answers
            .iter()
            .any(|a| !matches!(a, Answer::Status(401) | Answer::CutOff))
        {
            problems.push(format!("a forgery was answered {answers:?}"));
        }
        if stored.contains_key(body) {
            problems.push("a forgery was stored".to_string());
        }
    }
    for body in stored.keys() {
        if !ledger.answers.contains_key(body) {
            problems.push(format!(
                "stored, never sent: {}",
                String::from_utf8_lossy(body)
            ));
        }
    }

    // Forwards per event, each checked against the stored body.
    let bodies_by_id: HashMap<i64, String> = stored
        .iter()
        .flat_map(|(body, ids)| {
            let sha = hex::encode(Sha256::digest(body));
            ids.iter().map(move |id| (*id, sha.clone()))
        })
        .collect();
    let mut forwards: BTreeMap<i64, usize> = BTreeMap::new();
    for (id, sha) in forwarded.lock().unwrap().iter() {
        match bodies_by_id.get(id) {
            Some(stored_sha) if stored_sha == sha => *forwards.entry(*id).or_default() += 1,
            _ => problems.push(format!("forwarded event {id} is not a stored body")),
        }
    }
    let attempts_of = |id: i64, outcome: &str| -> usize {
        conn.query_row(
            "SELECT count(*) FROM attempts WHERE event_id = ?1 AND outcome = ?2",
            rusqlite::params![id, outcome],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as usize
    };
    let (mut once, mut twice, mut more) = (0, 0, 0);
    for id in bodies_by_id.keys() {
        let n = forwards.get(id).copied().unwrap_or(0);
        match n {
            0 => problems.push(format!("event {id} stored but never forwarded")),
            1 => once += 1,
            2 => twice += 1,
            _ => more += 1,
        }
        let interrupted = attempts_of(*id, "interrupted");
        let failed = attempts_of(*id, "failed");
        let explained = interrupted + failed;
        if n > 1 + explained {
            problems.push(format!(
                "event {id} forwarded {n} times with {interrupted} interrupted and {failed} \
                 failed attempts"
            ));
        }
    }
    let interrupted: i64 = conn
        .query_row(
            "SELECT count(*) FROM attempts WHERE outcome = 'interrupted'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let failed: i64 = conn
        .query_row(
            "SELECT count(*) FROM attempts WHERE outcome <> 'interrupted' \
             AND outcome <> 'delivered'",
            [],
            |r| r.get(0),
        )
        .unwrap();

    println!(
        "kill storm: seed {seed}, {kills} kills in {:.1} s; sent {} requests ({} re-sends, {} \
         races, {} forged); {acks} answered 2xx ({acked_bodies} distinct events), {refused} \
         answered non-2xx, {cut_off} cut off ({cut_stored} of those bodies stored anyway); \
         stored {events}; forwarded once {once}, twice {twice}, more {more}; {interrupted} \
         interrupted attempts, {failed} failed; integrity_check ok",
        storm.as_secs_f64(),
        ledger.requests,
        ledger.resends,
        ledger.races,
        ledger.forged.len(),
    );
    assert!(
        problems.is_empty(),
        "{} problems (seed {seed}):\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(acked_bodies > 0 && !ledger.forged.is_empty() && ledger.races > 0);
}
