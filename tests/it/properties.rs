//! Property tests (proptest) over every preset that signs with a shared secret: what it signs
//! it verifies, for any body, delivery id and clock within the window; a changed byte in the
//! body or in a signature header never verifies (and never panics); a verified request never
//! panics the dedup key or the description ingest derives from it.
//!
//! Cases per property: 256 by default (each case tries every preset), about a second in all.
//! A long run: `PROPTEST_CASES=10000 cargo test properties`.

use http::{HeaderMap, HeaderName, HeaderValue};
use portaria::ingest::{Sources, describe, describe_with};
use portaria::verify::{HmacOptions, PROVIDERS, Request, Settings, Signed, Verifier, VerifyError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

const PUBLIC_URL: &str = "https://example.trycloudflare.com/webhooks/properties";

/// Providers whose signature does not cover the body: a credential (a token, a header set,
/// Basic auth, a query secret), or Mercado Pago's manifest (the `data.id` of the query string,
/// the request id and the timestamp). A changed body still carries the right signature, so
/// only their headers are changed.
const BODY_NOT_SIGNED: &[&str] = &[
    "asaas",
    "cielo",
    "vindi",
    "efi",
    "mercadopago",
    "rede",
    "picpay",
    "iugu",
];

/// Headers a signer sends that are not signed, by the provider's own design (ids and event
/// names read for dedup and logs, under the signature's protection only where a scheme signs
/// them): a changed byte there may still verify. Every other header the signer sends must not.
const UNSIGNED_HEADERS: &[&str] = &[
    "x-github-delivery",
    "x-github-event",
    "linear-delivery",
    "x-shopify-event-id",
    "x-shopify-webhook-id",
    "x-wc-webhook-delivery-id",
    "x-relya-event-type",
    "i-twilio-idempotency-token",
];

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        // Failures are reported with their input; no regression files in the tree.
        failure_persistence: None,
        ..Config::default()
    }
}

/// A verifier for `provider` with two secrets (the first signs), set up as the unit tests
/// set theirs up; None for a provider that verifies with a public key only.
fn verifier(provider: &str) -> Option<Verifier> {
    // Woovi's HMAC form takes a secret; its RSA form, like the others here, only a public key.
    let hmac_too = ["woovi", "openpix"].contains(&provider);
    if !portaria::verify::takes_secret(provider) && !hmac_too {
        return None;
    }
    let options = HmacOptions {
        header: "X-Signature".to_string(),
        algorithm: Some("sha512".to_string()),
        encoding: Some("base64".to_string()),
        prefix: Some("v1=".to_string()),
        timestamp_header: Some("X-Timestamp".to_string()),
        template: Some("{header:x-timestamp}.{header:x-delivery}.{body}".to_string()),
    };
    let names = ["X-Shop-Key".to_string(), "X-Shop-Id".to_string()];
    let mut settings = Settings::default();
    let secrets: Vec<String> = match provider {
        "hmac" => {
            settings.hmac = Some(&options);
            vec!["first-secret".into(), "second-secret".into()]
        }
        "twilio" | "square" => {
            settings.public_url = Some(PUBLIC_URL);
            vec!["first-secret".into(), "second-secret".into()]
        }
        "cielo" => {
            settings.credential_headers = Some(&names);
            vec!["key-abc".into(), "id-42".into()]
        }
        "adyen" => vec![
            "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056".into(),
            "00112233445566778899aabbccddeeff".into(),
        ],
        "standard-webhooks" | "svix" => vec![
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into(),
        ],
        _ => vec!["first-secret".into(), "second-secret".into()],
    };
    let v = Verifier::with_settings(provider, &settings, &secrets, None)
        .unwrap_or_else(|e| panic!("{provider}: {e}"));
    Some(v)
}

fn signers() -> Vec<Verifier> {
    let all: Vec<Verifier> = PROVIDERS.iter().filter_map(|p| verifier(p)).collect();
    assert_eq!(all.len(), PROVIDERS.len() - 2, "every shared-secret preset");
    all
}

fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("a signer's header name");
        let value = HeaderValue::from_str(value).expect("a signer's header value");
        map.append(name, value);
    }
    map
}

