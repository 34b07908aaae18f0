//! The forward target down for the whole retry schedule: a URL target on a port where nothing
//! listens. Events go dead after their attempts, intake stays as fast as with a healthy target
//! (measured here, in the same run, as a ratio), and `portaria events replay --dead` delivers
//! each of them exactly once when the target is back. Promises: docs/guarantees/input.md.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::support::*;

const N: usize = 40;
const WAIT: Duration = Duration::from_secs(20);

async fn forwarding_to(target: SocketAddr) -> TestServer {
    let extra = format!(
        "forward = {{ url = \"http://{target}/in\", timeout_secs = 2 }}\nretry = [\"100ms\", \"200ms\"]\nconcurrency = 8\n"
    );
    TestServer::start("", &extra).await
}

/// A target on `listener` that answers 200 and records each body.
fn target_on(listener: TcpListener) -> Arc<Mutex<Vec<Bytes>>> {
    let seen: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let record = record.clone();
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            record.lock().unwrap().push(body);
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    seen
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_target_down_events_go_dead_intake_stays_fast_and_replay_delivers_once() {
    // A port held with nothing listening: every attempt is a refused connection.
    let closed = ClosedPort::new();
    let down = closed.addr;
    let healthy_target = Target::start(vec![200]).await;
    let dead = forwarding_to(down).await;
    let healthy = forwarding_to(healthy_target.addr).await;

    // Alternate the two servers request by request, so both see the same machine load.
    let (mut dead_times, mut healthy_times) = (Vec::new(), Vec::new());
    for n in 0..N {
        let body = payment_body(n);
        for (server, times) in [(&dead, &mut dead_times), (&healthy, &mut healthy_times)] {
            let started = Instant::now();
            let reply = post_pagarme(server.addr, &body).await;
            times.push(started.elapsed());
            assert_eq!(reply.status, 200);
        }
    }
    let total = |t: &[Duration]| t.iter().sum::<Duration>();
    let (dead_total, healthy_total) = (total(&dead_times), total(&healthy_times));
    let (dead_p50, healthy_p50) = (median(&mut dead_times), median(&mut healthy_times));
    let total_ratio = dead_total.as_secs_f64() / healthy_total.as_secs_f64();
    let p50_ratio = dead_p50.as_secs_f64() / healthy_p50.as_secs_f64();
    println!(
        "{N} webhooks: target down {dead_total:?} (p50 {dead_p50:?}), healthy {healthy_total:?} \
         (p50 {healthy_p50:?}); ratio total {total_ratio:.2}, p50 {p50_ratio:.2}"
    );
    assert!(
        total_ratio < 3.0 && p50_ratio < 3.0,
        "intake slowed by the dead target: total x{total_ratio:.2}, p50 x{p50_ratio:.2}"
    );

    // Every event tries once and once per gap, then is dead; the healthy ones are delivered.
    eventually(WAIT, "every event dead", || {
        dead.one::<i64>("SELECT count(*) FROM events WHERE status = 'dead'") == N as i64
    })
    .await;
    let attempts: i64 = dead.one("SELECT count(*) FROM attempts");
    assert_eq!(attempts, 3 * N as i64, "1 attempt + 2 retries each");
    let error: String = dead.one("SELECT error FROM attempts ORDER BY id DESC LIMIT 1");
    assert!(!error.is_empty());
    eventually(WAIT, "healthy ones delivered", || {
        healthy_target.count() == N
    })
    .await;

    // The target is back: a replay of the dead events delivers each exactly once.
    let seen = target_on(closed.listen());
    let out = run_cli(
        &["events", "replay", "--dead", "--yes"],
        &dead.config_path(),
    );
    let said = ok_stdout(&out);
    assert!(said.contains(&format!("{N} dead event")), "{said}");
    eventually(WAIT, "every event delivered after the replay", || {
        dead.one::<i64>("SELECT count(*) FROM events WHERE status = 'delivered'") == N as i64
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bodies: Vec<Bytes> = seen.lock().unwrap().clone();
    assert_eq!(bodies.len(), N, "each delivered once, none twice");
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), N, "N distinct events");
}
