//! SaaS providers end to end: the real server, each preset's requests, oracles where a library exists.
//!
//! Each request is signed by the provider's own library (slack-sdk, paddle-python-sdk, twilio),
//! or by portaria and then accepted by the provider's own verifier (Shopify, Square, Linear,
//! which ship no signer), or carries a published or independently computed vector.

use std::time::Duration;

use portaria::verify::{Settings, Verifier};
use serde_json::json;

use crate::support::oracle;
use crate::support::*;

const SLACK: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ZOOM: &str = "zoom_secret_token";
const WOO: &str = "woo_secret";
const PADDLE: &str = "pdl_ntfset_01h_test_secret";
const TWILIO: &str = "12345";
const TWILIO_URL: &str = "https://example.trycloudflare.com/webhooks/twilio";
const SQUARE: &str = "Ibxx_5AKakO-3qeNVR61Dw";
const SQUARE_URL: &str = "https://example.trycloudflare.com/webhooks/square";
const SQUARE_DOCS_URL: &str = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9";
const SHOPIFY: &str = "shpss_test_secret";
const LINEAR: &str = "lin_wh_secret";
const CALENDLY: &str = "calendly_signing_key";

const WAIT: Duration = Duration::from_secs(15);

/// A server with one endpoint per SaaS preset; slack, zoom and woocommerce forward to a
/// recorder (one line per call in `<work>/calls`), to show what is not forwarded.
async fn start() -> (TestServer, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let recorder = record_calls(
        work.path(),
        "on-event.sh",
        "cat > /dev/null",
        "$PORTARIA_EVENT_ID",
        "",
    );
    let forward = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 5 }}",
        recorder.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let mut config = sqlite_config(&db);
    for (name, provider, secret, extra) in [
        ("slack", "slack", SLACK, forward.as_str()),
        ("zoom", "zoom", ZOOM, forward.as_str()),
        ("woocommerce", "woocommerce", WOO, forward.as_str()),
        ("paddle", "paddle", PADDLE, ""),
        (
            "twilio",
            "twilio",
            TWILIO,
            &format!("public_url = \"{TWILIO_URL}\""),
        ),
        (
            "square",
            "square",
            SQUARE,
            &format!("public_url = \"{SQUARE_URL}\""),
        ),
        (
            "square-docs",
            "square",
            SQUARE,
            &format!("public_url = \"{SQUARE_DOCS_URL}\""),
        ),
        ("shopify", "shopify", SHOPIFY, ""),
        ("linear", "linear", LINEAR, ""),
        ("intercom", "intercom", "intercom_client_secret", ""),
        ("typeform", "typeform", "typeform_secret", ""),
        ("calendly", "calendly", CALENDLY, ""),
    ] {
        config = config.endpoint(
            &format!("/webhooks/{name}"),
            provider,
            &format!("name = \"{name}\"\nsecret = \"{secret}\"\n{extra}"),
        );
    }
    (TestServer::start_with(dir, db, &config.text()).await, work)
}

/// One byte of `body` changed (the last but one, so JSON stays JSON where it was).
fn changed(body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    let at = body.len() - 2;
    body[at] ^= 0x01;
    body
}

/// Posts `body` twice with `headers`: 200 both times, one row; then a changed byte: 401.
async fn accepted_once_and_tamper_refused(
    server: &TestServer,
    path: &str,
    endpoint: &str,
    headers: &[(String, String)],
    body: &[u8],
) {
    for _ in 0..2 {
        let reply = post(server.addr, path, headers, body).await;
        assert_eq!(reply.status, 200, "{endpoint}: {}", reply.body);
    }
    assert_eq!(server.events_of(endpoint), 1, "{endpoint}");
    let reply = post(server.addr, path, headers, &changed(body)).await;
    assert_eq!(reply.status, 401, "{endpoint}: {}", reply.body);
    assert_eq!(server.events_of(endpoint), 1, "{endpoint}");
}