/// A request as the signer sends it, at `signed_at`, checked at `now`.
struct Sent {
    signed: Signed,
    body: Vec<u8>,
}

impl Sent {
    fn new(v: &Verifier, body: &[u8], signed_at: i64, delivery_id: &str) -> Sent {
        let signed = v
            .sign_request(body, signed_at, delivery_id)
            .unwrap_or_else(|| panic!("{} signs with a shared secret", v.provider()));
        Sent {
            signed,
            body: body.to_vec(),
        }
    }

    fn verify(&self, v: &Verifier, headers: &HeaderMap, body: &[u8], now: i64) -> VerifyResult {
        let request = Request::new(headers, body).with_query(self.signed.query.as_deref());
        v.verify_request(&request, now).map(|p| p.secret_index())
    }
}

type VerifyResult = Result<usize, VerifyError>;

/// The body: any bytes, or a JSON event (every preset's dedup default finds its key in it;
/// Linear needs its `webhookTimestamp`) with any text in it. Never empty: Shopify and Square
/// refuse an empty body whatever its signature (their unit tests cover that).
fn body(signed_at: i64) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..512),
        ("[a-zA-Z0-9_]{1,24}", any::<String>()).prop_map(move |(id, text)| {
            serde_json::json!({"id": id, "event_id": id, "type": "charge.paid",
                "data": {"id": id, "text": text}, "webhookTimestamp": signed_at * 1000})
            .to_string()
            .into_bytes()
        }),
    ]
}

/// The signing time, how far into the window the receiver's clock is (-1.0..=1.0 of the
/// preset's window, see [`clock`]), a body, and a delivery id as gateways make them.
fn request() -> impl Strategy<Value = (i64, f64, Vec<u8>, String)> {
    (1_500_000_000i64..2_000_000_000, -1.0f64..=1.0).prop_flat_map(|(signed_at, skew)| {
        (
            Just(signed_at),
            Just(skew),
            body(signed_at),
            "[a-zA-Z0-9_-]{1,40}",
        )
    })
}

/// The receiver's clock: `skew` of the preset's window away from the signing time (Paddle's
/// window is 5 s, Linear's 60 s, most 300 s), either way, the edges included.
fn clock(v: &Verifier, signed_at: i64, skew: f64) -> i64 {
    let window = v.tolerance_secs() as f64;
    signed_at + (skew * window).round() as i64
}

/// Whether the body is one the scheme can sign at all (Linear's must carry its timestamp).
fn fits(v: &Verifier, body: &[u8]) -> bool {
    let stamped = || {
        serde_json::from_slice::<serde_json::Value>(body)
            .is_ok_and(|json| json.get("webhookTimestamp").is_some())
    };
    // PagBank refuses a body that is not UTF-8 whatever its digest (a length extension's mark).
    let text = || std::str::from_utf8(body).is_ok();
    (v.provider() != "linear" || stamped()) && (v.provider() != "pagbank" || text())
}

/// Whether two bodies sign alike to Twilio, which signs neither the bytes nor the pairs but the
/// decoded parameters, sorted, each name then its value with nothing between (its SDKs'
/// `compute_signature`): `%41` and `A`, two invalid UTF-8 sequences that both decode to U+FFFD,
/// and `a=bc` beside `ab=c` are alike to it.
fn same_form(a: &[u8], b: &[u8]) -> bool {
    let signed = |body: &[u8]| {
        let mut params: Vec<(String, String)> = form_urlencoded::parse(body)
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        params.sort();
        params.dedup();
        let text: String = params
            .iter()
            .flat_map(|(n, v)| [n.as_str(), v.as_str()])
            .collect();
        text
    };
    signed(a) == signed(b)
}

/// Refuses an answer of `Ok` to a changed request (any error is fine: never a panic, which
/// proptest reports by itself).
fn refused(what: &str, v: &Verifier, result: VerifyResult) -> Result<(), TestCaseError> {
    match result {
        Ok(_) => Err(TestCaseError::fail(format!(
            "{}: {what} still verifies",
            v.provider()
        ))),
        Err(_) => Ok(()),
    }
}

