//! Replays that change only what the signature does not cover, against the real server: each
//! preset's dedup key comes from signed material, so such a replay is never a second event and
//! never claims the key of a notification still to come (issue 23 §1; the promise is in
//! docs/guarantees/input.md, "Dedup keys and signed material").
//!
//! Every request is signed by portaria's own signer (`Verifier::sign_request`, which the
//! provider oracles check in providers_br.rs and providers_saas.rs), then changed the way an
//! attacker holding one captured request could.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use portaria::verify::{Settings, Verifier};
use serde_json::json;
use sha2::Sha256;

use crate::support::*;

const MP: &str = "mp-secret-signature";
const GITHUB: &str = "gh-secret";
const SHOPIFY: &str = "shpss_secret";
const LINEAR: &str = "lin_wh_secret";
const TWILIO: &str = "twilio-auth-token";
const TWILIO_URL: &str = "https://example.trycloudflare.com/webhooks/twilio";
const SVIX: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub(crate) const ADYEN: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const PAGBANK: &str = "PAGBANK-TOKEN-1";

fn config(db: &Path) -> String {
    let mut config = sqlite_config(db);
    for (name, secret, extra) in [
        ("mercadopago", MP, ""),
        ("github", GITHUB, ""),
        ("shopify", SHOPIFY, ""),
        ("linear", LINEAR, ""),
        ("twilio", TWILIO, &*format!("public_url = \"{TWILIO_URL}\"")),
        ("svix", SVIX, ""),
        ("adyen", ADYEN, ""),
        ("pagbank", PAGBANK, ""),
    ] {
        config = config.endpoint(
            &format!("/webhooks/{name}"),
            name,
            &format!("secret = \"{secret}\"\n{extra}"),
        );
    }
    config.text()
}

async fn start() -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = config(&db);
    TestServer::start_with(dir, db, &text).await
}

fn verifier(provider: &str, secret: &str) -> Verifier {
    let settings = Settings {
        public_url: (provider == "twilio").then_some(TWILIO_URL),
        ..Settings::default()
    };
    Verifier::with_settings(provider, &settings, &[secret.to_string()], None).unwrap()
}

/// A request as the provider sends it: its signed headers (and query), and the body.
struct Captured {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Captured {
    fn signed(provider: &str, secret: &str, body: &[u8], delivery: &str) -> Captured {
        let signed = verifier(provider, secret)
            .sign_request(body, now_secs(), delivery)
            .unwrap();
        let mut path = format!("/webhooks/{provider}");
        if let Some(query) = &signed.query {
            path = format!("{path}?{query}");
        }
        let mut headers = vec![h("content-type", "application/json")];
        headers.extend(signed.headers);
        Captured {
            path,
            headers,
            body: body.to_vec(),
        }
    }

    /// The same request with header `name` set to `value` (added if absent).
    fn with_header(&self, name: &str, value: &str) -> Captured {
        let mut headers: Vec<_> = self
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case(name))
            .cloned()
            .collect();
        headers.push(h(name, value));
        Captured {
            path: self.path.clone(),
            headers,
            body: self.body.clone(),
        }
    }

    fn with_body(&self, body: &[u8]) -> Captured {
        Captured {
            path: self.path.clone(),
            headers: self.headers.clone(),
            body: body.to_vec(),
        }
    }

    async fn post(&self, server: &TestServer) -> Reply {
        post(server.addr, &self.path, &self.headers, &self.body).await
    }
}

/// Posts `request`: answered `status`, and the endpoint holds `events` events afterwards.
async fn expect(server: &TestServer, request: &Captured, status: u16, events: i64, what: &str) {
    let reply = request.post(server).await;
    assert_eq!(reply.status, status, "{what}: {}", reply.body);
    let endpoint = request.path[10..].split('?').next().unwrap();
    assert_eq!(server.events_of(endpoint), events, "{what}");
}

