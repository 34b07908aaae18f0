//! Failures retrying cannot fix, and targets that say when to come back, with the real server
//! on each store engine (a SQLite file, and PostgreSQL: every body here runs on both, reading
//! deliveries back through the store API): a command's exit code after sysexits(3), a real
//! HTTP listener's 4xx and `Retry-After`, a pipe handler's `permanent` and `retry_after`.
//! Promises: docs/forwarding.md, "When retrying cannot help".

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use portaria::store::{RouteState, Status};
use tokio::net::TcpListener;

use crate::support::engine::{Engine, Reader};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn accept(server: &TestServer, n: usize) {
    assert_eq!(
        post_pagarme(server.addr, &payment_body(n)).await.status,
        200
    );
}

/// A real HTTP listener answering its n-th request with the n-th `(status, headers)` of
/// `script` (the last repeats); returns its address and how many requests it has had.
async fn answering(
    script: Vec<(u16, Vec<(&'static str, String)>)>,
) -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<usize>> = Arc::default();
    let (count, script) = (seen.clone(), Arc::new(script));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (count, script) = (count.clone(), script.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (count, script) = (count.clone(), script.clone());
                        async move {
                            req.into_body().collect().await?;
                            let n = {
                                let mut count = count.lock().unwrap();
                                *count += 1;
                                *count
                            };
                            let (status, headers) =
                                script.get(n - 1).or(script.last()).cloned().unwrap();
                            let mut res =
                                hyper::Response::new(Full::new(Bytes::from_static(b"no thanks")));
                            *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            for (name, value) in headers {
                                res.headers_mut().insert(name, value.parse().unwrap());
                            }
                            Ok::<_, hyper::Error>(res)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// The server on `engine` forwarding pagarme to the URL `target` on the schedule `retry`, and
/// a reader of its store; None where PostgreSQL is missing (skipped).
async fn forwarding_to(
    engine: Engine,
    target: SocketAddr,
    retry: &str,
) -> Option<(TestServer, Reader)> {
    let extra = format!(
        "forward = {{ url = \"http://{target}/in\", timeout_secs = 2 }}\nretry = {retry}\n"
    );
    serving(engine, &extra).await
}

async fn serving(engine: Engine, pagarme_extra: &str) -> Option<(TestServer, Reader)> {
    let server = engine.server(pagarme_extra).await?;
    let reader = Reader::of(&server).await;
    Some((server, reader))
}

fn dead(d: &RouteState) -> bool {
    d.status == Status::Dead
}

/// Events 1, 2 and 3 meet a handler that exits 64, 65 and 78 (the event or the handler is
/// wrong: dead at once), event 4 one that exits 75 (busy: the whole schedule).
async fn command_exits(engine: Engine) {
    let work = tempfile::tempdir().unwrap();
    let program = work.path().join("on-event.sh");
    write_executable(
        &program,
        "#!/bin/sh\ncat >/dev/null\necho \"cannot parse\" >&2\n\
         case \"$PORTARIA_EVENT_ID\" in 1) exit 64;; 2) exit 65;; 3) exit 78;; esac\nexit 75\n",
    );
    let extra = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [\"100ms\", \"100ms\"]\n",
        program.display()
    );
    let Some((server, reader)) = serving(engine, &extra).await else {
        return;
    };
    for n in 1..=4 {
        accept(&server, n).await;
    }
    for (id, name) in [
        (1, "64 (EX_USAGE"),
        (2, "65 (EX_DATAERR"),
        (3, "78 (EX_CONFIG"),
    ] {
        let d = reader.delivery_until(id, WAIT, "dead", dead).await;
        assert_eq!(d.attempts, 1, "exit {name}) is not retried");
        let error = d.last_error.unwrap();
        assert!(
            error.starts_with(&format!("exit status {name}")) && error.contains("cannot parse"),
            "{error}"
        );
    }
    let d = reader.delivery_until(4, WAIT, "dead", dead).await;
    assert_eq!(d.attempts, 3, "75 goes the whole schedule");
    assert!(
        d.last_error
            .as_deref()
            .unwrap()
            .starts_with("exit status 75 (EX_TEMPFAIL)")
    );
    let mut recorded = 0;
    for id in 1..=4 {
        recorded += reader.event(id).await.attempts.len();
    }
    assert_eq!(recorded, 6, "1 + 1 + 1 + 3 attempts recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_exiting_64_65_or_78_is_dead_at_once_and_75_is_retried() {
    command_exits(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_command_exiting_64_65_or_78_is_dead_at_once_and_75_is_retried() {
    command_exits(Engine::Postgres).await;
}

async fn a_400(engine: Engine) {
    let (target, requests) = answering(vec![(400, vec![])]).await;
    let Some((server, reader)) = forwarding_to(engine, target, "[\"100ms\", \"100ms\"]").await
    else {
        return;
    };
    accept(&server, 1).await;
    let d = reader.delivery_until(1, WAIT, "dead", dead).await;
    assert_eq!(d.attempts, 1);
    let error = d.last_error.unwrap();
    assert!(
        error.starts_with("HTTP 400: ") && error.contains("not retried"),
        "{error}"
    );
    assert!(error.ends_with("no thanks"), "{error}");
    // A 409 in the same place would have been tried three times: see the next test's retry.
    assert_eq!(*requests.lock().unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_dead_after_one_attempt() {
    a_400(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_400_is_dead_after_one_attempt() {
    a_400(Engine::Postgres).await;
}

/// Waits for event `id`'s first attempt to be recorded with a retry, and returns when it is
/// due next, its error, and the clock just after.
async fn first_retry(reader: &Reader, id: i64, before_ms: i64) -> (i64, String, i64) {
    let d = reader
        .delivery_until(id, WAIT, "first attempt recorded", |d| {
            d.attempts == 1 && d.status == Status::Pending
        })
        .await;
    let after_ms = now_ms();
    let next = d.next_attempt_at_ms.unwrap();
    assert!(next > before_ms, "{next} {before_ms}");
    (next, d.last_error.unwrap(), after_ms)
}

async fn a_429_with_seconds(engine: Engine) {
    let (target, requests) = answering(vec![
        (429, vec![("retry-after", "1".into())]),
        (200, vec![]),
    ])
    .await;
    // The schedule alone would wait an hour.
    let Some((server, reader)) = forwarding_to(engine, target, "[\"1h\"]").await else {
        return;
    };
    let before = now_ms();
    accept(&server, 1).await;
    let (next, error, after) = first_retry(&reader, 1, before).await;
    assert!(
        (before + 1_000..=after + 1_000).contains(&next),
        "due {} ms after the post, {} ms before the check",
        next - before,
        after - next
    );
    assert!(error.starts_with("HTTP 429 (Retry-After 1s)"), "{error}");
    let d = reader
        .delivery_until(1, WAIT, "delivered on the second attempt", |d| {
            d.status == Status::Delivered
        })
        .await;
    assert_eq!(d.attempts, 2);
    assert_eq!(*requests.lock().unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_seconds_is_retried_then_and_not_at_the_schedule_s_gap() {
    a_429_with_seconds(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_429_with_retry_after_seconds_is_retried_then_and_not_at_the_schedule_s_gap()
{
    a_429_with_seconds(Engine::Postgres).await;
}

async fn a_503_with_a_date(engine: Engine) {
    let date = |secs| httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(secs));
    // 40 s from now, on a schedule whose longest step is 60 s: the date is kept.
    let (target, _) = answering(vec![(503, vec![("retry-after", date(40))])]).await;
    let Some((server, reader)) = forwarding_to(engine, target, "[\"10s\", \"60s\"]").await else {
        return;
    };
    let before = now_ms();
    accept(&server, 1).await;
    let (next, error, after) = first_retry(&reader, 1, before).await;
    // The date has whole seconds: up to one less than asked.
    assert!(
        (before + 38_000..=after + 40_000).contains(&next),
        "due {} ms after the post",
        next - before
    );
    assert!(error.starts_with("HTTP 503 (Retry-After "), "{error}");
    drop(reader);
    server.stop().await;

    // A day from now is bounded by the longest step.
    let (target, _) = answering(vec![(503, vec![("retry-after", date(86_400))])]).await;
    let (server, reader) = forwarding_to(engine, target, "[\"10s\", \"60s\"]")
        .await
        .unwrap();
    let before = now_ms();
    accept(&server, 1).await;
    let (next, _, after) = first_retry(&reader, 1, before).await;
    assert!(
        (before + 60_000..=after + 60_000).contains(&next),
        "due {} ms after the post",
        next - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_with_an_http_date_is_retried_at_that_date_within_the_longest_step() {
    a_503_with_a_date(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_503_with_an_http_date_is_retried_at_that_date_within_the_longest_step() {
    a_503_with_a_date(Engine::Postgres).await;
}

/// A Python pipe handler in `dir`: event 1 is an order it will never know (`permanent`), any
/// other event's first attempt finds it busy for a second (`retry_after`), its second is
/// taken.
fn pipe_handler(dir: &Path) -> String {
    let path = dir.join("handler.py");
    std::fs::write(
        &path,
        "import json, sys\n\
         def answer(o):\n    sys.stdout.write(json.dumps(o) + '\\n'); sys.stdout.flush()\n\
         for line in sys.stdin:\n    \
             e = json.loads(line)\n    \
             if e['id'] == 1:\n        \
                 answer({'id': 1, 'ok': False, 'error': 'no such order', 'permanent': True})\n    \
             elif e['attempt'] == 1:\n        \
                 answer({'id': e['id'], 'ok': False, 'error': 'busy', 'retry_after': 1})\n    \
             else:\n        \
                 answer({'id': e['id'], 'ok': True})\n",
    )
    .unwrap();
    format!(
        "forward = {{ pipe = [\"python3\", {:?}], timeout_secs = 10 }}\nretry = [\"1h\"]\n",
        path.display().to_string()
    )
}

async fn pipe_answers(engine: Engine) {
    let work = tempfile::tempdir().unwrap();
    // The schedule alone would wait an hour.
    let Some((server, reader)) = serving(engine, &pipe_handler(work.path())).await else {
        return;
    };
    accept(&server, 1).await;
    let d = reader.delivery_until(1, WAIT, "dead", dead).await;
    assert_eq!(d.attempts, 1, "permanent: not retried");
    let error = d.last_error.unwrap();
    assert_eq!(error, "handler: no such order (permanent: not retried)");

    let before = now_ms();
    accept(&server, 2).await;
    let (next, error, after) = first_retry(&reader, 2, before).await;
    assert!(
        (before + 1_000..=after + 1_000).contains(&next),
        "due {} ms after the post, {} ms before the check",
        next - before,
        after - next
    );
    assert_eq!(error, "handler: busy");
    let d = reader
        .delivery_until(2, WAIT, "delivered on the second attempt", |d| {
            d.status == Status::Delivered
        })
        .await;
    assert_eq!(d.attempts, 2);
    assert_eq!(reader.delivery(1).await.attempts, 1, "event 1 stays dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_handler_answering_permanent_is_dead_at_once_and_retry_after_is_honoured() {
    pipe_answers(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_pipe_handler_answering_permanent_is_dead_at_once_and_retry_after_is_honoured()
 {
    pipe_answers(Engine::Postgres).await;
}
