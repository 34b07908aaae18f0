//! Requests signed as each provider signs them, computed here independently of portaria's own
//! code (the `hmac` and `sha2` crates), and the bodies the tests send.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const PAGARME_SECRET: &str = "test-pagarme-secret";
pub const RELYA_SECRET: &str = "test-relya-secret";
pub const GITHUB_SECRET: &str = "test-github-secret";
pub const STRIPE_SECRET: &str = "whsec_test_stripe";
pub const MP_SECRET: &str = "test-mercadopago-secret";

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn hmac_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

pub fn h(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_string(), value.into())
}

/// Headers Pagar.me sends: `X-Hub-Signature: sha256=<hex>` over the raw body.
pub fn pagarme_headers(body: &[u8]) -> Vec<(String, String)> {
    vec![
        h("content-type", "application/json"),
        h(
            "x-hub-signature",
            format!("sha256={}", hmac_hex(PAGARME_SECRET, &[body])),
        ),
    ]
}

/// Headers Relya sends, signed with `secret` at `ts`.
pub fn relya_headers(
    secret: &str,
    delivery_id: &str,
    ts: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    let ts_text = ts.to_string();
    let sig = hmac_hex(
        secret,
        &[ts_text.as_bytes(), b".", delivery_id.as_bytes(), b".", body],
    );
    vec![
        h("content-type", "application/json"),
        h("x-relya-delivery-id", delivery_id),
        h("x-relya-timestamp", ts_text),
        h("x-relya-event-type", "messages_update"),
        h("x-relya-signature", format!("v1={sig}")),
    ]
}

pub fn github_headers(delivery: Option<&str>, body: &[u8]) -> Vec<(String, String)> {
    let mut headers = vec![
        h("content-type", "application/json"),
        h("x-github-event", "push"),
        h(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(GITHUB_SECRET, &[body])),
        ),
    ];
    if let Some(id) = delivery {
        headers.push(h("x-github-delivery", id));
    }
    headers
}

pub fn stripe_headers(ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let ts_text = ts.to_string();
    let sig = hmac_hex(STRIPE_SECRET, &[ts_text.as_bytes(), b".", body]);
    vec![
        h("content-type", "application/json"),
        h("stripe-signature", format!("t={ts},v1={sig}")),
    ]
}

/// A realistic payment event body.
pub fn payment_body(n: usize) -> Vec<u8> {
    format!(
        r#"{{"id":"hook_{n}","type":"charge.paid","created_at":"2026-11-30T08:00:00Z","data":{{"id":"ch_{n}","amount":{},"status":"paid"}}}}"#,
        1000 + n
    )
    .into_bytes()
}

/// A Mercado Pago notification about payment `data_id`, signed as Mercado Pago signs it: the
/// query's `data.id`, the request id and the time (not the body). Path and headers.
pub fn mercadopago(
    path: &str,
    data_id: &str,
    request_id: &str,
) -> (String, Vec<(String, String)>, Vec<u8>) {
    let ts = now_secs().to_string();
    let manifest = format!("id:{data_id};request-id:{request_id};ts:{ts};");
    let signature = format!("ts={ts},v1={}", hmac_hex(MP_SECRET, &[manifest.as_bytes()]));
    let body = format!(
        r#"{{"action":"payment.updated","api_version":"v1","data":{{"id":"{data_id}"}},"id":1{data_id},"live_mode":false,"type":"payment"}}"#
    );
    let headers = vec![
        h("content-type", "application/json"),
        h("x-signature", signature),
        h("x-request-id", request_id),
    ];
    (
        format!("{path}?data.id={data_id}&type=payment"),
        headers,
        body.into_bytes(),
    )
}

/// A payment event of `kind`: `payment` is its `data.id` (an ordering key), None for none.
pub fn payment(n: usize, kind: &str, payment: Option<&str>) -> Vec<u8> {
    let data = payment.map_or(String::new(), |p| format!(r#","data":{{"id":"{p}"}}"#));
    format!(r#"{{"id":"hook_{n}","type":"{kind}"{data}}}"#).into_bytes()
}