#[test]
fn every_shared_secret_preset_verifies_what_it_signs() {
    let signers = signers();
    proptest!(config(), |((signed_at, skew, body, id) in request())| {
        for v in &signers {
            if !fits(v, &body) {
                continue;
            }
            let (sent, now) = (Sent::new(v, &body, signed_at, &id), clock(v, signed_at, skew));
            let headers = header_map(&sent.signed.headers);
            let result = sent.verify(v, &headers, &sent.body, now);
            prop_assert_eq!(result, Ok(0), "{} at {} s", v.provider(), now - signed_at);
        }
    });
}

#[test]
fn a_changed_body_byte_never_verifies() {
    let signers = signers();
    let change = (any::<prop::sample::Index>(), 1u8..=255);
    proptest!(config(), |((signed_at, skew, body, id) in request(), (at, flip) in change)| {
        for v in &signers {
            if !fits(v, &body) || BODY_NOT_SIGNED.contains(&v.provider()) {
                continue;
            }
            let (sent, now) = (Sent::new(v, &body, signed_at, &id), clock(v, signed_at, skew));
            let headers = header_map(&sent.signed.headers);
            let mut changed = sent.body.clone();
            changed[at.index(body.len())] ^= flip;
            if v.provider() == "twilio" && same_form(&sent.body, &changed) {
                continue;
            }
            refused("a changed body", v, sent.verify(v, &headers, &changed, now))?;
        }
    });
}

#[test]
fn a_changed_signature_header_byte_never_verifies() {
    let signers = signers();
    let change = (
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        0x21u8..=0x7e,
    );
    proptest!(config(), |((signed_at, skew, body, id) in request(), (which, at, byte) in change)| {
        for v in &signers {
            if !fits(v, &body) {
                continue;
            }
            let (sent, now) = (Sent::new(v, &body, signed_at, &id), clock(v, signed_at, skew));
            let signed: Vec<usize> = (0..sent.signed.headers.len())
                .filter(|&i| !UNSIGNED_HEADERS.contains(&sent.signed.headers[i].0.as_str()))
                .collect();
            if signed.is_empty() {
                continue;
            }
            let mut pairs = sent.signed.headers.clone();
            let (name, value) = &mut pairs[signed[which.index(signed.len())]];
            let mut bytes = value.clone().into_bytes();
            if bytes.is_empty() {
                continue;
            }
            let i = at.index(bytes.len());
            // A change, and not only of case (hex is read in either case): the next visible
            // ASCII byte that differs.
            let mut byte = byte;
            while byte.eq_ignore_ascii_case(&bytes[i]) {
                byte = if byte == 0x7e { 0x21 } else { byte + 1 };
            }
            bytes[i] = byte;
            *value = String::from_utf8(bytes).expect("visible ASCII");
            let what = format!("a changed `{name}`");
            let headers = header_map(&pairs);
            refused(&what, v, sent.verify(v, &headers, &sent.body, now))?;
        }
    });
}

#[test]
fn a_verified_request_never_panics_dedup_or_describe() {
    let signers = signers();
    proptest!(config(), |((signed_at, skew, body, id) in request())| {
        for v in &signers {
            if !fits(v, &body) {
                continue;
            }
            let (sent, now) = (Sent::new(v, &body, signed_at, &id), clock(v, signed_at, skew));
            let headers = header_map(&sent.signed.headers);
            let request = Request::new(&headers, &sent.body).with_query(sent.signed.query.as_deref());
            let proof = v.verify_request(&request, now);
            prop_assert_eq!(proof.as_ref().map(|p| p.secret_index()), Ok(0));
            let signed = proof.as_ref().ok().and_then(|p| p.signed_key());
            // Ok or a 400's reason: either way an answer, never a panic.
            if let Ok(key) = v.default_dedup().extract_signed(signed, &headers, &sent.body) {
                prop_assert!(!key.is_empty() && key.len() <= portaria::dedup::MAX_KEY_BYTES);
            }
            let described = describe(v.event_type_header(), &headers, &sent.body);
            if let Some(object_id) = described.object_id {
                prop_assert!(object_id.chars().count() <= 200);
            }
        }
    });
}

