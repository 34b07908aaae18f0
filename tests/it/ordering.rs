//! Delivery order per route: `concurrency = 1` without `order_by` is strict arrival order;
//! with `order_by`, events of one key go in arrival order and other keys go on in parallel,
//! a key waiting for its retry holding back only itself. Real server, real child processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// A command route's script: logs `<event id> <attempt>` per call in `$D/calls`, fails the
/// first attempt of event 1, and logs each delivered event id in `$D/delivered`.
fn fail_first_of_event_1(dir: &Path) -> PathBuf {
    record_calls(
        dir,
        "erp.sh",
        "cat > /dev/null",
        EVENT_ATTEMPT,
        "if [ \"$PORTARIA_EVENT_ID\" = 1 ] && [ \"$PORTARIA_ATTEMPT\" = 1 ]; then exit 1; fi\n\
         echo \"$PORTARIA_EVENT_ID\" >> \"$D/delivered\"",
    )
}

fn route(program: &Path, settings: &str) -> String {
    format!(
        "[[endpoint.route]]\nname = \"erp\"\nforward = {{ command = [\"{}\"] }}\n{settings}\n",
        program.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_one_without_order_by_keeps_strict_arrival_order() {
    let work = tempfile::tempdir().unwrap();
    let program = fail_first_of_event_1(work.path());
    let server = TestServer::start("", &route(&program, "retry = [\"1s\"]\nconcurrency = 1")).await;
    for n in 1..=3 {
        let body = payment(n, "charge.paid", Some(&format!("pay_{n}")));
        assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    }
    eventually(WAIT, "all delivered", || {
        lines(work.path(), "delivered").len() == 3
    })
    .await;
    assert_eq!(lines(work.path(), "delivered"), ["1", "2", "3"]);
    // Nothing behind event 1 was even tried while it waited for its retry.
    assert_eq!(lines(work.path(), "calls"), ["1 1", "1 2", "2 1", "3 1"]);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_order_by_a_failing_payment_holds_back_only_its_own_events() {
    let work = tempfile::tempdir().unwrap();
    let program = fail_first_of_event_1(work.path());
    let settings = "retry = [\"3s\"]\nconcurrency = 4\norder_by = \"json:/data/id\"";
    let server = TestServer::start("", &route(&program, settings)).await;
    let events = [
        payment(1, "payment.created", Some("pay_A")), // fails once, retried in ~3 s
        payment(2, "payment.created", Some("pay_B")),
        payment(3, "payment.paid", Some("pay_A")), // must wait for event 1
        payment(4, "payment.paid", Some("pay_B")),
        payment(5, "refund.created", None), // no key: a lane of its own
    ];
    for body in &events {
        assert_eq!(post_pagarme(server.addr, body).await.status, 200);
    }
    // B's events and the keyless one go out while A's head waits for its retry.
    eventually(WAIT, "B and the keyless event delivered", || {
        let done = lines(work.path(), "delivered");
        ["2", "4", "5"]
            .iter()
            .all(|id| done.iter().any(|d| d == id))
    })
    .await;
    let pending: String =
        server.one("SELECT status || ' ' || attempts FROM deliveries WHERE event_id = 1");
    assert_eq!(pending, "pending 1", "A's head still waits for its retry");
    assert!(
        !lines(work.path(), "calls")
            .iter()
            .any(|c| c.starts_with("3 ")),
        "A's paid was not tried before A's created went out"
    );
    let delivered = lines(work.path(), "delivered");
    let at = |id: &str| delivered.iter().position(|d| d == id);
    assert!(at("2") < at("4"), "B in arrival order: {delivered:?}");

    eventually(WAIT, "A delivered after its retry", || {
        lines(work.path(), "delivered").len() == 5
    })
    .await;
    let delivered = lines(work.path(), "delivered");
    let at = |id: &str| delivered.iter().position(|d| d == id);
    assert!(
        at("1") < at("3"),
        "A's paid never overtakes its created: {delivered:?}"
    );
    // The key is stored with the delivery, so the order survives a restart.
    let keys: Vec<Option<String>> = {
        let db = server.db();
        let mut stmt = db
            .prepare("SELECT order_key FROM deliveries ORDER BY event_id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let key = |k: &str| Some(k.to_string());
    assert_eq!(
        keys,
        [key("pay_A"), key("pay_B"), key("pay_A"), key("pay_B"), None]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_ordering_key_is_read_at_intake() {
    let work = tempfile::tempdir().unwrap();
    let program = fail_first_of_event_1(work.path());
    let settings = "concurrency = 2\norder_by = \"header:x-object-id\"";
    let server = TestServer::start("", &route(&program, settings)).await;
    let body = payment(1, "charge.paid", None);
    let mut headers = pagarme_headers(&body);
    headers.push(h("x-object-id", "obj_9"));
    let reply = post(server.addr, "/webhooks/pagarme", &headers, &body).await;
    assert_eq!(reply.status, 200);
    let key: Option<String> = server.one("SELECT order_key FROM deliveries WHERE event_id = 1");
    assert_eq!(key.as_deref(), Some("obj_9"));
}