fn verifier(provider: &str, secret: &str, public_url: Option<&str>) -> Verifier {
    let settings = Settings {
        public_url,
        ..Settings::default()
    };
    Verifier::with_settings(provider, &settings, &[secret.to_string()], None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_signed_by_slack_sdk_is_stored_once_and_portaria_signs_what_slack_sdk_accepts() {
    let (server, _work) = start().await;
    let now = now_secs();
    let body =
        br#"{"type":"event_callback","event_id":"Ev0PV52K21","event":{"type":"app_mention"}}"#;
    let text = std::str::from_utf8(body).unwrap();
    let Some(signed) = oracle::run(
        "slack_signature.py",
        &json!({ "secret": SLACK, "timestamp": now, "body": text }),
    ) else {
        return;
    };
    let headers = [
        h("x-slack-request-timestamp", now.to_string()),
        h("x-slack-signature", signed["signature"].as_str().unwrap()),
        h("content-type", "application/json"),
    ];
    accepted_once_and_tamper_refused(&server, "/webhooks/slack", "slack", &headers, body).await;

    // And the other way: what portaria signs, slack-sdk's `is_valid` accepts.
    let ours = verifier("slack", SLACK, None).sign(body, now, "");
    let signature = &ours
        .iter()
        .find(|(n, _)| n == "x-slack-signature")
        .unwrap()
        .1;
    let checked = oracle::run(
        "slack_signature.py",
        &json!({ "secret": SLACK, "timestamp": now, "body": text, "signature": signature }),
    )
    .unwrap();
    assert_eq!(checked["valid"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_url_verification_is_answered_and_neither_stored_nor_forwarded() {
    let (server, work) = start().await;
    let now = now_secs();
    let challenge = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let sign = |body: &[u8]| {
        let ts = now.to_string();
        let mac = hmac_hex(SLACK, &[b"v0:", ts.as_bytes(), b":", body]);
        vec![
            h("x-slack-request-timestamp", ts),
            h("x-slack-signature", format!("v0={mac}")),
        ]
    };
    let reply = post(server.addr, "/webhooks/slack", &sign(challenge), challenge).await;
    assert_eq!(reply.status, 200);
    let answer: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        answer,
        json!({ "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" })
    );
    assert_eq!(server.events_of("slack"), 0);
    // Unsigned, the same body is refused: the challenge is only answered once verified.
    let reply = post(server.addr, "/webhooks/slack", &[], challenge).await;
    assert_eq!(reply.status, 401);
    // An event after it is the only thing forwarded.
    let event = br#"{"type":"event_callback","event_id":"Ev1"}"#;
    let reply = post(server.addr, "/webhooks/slack", &sign(event), event).await;
    assert_eq!(reply.status, 200);
    eventually(WAIT, "the event is forwarded", || {
        calls(work.path()).len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls(work.path()).len(), 1);
    assert_eq!(server.events_of("slack"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zoom_events_and_the_url_validation_handshake() {
    let (server, work) = start().await;
    let now = now_secs().to_string();
    let sign = |body: &[u8]| {
        let mac = hmac_hex(ZOOM, &[b"v0:", now.as_bytes(), b":", body]);
        vec![
            h("x-zm-request-timestamp", now.clone()),
            h("x-zm-signature", format!("v0={mac}")),
        ]
    };
    let validation = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let reply = post(server.addr, "/webhooks/zoom", &sign(validation), validation).await;
    assert_eq!(reply.status, 200);
    let answer: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        answer,
        json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": hmac_hex(ZOOM, &[b"qgg8vlvZRS6UYooatFL8Aw"]),
        })
    );
    assert_eq!(server.events_of("zoom"), 0);
    let event = br#"{"event":"meeting.started","event_ts":1700000000000}"#;
    accepted_once_and_tamper_refused(&server, "/webhooks/zoom", "zoom", &sign(event), event).await;
    eventually(WAIT, "the event is forwarded", || {
        calls(work.path()).len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls(work.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn woocommerce_ping_is_answered_unstored_and_signed_events_are_stored_once() {
    let (server, work) = start().await;
    let ping = b"webhook_id=17";
    let form = [h("content-type", "application/x-www-form-urlencoded")];
    let reply = post(server.addr, "/webhooks/woocommerce", &form, ping).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.events_of("woocommerce"), 0);
    // Anything else unsigned, or the ping with a (wrong) signature, is refused.
    let reply = post(
        server.addr,
        "/webhooks/woocommerce",
        &form,
        b"webhook_id=17&x=1",
    )
    .await;
    assert_eq!(reply.status, 401);
    let bad = [h("x-wc-webhook-signature", "AAAA")];
    let reply = post(server.addr, "/webhooks/woocommerce", &bad, ping).await;
    assert_eq!(reply.status, 401);
    // Computed vector (signature-schemes.md §7.2): WooCommerce's signer is PHP.
    let body = br#"{"id":123,"status":"processing"}"#;
    let headers = [
        h(
            "x-wc-webhook-signature",
            "UyqdfIBBNFokgigVTFq/fX7Wvs8gwS5pNQ6gNNwZ7LY=",
        ),
        h("x-wc-webhook-topic", "order.updated"),
    ];
    accepted_once_and_tamper_refused(
        &server,
        "/webhooks/woocommerce",
        "woocommerce",
        &headers,
        body,
    )
    .await;
    let event_type: String =
        server.one("SELECT event_type FROM events WHERE endpoint = 'woocommerce'");
    assert_eq!(event_type, "order.updated");
    eventually(WAIT, "the event is forwarded", || {
        calls(work.path()).len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls(work.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paddle_signed_by_paddle_sdk_is_stored_once_and_the_sdk_accepts_portarias_header() {
    let (server, _work) = start().await;
    let now = now_secs();
    let body = br#"{"event_id":"evt_01hv8x2acma2gz3we9cm9mxwtb","event_type":"transaction.paid"}"#;
    let text = std::str::from_utf8(body).unwrap();
    let ours = verifier("paddle", PADDLE, None).sign(body, now, "");
    let Some(out) = oracle::run(
        "paddle_signature.py",
        &json!({ "secret": PADDLE, "ts": now, "body": text, "header": ours[0].1 }),
    ) else {
        return;
    };
    assert_eq!(out["valid"], true, "{out}");
    let header = format!("ts={now};h1={}", out["h1"].as_str().unwrap());
    let headers = [h("paddle-signature", header)];
    accepted_once_and_tamper_refused(&server, "/webhooks/paddle", "paddle", &headers, body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_form_and_json_signed_by_twilio_over_the_public_url_and_query() {
    let (server, _work) = start().await;
    let query = "team=a&n=1";
    let params = [
        ("CallSid", "CA1234567890ABCDE"),
        ("From", "+14158675309"),
        ("Digits", "1234"),
    ];
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let url = format!("{TWILIO_URL}?{query}");
    let Some(out) = oracle::run(
        "twilio_request_validator.py",
        &json!({ "token": TWILIO, "url": url, "params": params }),
    ) else {
        return;
    };
    let headers = [
        h("x-twilio-signature", out["signature"].as_str().unwrap()),
        h("i-twilio-idempotency-token", "idem-form-1"),
        h("content-type", "application/x-www-form-urlencoded"),
    ];
    let path = format!("/webhooks/twilio?{query}");
    accepted_once_and_tamper_refused(&server, &path, "twilio", &headers, body.as_bytes()).await;
    // The query is signed: another one is refused.
    let reply = post(
        server.addr,
        "/webhooks/twilio?team=b&n=1",
        &headers,
        body.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 401);

    // JSON: the hash of the body in the URL, the URL alone signed.
    let json_body = r#"{"property": "value", "boolean": true}"#;
    let hash = oracle::run(
        "twilio_request_validator.py",
        &json!({ "token": TWILIO, "url": TWILIO_URL, "body": json_body }),
    )
    .unwrap()["body_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("{TWILIO_URL}?bodySHA256={hash}");
    let out = oracle::run(
        "twilio_request_validator.py",
        &json!({ "token": TWILIO, "url": url, "params": [] }),
    )
    .unwrap();
    let headers = [h("x-twilio-signature", out["signature"].as_str().unwrap())];
    let path = format!("/webhooks/twilio?bodySHA256={hash}");
    let reply = post(server.addr, &path, &headers, json_body.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = post(server.addr, &path, &headers, &changed(json_body.as_bytes())).await;
    assert_eq!(reply.status, 401);

    // What portaria signs (for `portaria send`), Twilio's `validate` accepts.
    let ours = verifier("twilio", TWILIO, Some(TWILIO_URL))
        .sign_request(json_body.as_bytes(), 0, "idem-2")
        .unwrap();
    let url = format!("{TWILIO_URL}?{}", ours.query.unwrap());
    let checked = oracle::run(
        "twilio_request_validator.py",
        &json!({ "token": TWILIO, "url": url, "body": json_body, "signature": ours.headers[0].1 }),
    )
    .unwrap();
    assert_eq!(checked["valid"], true, "{checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn square_official_vector_and_portarias_signature_accepted_by_squareup() {
    let (server, _work) = start().await;
    // Official vector (square-python-sdk tests), with its own notification URL.
    let body = br#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#;
    let headers = [h(
        "x-square-hmacsha256-signature",
        "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=",
    )];
    accepted_once_and_tamper_refused(
        &server,
        "/webhooks/square-docs",
        "square-docs",
        &headers,
        body,
    )
    .await;
    // Another public URL, another signature: the vector fails there.
    let reply = post(server.addr, "/webhooks/square", &headers, body).await;
    assert_eq!(reply.status, 401);
    let ours = verifier("square", SQUARE, Some(SQUARE_URL)).sign(body, 0, "");
    let Some(out) = oracle::run(
        "square_webhooks_helper.py",
        &json!({ "key": SQUARE, "url": SQUARE_URL, "body": std::str::from_utf8(body).unwrap(), "signature": ours[0].1 }),
    ) else {
        return;
    };
    assert_eq!(out["valid"], true);
    accepted_once_and_tamper_refused(&server, "/webhooks/square", "square", &ours, body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shopify_vector_and_portarias_signature_accepted_by_shopify_api() {
    let (server, _work) = start().await;
    let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    // Computed vector (signature-schemes.md §7.2), with the headers Shopify sends.
    let headers = [
        h(
            "x-shopify-hmac-sha256",
            "LnwdZPLBbdjkBwPD/lDL1/rYEGby/GHPtL1aAH6Dxjc=",
        ),
        h("x-shopify-topic", "orders/create"),
        h(
            "x-shopify-webhook-id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        h("x-shopify-event-id", "98880550-7158-44d4-b7cd-2c97c8a091b5"),
    ];
    accepted_once_and_tamper_refused(&server, "/webhooks/shopify", "shopify", &headers, body).await;
    // The body's SHA-256: the event and webhook ids are not signed (signed_dedup.rs).
    let key: String = server.one("SELECT dedup_key FROM events WHERE endpoint = 'shopify'");
    assert_eq!(key, hex::encode(portaria::digest::sha256(&[body])));
    let reply = post(server.addr, "/webhooks/shopify", &headers[..1], b"").await;
    assert_eq!(reply.status, 401);
    // What portaria signs, Shopify's `webhooks.validate` accepts.
    let other = br#"{"id":820982911946154509}"#;
    let ours = verifier("shopify", SHOPIFY, None).sign(other, 0, "wh-2");
    let headers: serde_json::Map<String, serde_json::Value> =
        ours.iter().map(|(n, v)| (n.clone(), json!(v))).collect();
    let Some(out) = oracle::run(
        "shopify_webhooks.mjs",
        &json!({ "secret": SHOPIFY, "body": std::str::from_utf8(other).unwrap(), "headers": headers }),
    ) else {
        return;
    };
    assert_eq!(out["valid"], true, "{out}");
    let reply = post(server.addr, "/webhooks/shopify", &ours, other).await;
    assert_eq!(reply.status, 200);
    assert_eq!(server.events_of("shopify"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linear_signed_by_portaria_is_accepted_by_linear_sdk_and_stored_once() {
    let (server, _work) = start().await;
    let body = format!(
        r#"{{"action":"create","type":"Issue","data":{{"id":"i1"}},"webhookTimestamp":{}000}}"#,
        now_secs()
    );
    let mut headers =
        verifier("linear", LINEAR, None).sign(body.as_bytes(), 0, "7f3e0b1e-delivery");
    let Some(out) = oracle::run(
        "linear_webhooks.mjs",
        &json!({ "secret": LINEAR, "body": body, "signature": headers[0].1 }),
    ) else {
        return;
    };
    assert_eq!(out["valid"], true, "{out}");
    headers.push(h("linear-event", "Issue"));
    accepted_once_and_tamper_refused(
        &server,
        "/webhooks/linear",
        "linear",
        &headers,
        body.as_bytes(),
    )
    .await;
    // A signed body an hour old is refused.
    let old = format!(r#"{{"webhookTimestamp":{}000}}"#, now_secs() - 3600);
    let signed = [
        h("linear-signature", hmac_hex(LINEAR, &[old.as_bytes()])),
        h("linear-delivery", "d2"),
    ];
    let reply = post(server.addr, "/webhooks/linear", &signed, old.as_bytes()).await;
    assert_eq!(reply.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercom_typeform_and_calendly_vectors_are_stored_once() {
    let (server, _work) = start().await;
    // Computed vectors (signature-schemes.md §7.2): none of the three ships a signer.
    let body = br#"{"type":"notification_event","id":"notif_1"}"#;
    let headers = [h(
        "x-hub-signature",
        "sha1=3faebb0034e47694de045ab8bc314399711ff673",
    )];
    accepted_once_and_tamper_refused(&server, "/webhooks/intercom", "intercom", &headers, body)
        .await;
    let body = br#"{"event_id":"01ABC","event_type":"form_response"}"#;
    let headers = [h(
        "typeform-signature",
        "sha256=avoM/oP7xoyOktm7gKBSCvy0i7ltp/sf6guWr8qLwwA=",
    )];
    accepted_once_and_tamper_refused(&server, "/webhooks/typeform", "typeform", &headers, body)
        .await;
    // Calendly's timestamp must be recent: computed here, independently of portaria.
    let t = now_secs().to_string();
    let body = br#"{"event":"invitee.created","payload":{"uri":"https://api.calendly.com/i/1"}}"#;
    let v1 = hmac_hex(CALENDLY, &[t.as_bytes(), b".", body]);
    let headers = [h("calendly-webhook-signature", format!("t={t},v1={v1}"))];
    accepted_once_and_tamper_refused(&server, "/webhooks/calendly", "calendly", &headers, body)
        .await;
    let old = (now_secs() - 600).to_string();
    let v1 = hmac_hex(CALENDLY, &[old.as_bytes(), b".", body]);
    let headers = [h("calendly-webhook-signature", format!("t={old},v1={v1}"))];
    let reply = post(server.addr, "/webhooks/calendly", &headers, body).await;
    assert_eq!(reply.status, 401);
}
