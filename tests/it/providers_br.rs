//! Brazilian gateways end to end: the real server, each preset's requests, oracles where a library exists.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use portaria::verify::Verifier;
use serde_json::json;
use sha2::{Digest, Sha256};

#[allow(unused_imports)]
use crate::support::*;

const MP_SECRET: &str = "mp-secret-signature";
const PAGBANK_TOKEN: &str = "PAGBANK-TOKEN-1";
const ASAAS_TOKEN: &str = "asaas-token-Zq81vX";
const CIELO_KEY: &str = "cielo-key-Hh27wR";
const CIELO_ID: &str = "cielo-id-Pp93mT";
const VINDI_BASIC: &str = "vindi:s3nh@-Kk40";
const VINDI_TOKEN: &str = "vindi-token-Jj55";
const EFI_SECRET: &str = "efi-hmac-Ll66nB";
const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const REDE_OLD: &str = "Bearer rede-old-Qq12";
const REDE_TOKEN: &str = "rede-token-Ww34eR";
const PICPAY_TOKEN: &str = "picpay-panel-Tt56yU";
const PICPAY_SELLER: &str = "4ef4edbd-5cda-42da-860b-0e8d7b90c784";
const IUGU_TOKEN: &str = "iugu-token-Ii78oP";
const WOOVI_HMAC: &str = "woovi-webhook-secret-Pp90";

/// One endpoint per preset; `extra` is added to the end (server tables must come first).
fn config(db: &Path, extra: &str) -> String {
    let secret = |s: &str| format!("secret = \"{s}\"");
    sqlite_config(db)
        .endpoint("/webhooks/mercadopago", "mercadopago", &secret(MP_SECRET))
        .endpoint("/webhooks/pagbank", "pagbank", &secret(PAGBANK_TOKEN))
        .endpoint("/webhooks/asaas", "asaas", &secret(ASAAS_TOKEN))
        .endpoint(
            "/webhooks/cielo",
            "cielo",
            &format!(
                "credential_headers = [\"X-Shop-Key\", \"X-Shop-Id\"]\n\
                 secrets = [\"{CIELO_KEY}\", \"{CIELO_ID}\"]"
            ),
        )
        .endpoint(
            "/webhooks/vindi",
            "vindi",
            &format!("secrets = [\"{VINDI_BASIC}\", \"{VINDI_TOKEN}\"]"),
        )
        .endpoint("/webhooks/efi", "efi", &secret(EFI_SECRET))
        .endpoint("/webhooks/adyen", "adyen", &secret(ADYEN_KEY))
        .endpoint(
            "/webhooks/rede",
            "rede",
            &format!("secrets = [\"{REDE_OLD}\", \"{REDE_TOKEN}\"]"),
        )
        .endpoint("/webhooks/picpay", "picpay", &secret(PICPAY_TOKEN))
        .endpoint(
            "/webhooks/picpay-legacy",
            "picpay",
            &format!(
                "credential_headers = [\"x-seller-token\"]\n{}",
                secret(PICPAY_SELLER)
            ),
        )
        .endpoint(
            "/webhooks/iugu",
            "iugu",
            &format!("{}\nallow_ips = [\"127.0.0.1/32\"]", secret(IUGU_TOKEN)),
        )
        .endpoint(
            "/webhooks/woovi",
            "woovi",
            &format!(
                "public_key_file = \"{}/tests/fixtures/woovi/public-key.pem\"\n{}",
                env!("CARGO_MANIFEST_DIR"),
                secret(WOOVI_HMAC)
            ),
        )
        .then(extra)
        .text()
}

async fn start() -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = config(&db, "");
    TestServer::start_with(dir, db, &text).await
}

/// Posts the same request twice (200 both times, stored once: one row more for `endpoint`
/// at most), then `tampered` (401, nothing stored).
async fn accepted_once_and_tampered_refused(
    server: &TestServer,
    endpoint: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
    tampered: (&str, &[(String, String)], &[u8]),
) {
    let before = server.events_of(endpoint);
    for _ in 0..2 {
        let reply = post(server.addr, path, headers, body).await;
        assert_eq!(reply.status, 200, "{endpoint}: {}", reply.body);
    }
    let after = server.events_of(endpoint);
    assert!(
        after == before + 1 || after == before && before > 0,
        "{endpoint}: {after}"
    );
    let (path, headers, body) = tampered;
    let reply = post(server.addr, path, headers, body).await;
    assert_eq!(reply.status, 401, "{endpoint} tampered: {}", reply.body);
    assert_eq!(server.events_of(endpoint), after, "{endpoint}");
}