/// A JSON value as a body writes it: objects as member lists, so a name may repeat and members
/// come in any order.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Quarter(i32),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => out.push_str(&n.to_string()),
            Json::Quarter(q) => out.push_str(&serde_json::to_string(&(*q as f64 / 4.0)).unwrap()),
            Json::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i > 0 { ", " } else { "" });
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (name, value)) in members.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n " } else { "" });
                    out.push_str(&serde_json::to_string(name).unwrap());
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }

    /// The rules of docs/forwarding.md's "The event type and object id", read off the value itself.
    fn scalar(&self) -> Option<String> {
        match self {
            Json::Str(s) if !s.is_empty() => Some(s.chars().take(200).collect()),
            Json::Int(n) => Some(n.to_string()),
            Json::Quarter(q) => Some(serde_json::Number::from_f64(*q as f64 / 4.0)?.to_string()),
            _ => None,
        }
    }

    /// The value at the pointer's `tokens`, by the rules of a `json:` field (RFC 6901; the
    /// first occurrence of a member).
    fn at(&self, tokens: &[&str]) -> Option<&Json> {
        let Some((token, rest)) = tokens.split_first() else {
            return Some(self);
        };
        match self {
            Json::Object(_) => self.first(token)?.at(rest),
            Json::Array(items) if *token == "0" || !token.starts_with('0') => {
                items.get(token.parse::<usize>().ok()?)?.at(rest)
            }
            _ => None,
        }
    }

    fn first(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::Int),
        (-4000..4000).prop_map(Json::Quarter),
        "[a-z.\"\\\\é]{0,6}".prop_map(Json::Str),
        Just(Json::Str("x".repeat(250))),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let name = prop_oneof![
            Just("type".to_string()),
            Just("event".to_string()),
            Just("data".to_string()),
            Just("id".to_string()),
            Just("events".to_string()),
            "[a-z]{1,3}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((name, inner), 0..6).prop_map(Json::Object),
        ]
    })
}

#[test]
fn describe_reads_any_json_body_by_its_rules() {
    let mut headers = HeaderMap::new();
    headers.insert("x-topic", HeaderValue::from_static("from.header"));
    proptest!(config(), |(body in json(), tail in "[ -~]{0,8}")| {
        let (event_type, object_id) = match &body {
            Json::Object(_) => (
                body.first("type").and_then(Json::scalar).or_else(|| body.first("event").and_then(Json::scalar)),
                body.first("data").and_then(|d| d.first("id")).and_then(Json::scalar),
            ),
            _ => (None, None),
        };
        let mut text = String::new();
        body.write(&mut text);
        // Whatever follows the body's value is never read.
        text.push_str(&tail);
        let d = describe(None, &headers, text.as_bytes());
        prop_assert_eq!((&d.event_type, &d.object_id), (&event_type, &object_id), "{}", text);
        let d = describe(Some("x-topic"), &headers, text.as_bytes());
        prop_assert_eq!(d.event_type.as_deref(), Some("from.header"));
        prop_assert_eq!(&d.object_id, &object_id, "{}", text);
    });
}

#[test]
fn a_json_field_reads_what_its_pointer_names_in_any_body() {
    let pointers = prop_oneof![
        Just("/data/id"),
        Just("/events/0"),
        Just("/data/1/id"),
        Just("/type"),
        Just("/0/id"),
        Just("/a/0"),
        Just("/data/01"),
    ];
    let headers = HeaderMap::new();
    proptest!(config(), |(body in json(), tail in "[ -~]{0,8}", pointer in pointers)| {
        let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
        let expected = body.at(&tokens).and_then(Json::scalar);
        let mut text = String::new();
        body.write(&mut text);
        text.push_str(&tail);
        let field = format!("json:{pointer}").parse().unwrap();
        let sources = Sources { event_type: Some(&field), object_id: Some(&field), ..Sources::default() };
        let d = describe_with(sources, &headers, text.as_bytes());
        prop_assert_eq!(&d.event_type, &expected, "{}", text);
        prop_assert_eq!(&d.object_id, &expected, "{}", text);
    });
}
