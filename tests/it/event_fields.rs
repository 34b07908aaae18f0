//! The generic `event_type` and `object_id` fields end to end: where an endpoint says its type
//! and id are (`json:<pointer>`, `header:<name>`, `form:<field>`) is what route filters take,
//! what the forward target is told (with whether the type was signed), what the store and
//! the status page show; a field that finds nothing stores the event with no type, counted in
//! `portaria_events_untyped_total`, never refused.

use std::time::Duration;

use crate::support::*;

const SHOP_SECRET: &str = "shop-hmac-secret-1";
const TOPIC_SECRET: &str = "topic-hmac-secret-2";

fn config(db: &std::path::Path, target: std::net::SocketAddr) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "{db}"

[[endpoint]]
name = "shop"
path = "/webhooks/shop"
provider = "hmac"
secret = "{SHOP_SECRET}"
signature = {{ header = "x-sig" }}
event_type = "json:/events/0"
object_id = "json:/data/id"

[[endpoint.route]]
name = "paid"
events = ["PV.UPDATE_*"]
forward = {{ url = "http://{target}/paid" }}

[[endpoint.route]]
name = "refunds"
events = ["PV.REFUND_PIX"]
forward = {{ url = "http://{target}/refunds" }}
order_by = "json:/events/0"

[[endpoint]]
name = "topic"
path = "/webhooks/topic"
provider = "hmac"
secret = "{TOPIC_SECRET}"
signature = {{ header = "x-sig" }}
event_type = "header:X-Topic"
object_id = "form:data[id]"
forward = {{ url = "http://{target}/topic" }}
"#,
        db = db.display()
    )
}

fn signed(secret: &str, body: &str, extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut headers = vec![h("x-sig", hmac_hex(secret, &[body.as_bytes()]))];
    headers.extend_from_slice(extra);
    headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fields_decide_the_type_and_id_everywhere_and_a_miss_is_counted() {
    let target = Target::start(vec![200]).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = config(&db, target.addr);
    let server = TestServer::start_with(dir, db, &text).await;
    let admin = server.admin.unwrap();

    // A decoy `type` at the top is not read: the field says where the type is.
    let paid = r#"{"type":"decoy","events":["PV.UPDATE_TRANSACTION_PIX"],"data":{"id":"TID1"}}"#;
    let refund = r#"{"events":["PV.REFUND_PIX"],"data":{"id":"TID1"}}"#;
    let untyped = r#"{"type":"t","event":"e","data":{"id":"TID2"}}"#;
    for body in [paid, refund, untyped] {
        let headers = signed(SHOP_SECRET, body, &[]);
        let reply = post(server.addr, "/webhooks/shop", &headers, body.as_bytes()).await;
        assert_eq!(reply.status, 200, "{body}: {}", reply.body);
    }
    let form = "event=invoice.created&data%5Bid%5D=INV9&data%5Bstatus%5D=paid";
    let topic = [
        h("content-type", "application/x-www-form-urlencoded"),
        h("x-topic", "invoice.status_changed"),
    ];
    let headers = signed(TOPIC_SECRET, form, &topic);
    let reply = post(server.addr, "/webhooks/topic", &headers, form.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    // The store: the fields' values, and no type at all where the field found none.
    let rows: String = server.one(
        "SELECT group_concat(endpoint || ' ' || coalesce(event_type, '-') || ' ' || \
         coalesce(object_id, '-') || ' ' || status, '; ') FROM (SELECT * FROM events ORDER BY id)",
    );
    assert!(
        rows.starts_with("shop PV.UPDATE_TRANSACTION_PIX TID1 "),
        "{rows}"
    );
    assert!(rows.contains("; shop PV.REFUND_PIX TID1 "), "{rows}");
    assert!(rows.contains("; shop - TID2 stored; "), "{rows}");
    assert!(
        rows.contains("; topic invoice.status_changed INV9 "),
        "{rows}"
    );

    // The routes took them by those types; the target is told the type and whether the
    // signature covered it (hmac signs the body, not `X-Topic`).
    eventually(Duration::from_secs(20), "three deliveries", || {
        target.count() == 3
    })
    .await;
    let told: Vec<(String, String)> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| {
            let header = |name: &str| r.headers[name].to_str().unwrap().to_string();
            (
                header("portaria-event-type"),
                header("portaria-event-type-signed"),
            )
        })
        .collect();
    for expected in [
        ("PV.UPDATE_TRANSACTION_PIX", "1"),
        ("PV.REFUND_PIX", "1"),
        ("invoice.status_changed", "0"),
    ] {
        let expected = (expected.0.to_string(), expected.1.to_string());
        assert!(told.contains(&expected), "{expected:?} in {told:?}");
    }

    // The status page shows them.
    let api = json(&get(admin, "/api/events?endpoint=shop", &[]).await);
    let shown: Vec<(serde_json::Value, serde_json::Value)> = api["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event_type"].clone(), e["object_id"].clone()))
        .collect();
    assert!(
        shown.contains(&(
            serde_json::json!("PV.REFUND_PIX"),
            serde_json::json!("TID1")
        )),
        "{api:#}"
    );
    assert!(
        shown.contains(&(serde_json::Value::Null, serde_json::json!("TID2"))),
        "{api:#}"
    );

    // The miss is counted, once, for its endpoint only; no route took it.
    let metrics = send(admin, "GET", "/metrics", &[], b"").await.body;
    for (series, value) in [
        (r#"portaria_events_untyped_total{endpoint="shop"}"#, "1"),
        (r#"portaria_events_untyped_total{endpoint="topic"}"#, "0"),
        (r#"portaria_events_unrouted_total{endpoint="shop"}"#, "1"),
    ] {
        assert!(
            metrics.lines().any(|l| l == format!("{series} {value}")),
            "{series} {value} in\n{metrics}"
        );
    }
    server.stop().await;
}