fn mp_headers(signature: &str, request_id: &str) -> Vec<(String, String)> {
    vec![
        h("content-type", "application/json"),
        h("x-signature", signature),
        h("x-request-id", request_id),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_signed_as_the_sdk_checks_it_is_stored_once() {
    let server = start().await;
    let ts = now_secs().to_string();
    let request_id = "2066ca19-c6f1-498a-be75-1923005edd06";
    let body = br#"{"action":"payment.updated","api_version":"v1","data":{"id":"123456"},"id":987654,"live_mode":false,"type":"payment"}"#;
    let manifest = format!("id:123456;request-id:{request_id};ts:{ts};");
    let signature = format!("ts={ts},v1={}", hmac_hex(MP_SECRET, &[manifest.as_bytes()]));
    let oracle = |signature: &str, data_id: &str| {
        crate::support::oracle::run(
            "mercadopago_validate.py",
            &json!({"secret": MP_SECRET, "x_signature": signature,
                    "x_request_id": request_id, "data_id": data_id}),
        )
    };
    if let Some(answer) = oracle(&signature, "123456") {
        assert_eq!(answer["valid"], true, "{answer}");
        assert_eq!(oracle(&signature, "123457").unwrap()["valid"], false);
    }
    let headers = mp_headers(&signature, request_id);
    accepted_once_and_tampered_refused(
        &server,
        "mercadopago",
        "/webhooks/mercadopago?data.id=123456&type=payment",
        &headers,
        body,
        (
            "/webhooks/mercadopago?data.id=123457&type=payment",
            &headers,
            body,
        ),
    )
    .await;
    // The signed manifest without its timestamp, not the body's unsigned `id` (signed_dedup.rs).
    let key: String = server.one("SELECT dedup_key FROM events WHERE endpoint = 'mercadopago'");
    assert_eq!(key, format!("id:123456;request-id:{request_id};"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_signatures_portaria_makes_pass_the_sdk() {
    // What `portaria send` would add: headers and a `data.id` query string.
    let v = Verifier::new("mercadopago", None, &[MP_SECRET.to_string()], None).unwrap();
    let body = br#"{"data":{"id":"ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"},"id":1,"type":"order"}"#;
    let signed = v.sign_request(body, now_secs(), "req-1").unwrap();
    assert_eq!(
        signed.query.as_deref(),
        Some("data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3")
    );
    let answer = crate::support::oracle::run(
        "mercadopago_validate.py",
        &json!({"secret": MP_SECRET, "x_signature": signed.headers[0].1,
                "x_request_id": "req-1", "data_id": "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"}),
    );
    if let Some(answer) = answer {
        assert_eq!(answer["valid"], true, "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagbank_plain_digest_is_stored_once() {
    let server = start().await;
    let body = br#"{"id":"ORDE_9F1","charges":[{"id":"CHAR_1","status":"PAID"}]}"#;
    let digest = |body: &[u8]| {
        let mut hasher = Sha256::new();
        hasher.update(format!("{PAGBANK_TOKEN}-").as_bytes());
        hasher.update(body);
        hex::encode(hasher.finalize())
    };
    let headers = vec![
        h("content-type", "application/json"),
        h("x-authenticity-token", digest(body)),
    ];
    let mut changed = body.to_vec();
    changed[10] ^= 1;
    accepted_once_and_tampered_refused(
        &server,
        "pagbank",
        "/webhooks/pagbank",
        &headers,
        body,
        ("/webhooks/pagbank", &headers, &changed),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asaas_and_cielo_credentials_admit_and_refuse() {
    let server = start().await;
    let body = br#"{"id":"evt_6f3c1","event":"PAYMENT_RECEIVED","payment":{"id":"pay_1"}}"#;
    let good = vec![h("asaas-access-token", ASAAS_TOKEN)];
    let wrong = vec![h("asaas-access-token", "asaas-token-Zq81vY")];
    accepted_once_and_tampered_refused(
        &server,
        "asaas",
        "/webhooks/asaas",
        &good,
        body,
        ("/webhooks/asaas", &wrong, body),
    )
    .await;
    let missing = post(server.addr, "/webhooks/asaas", &[], body).await;
    assert_eq!(missing.status, 401);

    let body = br#"{"PaymentId":"24bc8366-fc31-4d6c-8555-17049a836a07","ChangeType":1}"#;
    let good = vec![h("X-Shop-Key", CIELO_KEY), h("X-Shop-Id", CIELO_ID)];
    let one_wrong = vec![h("X-Shop-Key", CIELO_KEY), h("X-Shop-Id", CIELO_KEY)];
    accepted_once_and_tampered_refused(
        &server,
        "cielo",
        "/webhooks/cielo",
        &good,
        body,
        ("/webhooks/cielo", &one_wrong, body),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vindi_takes_basic_or_the_token_and_efi_its_hmac_parameter() {
    let server = start().await;
    let body = br#"{"event":{"type":"bill_paid","created_at":"2026-11-30T08:00:00.000-03:00","data":{"bill":{"id":7}}}}"#;
    let basic = vec![h(
        "authorization",
        format!("Basic {}", STANDARD.encode(VINDI_BASIC)),
    )];
    let wrong = vec![h(
        "authorization",
        format!("Basic {}", STANDARD.encode("vindi:s3nh@-Kk41")),
    )];
    accepted_once_and_tampered_refused(
        &server,
        "vindi",
        "/webhooks/vindi",
        &basic,
        body,
        ("/webhooks/vindi", &wrong, body),
    )
    .await;
    let path = format!("/webhooks/vindi?token={VINDI_TOKEN}");
    let other = br#"{"event":{"type":"bill_created","data":{"bill":{"id":8}}}}"#;
    assert_eq!(post(server.addr, &path, &[], other).await.status, 200);
    assert_eq!(server.events_of("vindi"), 2);
    let bad = post(
        server.addr,
        "/webhooks/vindi?token=vindi-token-Jj56",
        &[],
        other,
    )
    .await;
    assert_eq!(bad.status, 401);

    // Registered as `...?hmac=<secret>&ignorar=`, Efí calls it with `/pix` in `ignorar`.
    let body = br#"{"pix":[{"endToEndId":"E09089356202611300800abcdef1234","txid":"7978c0c97ea847e78e8849634473c1f1","valor":"110.00"}]}"#;
    let path = format!("/webhooks/efi?hmac={EFI_SECRET}&ignorar=/pix");
    accepted_once_and_tampered_refused(
        &server,
        "efi",
        &path,
        &[h("content-type", "application/json")],
        body,
        ("/webhooks/efi?hmac=efi-hmac-Ll66nC&ignorar=/pix", &[], body),
    )
    .await;
    let key: String = server.one("SELECT dedup_key FROM events WHERE endpoint = 'efi'");
    assert_eq!(key, "E09089356202611300800abcdef1234");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_efi_endpoint_stores_a_pix_posted_to_its_path_plus_pix_and_with_ignorar() {
    // The endpoint is at `/webhooks/efi`, the URL the docs show; Efí appends `/pix`.
    let server = start().await;
    let pix = |id: &str| format!(r#"{{"pix":[{{"endToEndId":"{id}","valor":"1.00"}}]}}"#);
    let appended = format!("/webhooks/efi/pix?hmac={EFI_SECRET}");
    let reply = post(server.addr, &appended, &[], pix("E1").as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let ignored = format!("/webhooks/efi?hmac={EFI_SECRET}&ignorar=/pix");
    let reply = post(server.addr, &ignored, &[], pix("E2").as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.events_of("efi"), 2);
    let keys: String =
        server.one("SELECT group_concat(dedup_key, ' ') FROM events WHERE endpoint = 'efi'");
    assert_eq!(keys, "E1 E2");
    // The same Pix on the other path is the same event; the credential still counts there.
    let reply = post(server.addr, &appended, &[], pix("E2").as_bytes()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(server.events_of("efi"), 2);
    let wrong = "/webhooks/efi/pix?hmac=efi-hmac-Ll66nC";
    assert_eq!(
        post(server.addr, wrong, &[], pix("E3").as_bytes())
            .await
            .status,
        401
    );
    // Nothing else below the path.
    for elsewhere in [
        "/webhooks/efi/pix/pix",
        "/webhooks/efi/pixx",
        "/webhooks/efi/x",
    ] {
        let target = format!("{elsewhere}?hmac={EFI_SECRET}");
        let reply = post(server.addr, &target, &[], pix("E4").as_bytes()).await;
        assert_eq!(reply.status, 404, "{elsewhere}");
    }
    assert_eq!(server.events_of("efi"), 2);
}

/// The event type, object id and dedup key of `endpoint`'s events, oldest first, `;`-joined.
fn described(server: &TestServer, endpoint: &str) -> String {
    server.one(&format!(
        "SELECT group_concat(coalesce(event_type, '-') || ' ' || coalesce(object_id, '-') || ' ' \
         || dedup_key, '; ') FROM (SELECT * FROM events WHERE endpoint = '{endpoint}' ORDER BY id)"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rede_answers_its_probe_and_takes_its_authorization_in_either_spelling() {
    let server = start().await;
    // Rede's GET when the URL is registered: 200, nothing stored. Other presets: 405.
    let probe = send(server.addr, "GET", "/webhooks/rede", &[], b"").await;
    assert_eq!(probe.status, 200, "{}", probe.body);
    assert_eq!(server.events_of("rede"), 0);
    assert_eq!(
        send(server.addr, "GET", "/webhooks/asaas", &[], b"")
            .await
            .status,
        405
    );
    assert_eq!(
        send(server.addr, "PUT", "/webhooks/rede", &[], b"")
            .await
            .status,
        405
    );

    let paid = br#"{"id":"n1","companyNumber":"12345678","events":["PV.UPDATE_TRANSACTION_PIX"],"data":{"id":"TID1234567890","txid":"t1"}}"#;
    let bearer = vec![h("authorization", format!("Bearer {REDE_TOKEN}"))];
    let changed = vec![h("authorization", "Bearer rede-token-Ww34eS")];
    accepted_once_and_tampered_refused(
        &server,
        "rede",
        "/webhooks/rede",
        &bearer,
        paid,
        ("/webhooks/rede", &changed, paid),
    )
    .await;
    // The refund of that TID is another event; the old secret (rotation), spelled as
    // registered, still admits; another credential or none does not.
    let refund = br#"{"events":["PV.REFUND_PIX"],"data":{"id":"TID1234567890"}}"#;
    let old = [h("authorization", REDE_OLD)];
    assert_eq!(
        post(server.addr, "/webhooks/rede", &old, refund)
            .await
            .status,
        200
    );
    let bare = [h("authorization", REDE_TOKEN)];
    assert_eq!(
        post(server.addr, "/webhooks/rede", &bare, refund)
            .await
            .status,
        200
    );
    let other = [h("authorization", "Bearer someone-else")];
    assert_eq!(
        post(server.addr, "/webhooks/rede", &other, refund)
            .await
            .status,
        401
    );
    assert_eq!(
        post(server.addr, "/webhooks/rede", &[], refund)
            .await
            .status,
        401
    );
    assert_eq!(
        described(&server, "rede"),
        "PV.UPDATE_TRANSACTION_PIX TID1234567890 PV.UPDATE_TRANSACTION_PIX:TID1234567890; \
         PV.REFUND_PIX TID1234567890 PV.REFUND_PIX:TID1234567890"
    );
    let signed: i64 = server.one("SELECT max(event_type_signed) FROM events");
    assert_eq!(signed, 0, "nothing signs Rede's body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picpay_takes_its_panel_token_or_the_legacy_seller_token() {
    let server = start().await;
    let body = br#"{"event_type":"PAYMENT_LINK_PAID","merchantChargeId":"c-1"}"#;
    let good = vec![h("authorization", PICPAY_TOKEN)];
    let changed = vec![h("authorization", "picpay-panel-Tt56yV")];
    accepted_once_and_tampered_refused(
        &server,
        "picpay",
        "/webhooks/picpay",
        &good,
        body,
        ("/webhooks/picpay", &changed, body),
    )
    .await;
    let seller = [h("x-seller-token", PICPAY_SELLER)];
    // The seller token is not the panel endpoint's credential.
    assert_eq!(
        post(server.addr, "/webhooks/picpay", &seller, body)
            .await
            .status,
        401
    );

    let legacy = br#"{"referenceId":"102030","authorizationId":"555008cef7f321d00ef236333"}"#;
    let wrong = vec![h("x-seller-token", "4ef4edbd-5cda-42da-860b-0e8d7b90c785")];
    accepted_once_and_tampered_refused(
        &server,
        "picpay-legacy",
        "/webhooks/picpay-legacy",
        &seller,
        legacy,
        ("/webhooks/picpay-legacy", &wrong, legacy),
    )
    .await;
    assert!(described(&server, "picpay").starts_with("PAYMENT_LINK_PAID - "));
    assert!(described(&server, "picpay-legacy").starts_with("- 102030 "));
    let headers: Vec<u8> = server.one(
        "SELECT headers FROM payloads WHERE event_id = \
         (SELECT id FROM events WHERE endpoint = 'picpay-legacy')",
    );
    let headers = String::from_utf8(headers).unwrap();
    assert!(headers.contains("x-seller-token: [redacted]"), "{headers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iugu_takes_its_url_token_from_its_address_and_reads_its_form() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    // A second iugu endpoint whose allowed address is not this test's.
    let elsewhere = format!(
        "[[endpoint]]\npath = \"/webhooks/iugu-far\"\nprovider = \"iugu\"\nsecret = \"{IUGU_TOKEN}\"\n\
         allow_ips = [\"98.82.243.132/32\"]\n"
    );
    let server = TestServer::start_with(dir, db.clone(), &config(&db, &elsewhere)).await;
    let form = b"event=invoice.status_changed&data%5Bid%5D=899E76B431864AAB854977026372A704&data%5Bstatus%5D=paid&data%5Baccount_id%5D=42591B1C";
    let headers = vec![h("content-type", "application/x-www-form-urlencoded")];
    let path = format!("/webhooks/iugu?token={IUGU_TOKEN}");
    accepted_once_and_tampered_refused(
        &server,
        "iugu",
        &path,
        &headers,
        form,
        ("/webhooks/iugu?token=iugu-token-Ii78oQ", &headers, form),
    )
    .await;
    let pending = b"event=invoice.status_changed&data[id]=899E76B431864AAB854977026372A704&data[status]=pending";
    assert_eq!(
        post(server.addr, &path, &headers, pending).await.status,
        200
    );
    assert_eq!(
        post(server.addr, "/webhooks/iugu", &headers, pending)
            .await
            .status,
        401
    );
    assert_eq!(
        described(&server, "iugu"),
        "invoice.status_changed 899E76B431864AAB854977026372A704 \
         invoice.status_changed:899E76B431864AAB854977026372A704:paid; \
         invoice.status_changed 899E76B431864AAB854977026372A704 \
         invoice.status_changed:899E76B431864AAB854977026372A704:pending"
    );
    let far = format!("/webhooks/iugu-far?token={IUGU_TOKEN}");
    assert_eq!(post(server.addr, &far, &headers, form).await.status, 403);
    // The token is in no stored byte.
    let db_bytes = std::fs::read(&db).unwrap();
    let wal = std::fs::read(db.with_extension("db-wal")).unwrap_or_default();
    for bytes in [db_bytes, wal] {
        assert!(!String::from_utf8_lossy(&bytes).contains(IUGU_TOKEN));
    }
}

/// Woovi's published example: the payload of its PHP sample, signed with its production key.
const WOOVI_PAYLOAD: &[u8] = include_bytes!("../fixtures/woovi/charge-completed.json");
const WOOVI_SIGNATURE: &str = "lL2nnXgmLFGgxJ8+jCDguqouU4ucrIxYJcU5SPrJFaNcJajTJHYVldqc/z4YFIjAjtPEALe699WosgPY08W7CLpidvtm06Qwa4YMB0l/DcTS93O91NdSH/adjugEKiOb76Zj/0jB8mqOmWCFYbweOBa17bssuEkd5Lw7Q5L314Y=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn woovi_signed_by_woovi_or_by_the_webhook_secret_is_stored_once() {
    let mut changed = WOOVI_PAYLOAD.to_vec();
    changed[500] ^= 1;
    // Woovi's own SDK agrees: its example is valid, a changed byte is not.
    let oracle = |body: &[u8]| {
        let input = json!({"body": String::from_utf8_lossy(body), "signature": WOOVI_SIGNATURE});
        crate::support::oracle::run("woovi_webhook.mjs", &input)
    };
    if let Some(answer) = oracle(WOOVI_PAYLOAD) {
        assert_eq!(answer["valid"], true, "{answer}");
        assert_eq!(oracle(&changed).unwrap()["valid"], false);
    }
    let server = start().await;
    let rsa = vec![
        h("content-type", "application/json"),
        h("x-webhook-signature", WOOVI_SIGNATURE),
    ];
    accepted_once_and_tampered_refused(
        &server,
        "woovi",
        "/webhooks/woovi",
        &rsa,
        WOOVI_PAYLOAD,
        ("/webhooks/woovi", &rsa, &changed),
    )
    .await;
    // The deprecated HMAC-SHA1 form, with the webhook's secret (this endpoint has both).
    let body = br#"{"event":"OPENPIX:CHARGE_COMPLETED","charge":{"correlationID":"c-9","status":"COMPLETED"},"pix":{"endToEndId":"E9"}}"#;
    let hmac = |secret: &str| {
        let mut mac =
            <hmac::Hmac<sha1::Sha1> as hmac::KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
        hmac::Mac::update(&mut mac, body);
        vec![h(
            "x-openpix-signature",
            STANDARD.encode(hmac::Mac::finalize(mac).into_bytes()),
        )]
    };
    let wrong = hmac("woovi-webhook-secret-Pp91");
    accepted_once_and_tampered_refused(
        &server,
        "woovi",
        "/webhooks/woovi",
        &hmac(WOOVI_HMAC),
        body,
        ("/webhooks/woovi", &wrong, body),
    )
    .await;
    let example_key = hex::encode(Sha256::digest(WOOVI_PAYLOAD));
    assert_eq!(
        described(&server, "woovi"),
        format!(
            "- 417bae21-3d08-4cdb-9c2d-fee63c89e9e4 {example_key}; \
             OPENPIX:CHARGE_COMPLETED c-9 OPENPIX:CHARGE_COMPLETED:c-9:E9"
        )
    );
    let signed: i64 =
        server.one("SELECT min(event_type_signed) FROM events WHERE endpoint = 'woovi'");
    assert_eq!(signed, 1, "Woovi signs the body its type is read from");
}

/// A NotificationRequestItem without its signature.
fn adyen_item(psp: &str, event: &str, value: i64) -> serde_json::Value {
    json!({
        "amount": {"currency": "BRL", "value": value},
        "eventCode": event,
        "eventDate": "2026-11-30T08:00:00+01:00",
        "merchantAccountCode": "PortariaBR",
        "merchantReference": format!("order-{psp}"),
        "paymentMethod": "pix",
        "pspReference": psp,
        "reason": "",
        "success": "true"
    })
}

/// The item with the signature Adyen's library computes (None when it is not installed).
fn adyen_signed(item: serde_json::Value) -> Option<serde_json::Value> {
    let answer =
        crate::support::oracle::run("adyen_hmac.py", &json!({"key": ADYEN_KEY, "item": item}))?;
    let mut item = item;
    item["additionalData"] = json!({"hmacSignature": answer["signature"]});
    Some(json!({"NotificationRequestItem": item}))
}

fn adyen_body(items: &[serde_json::Value]) -> Vec<u8> {
    json!({"live": "false", "notificationItems": items})
        .to_string()
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adyen_items_signed_by_the_library_are_accepted_and_answered() {
    let Some(first) = adyen_signed(adyen_item("QFQTPCQ8HXSKGK82", "AUTHORISATION", 12990)) else {
        return;
    };
    let second = adyen_signed(adyen_item("ZX9LK2M4N6P8Q0R2", "CAPTURE", 500)).unwrap();
    let server = start().await;
    let body = adyen_body(&[first.clone(), second.clone()]);
    let answer = crate::support::oracle::run(
        "adyen_hmac.py",
        &json!({"key": ADYEN_KEY, "notification": serde_json::from_slice::<serde_json::Value>(&body).unwrap()}),
    )
    .unwrap();
    assert_eq!(answer["valid"], true, "the library agrees: {answer}");
    let headers = vec![h("content-type", "application/json")];
    let reply = post(server.addr, "/webhooks/adyen", &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, "[accepted]");
    assert_eq!(reply.headers["content-type"], "text/plain");
    assert_eq!(server.events_of("adyen"), 1);
    let mut bad = second;
    bad["NotificationRequestItem"]["amount"]["value"] = json!(501);
    let tampered = adyen_body(&[first, bad]);
    accepted_once_and_tampered_refused(
        &server,
        "adyen",
        "/webhooks/adyen",
        &headers,
        &body,
        ("/webhooks/adyen", &headers, &tampered),
    )
    .await;
    let key: String = server.one("SELECT dedup_key FROM events WHERE endpoint = 'adyen'");
    assert_eq!(
        key,
        "QFQTPCQ8HXSKGK82:AUTHORISATION:true,ZX9LK2M4N6P8Q0R2:CAPTURE:true"
    );

    // The header variant (Balance Platform, Management API): over the raw body.
    let payload = r#"{"type":"balancePlatform.accountHolder.created","environment":"test","data":{"accountHolder":{"id":"AH3227C223222C5GXQXF658WB"}}}"#;
    let answer = crate::support::oracle::run(
        "adyen_hmac.py",
        &json!({"key": ADYEN_KEY, "payload": payload}),
    )
    .unwrap();
    let signature = answer["signature"].as_str().unwrap().to_string();
    let headers = vec![
        h("content-type", "application/json"),
        h("HmacSignature", signature.as_str()),
    ];
    let changed = payload.replace("test", "live");
    accepted_once_and_tampered_refused(
        &server,
        "adyen",
        "/webhooks/adyen",
        &headers,
        payload.as_bytes(),
        ("/webhooks/adyen", &headers, changed.as_bytes()),
    )
    .await;
    assert_eq!(server.events_of("adyen"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_preset_accepts_what_portaria_signs() {
    // What `portaria send` sends: `Verifier::sign_request`'s headers and query string.
    let server = start().await;
    let text = std::fs::read_to_string(server.config_path()).unwrap();
    let config = portaria::config::Config::parse(
        &text,
        portaria::config::Source::File(server.config_path()),
    )
    .unwrap();
    for (n, endpoint) in config.endpoints.iter().enumerate() {
        let body = format!(
            r#"{{"id":"evt_{n}","data":{{"id":"d{n}"}},"pix":[{{"endToEndId":"E{n}"}}],"notificationItems":[]}}"#
        );
        let signed = endpoint
            .verifier
            .sign_request(body.as_bytes(), now_secs(), "dlv-1")
            .unwrap();
        let path = match &signed.query {
            Some(query) => format!("{}?{query}", endpoint.path),
            None => endpoint.path.clone(),
        };
        let reply = post(server.addr, &path, &signed.headers, body.as_bytes()).await;
        assert_eq!(reply.status, 200, "{}: {}", endpoint.name, reply.body);
    }
    assert_eq!(server.count_rows(), config.endpoints.len() as i64);
}

/// A forward command that dumps its stdin and its whole environment.
fn dumper(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("dump.sh");
    let script = format!(
        // The env file appears whole (written aside, then renamed): the test waits for it.
        "#!/bin/sh\ncat > '{d}/stdin.'\"$PORTARIA_EVENT_ID\"\nenv > '{d}/env.tmp.'\"$PORTARIA_EVENT_ID\"\n\
         mv '{d}/env.tmp.'\"$PORTARIA_EVENT_ID\" '{d}/env.'\"$PORTARIA_EVENT_ID\"\n",
        d = dir.display()
    );
    write_executable(&path, script);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asaas_and_cielo_credentials_are_stored_logged_and_forwarded_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let dump = dumper(dir.path());
    let forward = format!("forward = {{ command = [\"{}\"] }}", dump.display());
    // The asaas token comes from the environment, which the forward command must not see.
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/asaas"
provider = "asaas"
secret_env = "PORTARIA_TEST_ASAAS_TOKEN"
{forward}

[[endpoint]]
path = "/webhooks/cielo"
provider = "cielo"
credential_headers = ["X-Shop-Key", "X-Shop-Id"]
secrets = ["{CIELO_KEY}", "{CIELO_ID}"]
{forward}
"#,
        db = db.display()
    );
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, text).unwrap();
    let mut serve = portaria();
    serve
        .env("RUST_LOG", "trace")
        .env("PORTARIA_TEST_ASAAS_TOKEN", ASAAS_TOKEN)
        .args(["serve", "--config"])
        .arg(&config);
    let mut server = Process::spawn_command(serve).await;

    let asaas = br#"{"id":"evt_1","event":"PAYMENT_CONFIRMED"}"#;
    let cielo = br#"{"PaymentId":"5fb4d606-bb63-4423-af02-4bdcd3b8bd7e","ChangeType":1}"#;
    let token = [h("asaas-access-token", ASAAS_TOKEN)];
    let reply = post(server.addr, "/webhooks/asaas", &token, asaas).await;
    assert_eq!(reply.status, 200);
    let pair = [h("X-Shop-Key", CIELO_KEY), h("X-Shop-Id", CIELO_ID)];
    let reply = post(server.addr, "/webhooks/cielo", &pair, cielo).await;
    assert_eq!(reply.status, 200);
    // A near miss is refused; its log line must not show the secret either.
    let near = vec![h(
        "asaas-access-token",
        &ASAAS_TOKEN[..ASAAS_TOKEN.len() - 1],
    )];
    assert_eq!(
        post(server.addr, "/webhooks/asaas", &near, asaas)
            .await
            .status,
        401
    );

    let dumped = |id: i64| dir.path().join(format!("env.{id}")).exists();
    eventually(Duration::from_secs(20), "both events forwarded", || {
        dumped(1) && dumped(2)
    })
    .await;
    let secrets = [ASAAS_TOKEN, CIELO_KEY, CIELO_ID];
    let assert_clean = |what: &str, bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        for secret in secrets {
            assert!(!text.contains(secret), "{secret} in {what}: {text}");
        }
    };
    // While the server runs, the WAL holds the newest pages.
    let wal = dir.path().join("portaria.db-wal");
    assert!(wal.exists(), "a running server has a WAL");
    assert_clean("the WAL", &std::fs::read(&wal).unwrap());
    assert_clean("the database", &std::fs::read(&db).unwrap());
    for id in [1, 2] {
        let stdin = std::fs::read(dir.path().join(format!("stdin.{id}"))).unwrap();
        assert!(stdin.starts_with(b"{"), "the body reached the command");
        assert_clean("the forward command's stdin", &stdin);
        let env = std::fs::read_to_string(dir.path().join(format!("env.{id}"))).unwrap();
        assert!(env.contains(&format!("PORTARIA_EVENT_ID={id}")), "{env}");
        assert!(!env.contains("PORTARIA_TEST_ASAAS_TOKEN"), "{env}");
        assert_clean("the forward command's environment", env.as_bytes());

        let out = run_cli(&["events", "show", &id.to_string()], &config);
        let shown = ok_stdout(&out);
        assert!(shown.contains("[redacted]"), "{shown}");
        assert_clean("`portaria events show`", shown.as_bytes());
        assert_clean("`portaria events show` stderr", &out.stderr);
    }
    let shown = ok_stdout(&run_cli(&["events", "show", "2"], &config));
    assert!(shown.contains("x-shop-key: [redacted]"), "{shown}");
    assert!(shown.contains("x-shop-id: [redacted]"), "{shown}");

    server.signal(libc::SIGTERM);
    assert!(server.wait(Duration::from_secs(20)).await.success());
    assert_clean("the database after shutdown", &std::fs::read(&db).unwrap());
    if wal.exists() {
        assert_clean("the WAL after shutdown", &std::fs::read(&wal).unwrap());
    }
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("webhook body"), "trace logging is on: {log}");
    assert!(log.contains("bad_signature"), "{log}");
    assert_clean("the server's log at trace level", log.as_bytes());
}
