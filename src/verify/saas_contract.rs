//! The contract every SaaS preset keeps (as `mod.rs`'s tests check it for the first ones):
//! it verifies what it signs, with the query string its signer adds; takes the second secret
//! and says so; refuses a changed body and a wrong secret; names a missing header; shows no
//! secret in `Debug`; and says whether it signs a timestamp and the public URL.

use super::tests::headers;
use super::{Request, Settings, Verifier, VerifyError};

const NOW: i64 = 1_700_000_000;
const URL: &str = "https://example.trycloudflare.com/webhooks/saas";

/// (provider, signs a timestamp, signs public_url).
const SAAS: [(&str, bool, bool); 11] = [
    ("shopify", false, false),
    ("slack", true, false),
    ("paddle", true, false),
    ("woocommerce", false, false),
    ("twilio", false, true),
    ("square", false, true),
    ("zoom", true, false),
    ("linear", true, false),
    ("intercom", false, false),
    ("typeform", false, false),
    ("calendly", true, false),
];

/// Every preset's dedup default finds a key in it; Linear's timestamp is `NOW`.
fn body() -> Vec<u8> {
    format!(r#"{{"id":"evt_1","event_id":"evt_1","webhookTimestamp":{NOW}000}}"#).into_bytes()
}

fn verifier(provider: &str, secrets: &[&str]) -> Verifier {
    let settings = Settings {
        public_url: Some(URL),
        ..Settings::default()
    };
    let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
    Verifier::with_settings(provider, &settings, &secrets, None).unwrap()
}

/// Signs `body` with `sender` and verifies it with `receiver`.
fn round_trip(
    sender: &Verifier,
    receiver: &Verifier,
    received: &[u8],
) -> Result<usize, VerifyError> {
    let signed = sender.sign_request(&body(), NOW, "dlv_1").unwrap();
    let h = headers(&signed.headers);
    let request = Request::new(&h, received).with_query(signed.query.as_deref());
    receiver
        .verify_request(&request, NOW)
        .map(|v| v.secret_index())
}

#[test]
fn every_saas_provider_verifies_what_it_signs_and_takes_the_second_secret() {
    for (provider, _, _) in SAAS {
        let v = verifier(provider, &["first-secret"]);
        assert_eq!(round_trip(&v, &v, &body()), Ok(0), "{provider}");
        let new = verifier(provider, &["second-secret"]);
        let both = verifier(provider, &["first-secret", "second-secret"]);
        assert_eq!(round_trip(&new, &both, &body()), Ok(1), "{provider}");
        // The key of a verified request, from what its verifier signed where it builds one.
        let signed = v.sign_request(&body(), NOW, "dlv_1").unwrap();
        let h = headers(&signed.headers);
        let body = body();
        let request = Request::new(&h, &body).with_query(signed.query.as_deref());
        let proof = v.verify_request(&request, NOW).unwrap();
        let key = v
            .default_dedup()
            .extract_signed(proof.signed_key(), &h, &body);
        assert!(key.is_ok(), "{provider}: {key:?}");
    }
}

#[test]
fn every_saas_provider_refuses_a_changed_body_and_a_wrong_secret() {
    for (provider, _, _) in SAAS {
        let v = verifier(provider, &["first-secret"]);
        let changed = String::from_utf8(body()).unwrap().replace("evt_1", "evt_2");
        assert_eq!(
            round_trip(&v, &v, changed.as_bytes()),
            Err(VerifyError::Mismatch),
            "{provider}"
        );
        let other = verifier(provider, &["second-secret"]);
        assert_eq!(
            round_trip(&v, &other, &body()),
            Err(VerifyError::Mismatch),
            "{provider}"
        );
    }
}

#[test]
fn every_saas_provider_names_a_missing_header_and_hides_its_secret() {
    for (provider, signs_timestamp, signs_url) in SAAS {
        let v = verifier(provider, &["hunter2-first-secret"]);
        let err = v.verify(&http::HeaderMap::new(), &body(), NOW).unwrap_err();
        assert!(
            matches!(err, VerifyError::MissingHeader(_)),
            "{provider}: {err:?}"
        );
        let shown = format!("{v:?}");
        assert!(!shown.contains("hunter2"), "{provider}: {shown}");
        assert_eq!(v.provider(), provider);
        assert_eq!(v.signs_timestamp(), signs_timestamp, "{provider}");
        assert_eq!(v.signs_public_url(), signs_url, "{provider}");
    }
}