fn mp_body(notification: i64, data_id: &str, action: &str) -> Vec<u8> {
    json!({"action": action, "api_version": "v1", "data": {"id": data_id},
           "id": notification, "live_mode": true, "type": "payment"})
    .to_string()
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_a_body_naming_another_payment_than_the_signature_is_refused() {
    let server = start().await;
    let genuine = Captured::signed(
        "mercadopago",
        MP,
        &mp_body(1001, "555", "payment.created"),
        "req-a",
    );
    assert!(genuine.path.ends_with("?data.id=555"), "{}", genuine.path);
    // The signed query names payment 555; the body names 556.
    let forged = genuine.with_body(&mp_body(1001, "556", "payment.created"));
    let reply = forged.post(&server).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("data.id"), "{}", reply.body);
    assert_eq!(server.events_of("mercadopago"), 0);
    // Spelled twice, so that a reader taking the first member sees 556.
    let twice = br#"{"data":{"id":"556"},"data":{"id":"555"},"id":1001,"type":"payment"}"#;
    expect(&server, &genuine.with_body(twice), 400, 0, "data twice").await;
    expect(&server, &genuine, 200, 1, "the genuine notification").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_a_captured_request_cannot_claim_a_later_notification() {
    let server = start().await;
    let created = Captured::signed(
        "mercadopago",
        MP,
        &mp_body(1001, "555", "payment.created"),
        "req-a",
    );
    expect(&server, &created, 200, 1, "payment.created").await;
    // The attacker re-posts the captured request with the notification id that the coming
    // `payment.updated` will carry (MP's ids are sequential enough to guess), and others.
    for notification in [1002, 1003, 99] {
        let forged = created.with_body(&mp_body(notification, "555", "payment.updated"));
        expect(&server, &forged, 200, 1, "a replay with a chosen body id").await;
    }
    // The genuine update: another request id, its own signature. A new event, forwarded.
    let updated = Captured::signed(
        "mercadopago",
        MP,
        &mp_body(1002, "555", "payment.updated"),
        "req-b",
    );
    expect(&server, &updated, 200, 2, "the genuine payment.updated").await;
    let body: String = server.one(
        "SELECT CAST(p.body AS TEXT) FROM payloads p JOIN events e ON e.id = p.event_id \
         WHERE e.endpoint = 'mercadopago' ORDER BY e.id DESC LIMIT 1",
    );
    assert!(body.contains("payment.updated"), "{body}");
    // Its retry with the same request id is a duplicate, whatever the body says.
    expect(&server, &updated, 200, 2, "the update's retry").await;
    let key: String = server.one(
        "SELECT dedup_key FROM events WHERE endpoint = 'mercadopago' ORDER BY id DESC LIMIT 1",
    );
    assert_eq!(key, "id:555;request-id:req-b;");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_without_a_query_id_signs_none_and_keys_on_the_request_id() {
    let server = start().await;
    // A body that is not JSON: MP's manifest then has no `id:` (the sender puts none in the
    // query), and the body is not checked against anything.
    let first = Captured::signed("mercadopago", MP, b"topic=payment", "req-1");
    assert_eq!(first.path, "/webhooks/mercadopago");
    expect(&server, &first, 200, 1, "no data.id").await;
    expect(
        &server,
        &first.with_body(b"topic=other"),
        200,
        1,
        "its body changed",
    )
    .await;
    let second = Captured::signed("mercadopago", MP, b"topic=payment", "req-2");
    expect(&server, &second, 200, 2, "another request id").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_shopify_and_linear_replays_with_new_delivery_ids_are_duplicates() {
    let server = start().await;
    let push = br#"{"ref":"refs/heads/main","after":"9f1c"}"#;
    let github = Captured::signed("github", GITHUB, push, "72d3162e-0001");
    expect(&server, &github, 200, 1, "github").await;
    for guid in ["72d3162e-0002", "anything"] {
        let replay = github.with_header("x-github-delivery", guid);
        expect(&server, &replay, 200, 1, "github, a new delivery GUID").await;
    }

    let order = br#"{"id":820982911946154508,"total_price":"10.00"}"#;
    let shopify =
        Captured::signed("shopify", SHOPIFY, order, "w-1").with_header("x-shopify-event-id", "e-1");
    expect(&server, &shopify, 200, 1, "shopify").await;
    let replay = shopify
        .with_header("x-shopify-event-id", "e-2")
        .with_header("x-shopify-webhook-id", "w-2");
    expect(&server, &replay, 200, 1, "shopify, new ids").await;

    let ms = now_secs() * 1000;
    let issue = |ms: i64| {
        format!(
            r#"{{"action":"create","type":"Issue","data":{{"id":"i1"}},"webhookTimestamp":{ms}}}"#
        )
    };
    let linear = Captured::signed("linear", LINEAR, issue(ms).as_bytes(), "d-1");
    expect(&server, &linear, 200, 1, "linear").await;
    let replay = linear.with_header("linear-delivery", "d-2");
    expect(&server, &replay, 200, 1, "linear, a new delivery id").await;
    // Linear's retry: signed again with a new `webhookTimestamp`, the same content.
    let retry = Captured::signed("linear", LINEAR, issue(ms + 1500).as_bytes(), "d-1");
    expect(&server, &retry, 200, 1, "linear's retry").await;
    let other = issue(ms).replace("create", "update");
    let update = Captured::signed("linear", LINEAR, other.as_bytes(), "d-3");
    expect(&server, &update, 200, 2, "another linear event").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_replays_with_a_new_token_or_a_respelled_form_are_duplicates() {
    let server = start().await;
    let form = b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309";
    let twilio = Captured::signed("twilio", TWILIO, form, "idem-1");
    twilio
        .headers
        .iter()
        .find(|(n, _)| n == "i-twilio-idempotency-token")
        .unwrap();
    expect(&server, &twilio, 200, 1, "twilio").await;
    let replays = [
        twilio.with_header("i-twilio-idempotency-token", "idem-2"),
        twilio.with_body(b"From=%2b14158675309&Digits=1234&Caller=%2B14158675309&CallSid=CA1234567890ABCDE"),
        twilio.with_body(b"CallSid=C%41%31234567890ABCDE&Caller=%2b14158675309&Digits=1234&From=%2B14158675309&Digits=1234"),
    ];
    for (i, replay) in replays.iter().enumerate() {
        let replay = replay.with_header("i-twilio-idempotency-token", &format!("idem-new-{i}"));
        expect(&server, &replay, 200, 1, &format!("twilio replay {i}")).await;
    }
    // A JSON body (its hash in the signed query) with a new token.
    let json = Captured::signed("twilio", TWILIO, br#"{"CallSid":"CA2"}"#, "idem-3");
    expect(&server, &json, 200, 2, "twilio json").await;
    let replay = json.with_header("i-twilio-idempotency-token", "idem-4");
    expect(&server, &replay, 200, 2, "twilio json, a new token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svix_replays_under_the_other_header_family_are_duplicates() {
    let server = start().await;
    let body = br#"{"type":"invoice.paid","data":{"id":"in_1"}}"#;
    let svix = Captured::signed("svix", SVIX, body, "msg_1");
    expect(&server, &svix, 200, 1, "svix").await;
    // The same signature under the `webhook-*` names (which the verifier reads first), and a
    // made-up `svix-id` beside them.
    let renamed: Vec<(String, String)> = svix
        .headers
        .iter()
        .map(|(n, v)| (n.replace("svix-", "webhook-"), v.clone()))
        .chain([h("svix-id", "msg_made_up")])
        .collect();
    let replay = Captured {
        path: svix.path.clone(),
        headers: renamed,
        body: body.to_vec(),
    };
    expect(&server, &replay, 200, 1, "svix, renamed").await;
    let key: String = server.one("SELECT dedup_key FROM events WHERE endpoint = 'svix'");
    assert_eq!(key, "msg_1");
}

/// A NotificationRequestItem signed as Adyen signs it (the HMAC key is hex).
pub(crate) fn adyen_item(psp: &str, value: i64) -> serde_json::Value {
    let fields = [
        psp,
        "",
        "PortariaBR",
        &format!("order-{psp}"),
        &value.to_string(),
        "BRL",
        "AUTHORISATION",
        "true",
    ];
    let key = hex::decode(ADYEN).unwrap();
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(fields.join(":").as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    json!({"NotificationRequestItem": {
        "additionalData": {"hmacSignature": signature},
        "amount": {"currency": "BRL", "value": value},
        "eventCode": "AUTHORISATION",
        "merchantAccountCode": "PortariaBR",
        "merchantReference": format!("order-{psp}"),
        "pspReference": psp,
        "success": "true"
    }})
}

/// A standard notification of these items.
pub(crate) fn adyen_body(items: &[&serde_json::Value]) -> Vec<u8> {
    json!({"live": "false", "notificationItems": items})
        .to_string()
        .into_bytes()
}

fn adyen(items: &[&serde_json::Value]) -> Captured {
    Captured {
        path: "/webhooks/adyen".to_string(),
        headers: vec![h("content-type", "application/json")],
        body: adyen_body(items),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adyen_batches_are_keyed_by_their_items_whatever_the_order_and_never_repeat_one() {
    let server = start().await;
    let a = adyen_item("7914073381342284", 1130);
    let b = adyen_item("8815407325143704", 2500);
    expect(&server, &adyen(&[&a]), 200, 1, "[A]").await;
    let reply = adyen(&[&a, &a]).post(&server).await;
    assert_eq!(reply.status, 400, "[A, A]: {}", reply.body);
    assert!(reply.body.contains("repeats item 1"), "{}", reply.body);
    assert_eq!(server.events_of("adyen"), 1);
    expect(&server, &adyen(&[&a, &b]), 200, 2, "[A, B]").await;
    expect(&server, &adyen(&[&b, &a]), 200, 2, "[B, A] after [A, B]").await;
}

/// Adyen signs each item on its own, so a batch can be cut out of another or put together
/// from several: a batch whose items are all known is a duplicate (200, not stored, not
/// forwarded), one with a new item a new event; a real target hears each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adyen_a_batch_of_known_items_is_a_duplicate_and_goes_out_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let target = Target::start(vec![200]).await;
    let text = sqlite_config(&db)
        .endpoint(
            "/webhooks/adyen",
            "adyen",
            &format!("secret = \"{ADYEN}\"\n{}", forward_to(target.addr)),
        )
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let [a, b, c, d, e] = ["1001", "1002", "1003", "1004", "1005"]
        .map(|psp| adyen_item(&format!("791407338134{psp}"), 1130));
    expect(&server, &adyen(&[&a, &b]), 200, 1, "[A, B]").await;
    expect(&server, &adyen(&[&a]), 200, 1, "[A] after [A, B]").await;
    expect(&server, &adyen(&[&b]), 200, 1, "[B] after [A, B]").await;
    expect(&server, &adyen(&[&b, &a]), 200, 1, "[B, A] after [A, B]").await;
    expect(&server, &adyen(&[&a, &c]), 200, 2, "[A, C]: C is new").await;
    expect(&server, &adyen(&[&c]), 200, 2, "[C] after [A, C]").await;
    expect(&server, &adyen(&[&d]), 200, 3, "[D]").await;
    expect(&server, &adyen(&[&e]), 200, 4, "[E]").await;
    expect(
        &server,
        &adyen(&[&e, &d]),
        200,
        4,
        "[E, D] after [D] and [E]",
    )
    .await;
    expect(
        &server,
        &adyen(&[&c, &b]),
        200,
        4,
        "[C, B] after [A, B] and [A, C]",
    )
    .await;
    // Each event delivered once; the duplicates were never stored, so nothing else can go.
    eventually(Duration::from_secs(20), "four events delivered", || {
        server.one::<i64>("SELECT count(*) FROM events WHERE status = 'delivered'") == 4
    })
    .await;
    assert_eq!(target.count(), 4);
    let keys: Vec<String> = server
        .db()
        .prepare("SELECT dedup_key FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let psp = |n: &str| format!("791407338134{n}:AUTHORISATION:true");
    assert_eq!(
        keys,
        [
            format!("{},{}", psp("1001"), psp("1002")),
            format!("{},{}", psp("1001"), psp("1003")),
            psp("1004"),
            psp("1005")
        ]
    );
    server.stop().await;
}

/// SHA-256 length extension: from `digest` = SHA-256(m) and |m| alone, the glue (m's padding)
/// and SHA-256(m || glue || `extra`), without m.
fn extend(digest: &[u8], len: usize, extra: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let padding = |len: usize| {
        let mut pad = vec![0x80];
        while (len + pad.len()) % 64 != 56 {
            pad.push(0);
        }
        pad.extend((len as u64 * 8).to_be_bytes());
        pad
    };
    let glue = padding(len);
    let mut state = [0u32; 8];
    for (word, bytes) in state.iter_mut().zip(digest.chunks(4)) {
        *word = u32::from_be_bytes(bytes.try_into().unwrap());
    }
    let mut tail = extra.to_vec();
    tail.extend(padding(len + glue.len() + extra.len()));
    let blocks: Vec<[u8; 64]> = tail.chunks(64).map(|b| b.try_into().unwrap()).collect();
    sha2::block_api::compress256(&mut state, &blocks);
    (glue, state.iter().flat_map(|w| w.to_be_bytes()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagbank_a_length_extended_forgery_is_refused() {
    let server = start().await;
    let body =
        b"notificationCode=766B9C-AD4B044B04DA-77742F5FA653-E1AB24&notificationType=transaction";
    let genuine = Captured::signed("pagbank", PAGBANK, body, "");
    expect(&server, &genuine, 200, 1, "pagbank").await;
    // What the attacker sees: the digest, and (a guess) the token's length.
    let seen = hex::decode(
        &genuine
            .headers
            .iter()
            .find(|(n, _)| n == "x-authenticity-token")
            .unwrap()
            .1,
    )
    .unwrap();
    let extra = b"&notificationCode=FORGED-0000-0000";
    let (glue, forged_digest) = extend(&seen, PAGBANK.len() + 1 + body.len(), extra);
    let mut forged_body = body.to_vec();
    forged_body.extend(&glue);
    forged_body.extend(extra);
    // The forgery is real: it is the digest the token gives, computed without the token.
    let real = portaria::digest::sha256(&[PAGBANK.as_bytes(), b"-", &forged_body]);
    assert_eq!(forged_digest, real);
    let forged = genuine
        .with_body(&forged_body)
        .with_header("x-authenticity-token", &hex::encode(&forged_digest));
    expect(&server, &forged, 401, 1, "the extended forgery").await;
}
