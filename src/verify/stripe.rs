//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, the HMAC-SHA256 of
//! `<t>.<raw body>` keyed by the whole `whsec_...` string as UTF-8 (not base64-decoded). Any
//! `v1` may match (Stripe sends one per active secret while rolling); `v0` and unknown schemes
//! are ignored. Unlike Stripe's SDKs, which only refuse old timestamps, the window applies
//! both ways: a timestamp from the future is as suspicious as an old one.
//!
//! Patience: in live mode Stripe retries a failed delivery for up to 3 days (docs.stripe.com
//! "Event delivery behaviors"; reconcile.md §2 and §9); a sandbox retries 3 times over a few
//! hours.

use http::HeaderMap;

use super::hmac_scheme::Algorithm;
use super::patience::Rule;
use super::preset::{Carried, Preset, Scheme, Signed, json_rule};
use super::{
    Checked, Request, Secret, VerifyError, check_window, find_secret, header, parse_timestamp,
};

pub const SIGNATURE: &str = "stripe-signature";

fn signed_mac(key: &Secret, timestamp: &str, body: &[u8]) -> Vec<u8> {
    key.mac(Algorithm::Sha256, &[timestamp.as_bytes(), b".", body])
}

pub(super) fn verify(
    keys: &[Secret],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance_secs: u64,
) -> Result<usize, VerifyError> {
    let malformed = |why: &str| VerifyError::Malformed(format!("header `{SIGNATURE}` {why}"));
    let value = header(headers, SIGNATURE)?;
    let mut timestamp_text = None;
    let mut v1_entries = 0;
    let mut received = Vec::new();
    for item in value.split(',') {
        let (key, value) = item
            .trim()
            .split_once('=')
            .ok_or_else(|| malformed("is not a list of `key=value` items"))?;
        match key {
            "t" if timestamp_text.is_some() => return Err(malformed("has more than one `t=`")),
            "t" => timestamp_text = Some(value),
            "v1" => {
                v1_entries += 1;
                // A `v1` that is not hex can never match; Stripe's own tests expect a header
                // with an extra `v1=bad_signature` to verify.
                if let Ok(mac) = hex::decode(value) {
                    received.push(mac);
                }
            }
            _ => {}
        }
    }
    let timestamp_text = timestamp_text.ok_or_else(|| malformed("has no `t=`"))?;
    let timestamp = parse_timestamp(timestamp_text, "t")?;
    if v1_entries == 0 {
        return Err(malformed("has no `v1=` signature"));
    }
    let index = find_secret(keys, &received, |key| signed_mac(key, timestamp_text, body))?;
    check_window(timestamp, now, tolerance_secs)?;
    Ok(index)
}

pub(super) fn sign(key: &Secret, body: &[u8], now: i64) -> Vec<(String, String)> {
    let timestamp = now.to_string();
    let mac = hex::encode(signed_mac(key, &timestamp, body));
    vec![(SIGNATURE.to_string(), format!("t={timestamp},v1={mac}"))]
}

/// Every event object carries the object it is about in `data.object` (docs.stripe.com,
/// "The Event object"): one without it is `drift`. Not the thin events of event destinations
/// (`v1.billing.meter...`, `v2.core...`: "Thin events"), which carry a `related_object` only.
pub const CARRIES: &[Carried] = &[Carried {
    pointer: "/data/object",
    name: "data.object",
    types: None,
    except: &["v1.", "v2."],
}];

/// The event's `id` (`evt_...`) is the same on every redelivery.
pub(super) fn preset() -> Preset {
    Preset::new("stripe", Stripe, json_rule("/id"))
        .patience(
            "Stripe",
            Rule::Span {
                span: std::time::Duration::from_secs(3 * 86_400),
                attempts: None,
            },
        )
        .carries(CARRIES)
}

#[derive(Debug)]
struct Stripe;

impl Scheme for Stripe {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body, now, tolerance_secs).map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, _delivery_id: &str) -> Option<Signed> {
        Some(sign(key, body, now).into())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed vectors (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    const SECRET: &str = "whsec_test_secret";
    const TS: i64 = 1_700_000_000;
    const BODY: &str = r#"{"id":"evt_1","object":"event"}"#;
    const V1: &str = "0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";
    const DUMMY_BODY: &str = "{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\",\n  \"data\": { \"object\": { \"id\": \"rdr_123\", \"object\": \"terminal.reader\" } }\n}";
    const DUMMY_V1: &str = "3bfab77baf5f7b6991a46c9b53b6547d7afc56148b10468fcad9f35c1992ffbd";

    fn verify_body(secret: &str, header: &str, body: &str, now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new("stripe", None, &[secret.to_string()], None).unwrap();
        let h = headers(&[("Stripe-Signature", header)]);
        v.verify(&h, body.as_bytes(), now).map(|v| v.secret_index())
    }

    fn verify(header: &str, now: i64) -> Result<usize, VerifyError> {
        verify_body(SECRET, header, BODY, now)
    }

    #[test]
    fn verifies_the_computed_vectors_with_the_secret_used_verbatim() {
        assert_eq!(verify(&format!("t={TS},v1={V1}"), TS), Ok(0));
        let dummy = format!("t={TS},v1={DUMMY_V1}");
        assert_eq!(verify_body(SECRET, &dummy, DUMMY_BODY, TS), Ok(0));
        assert_eq!(
            verify_body("whsec_other", &dummy, DUMMY_BODY, TS),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn any_v1_may_match_and_other_schemes_are_ignored() {
        let bad = "0".repeat(64);
        assert_eq!(verify(&format!("t={TS},v1={bad},v1={V1}"), TS), Ok(0));
        assert_eq!(
            verify(&format!("t={TS},v1={V1},v1=bad_signature"), TS),
            Ok(0)
        );
        assert_eq!(verify(&format!("t={TS}, v0={bad}, v1={V1}"), TS), Ok(0));
        assert_eq!(
            verify(&format!("t={TS},v1={bad},v1=bad_signature"), TS),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn only_v0_or_no_timestamp_is_malformed() {
        for header in [
            format!("t={TS},v0={V1}"),
            format!("v1={V1}"),
            format!("t=soon,v1={V1}"),
            format!("t={TS},t={TS},v1={V1}"),
            format!("t={TS};v1={V1}"),
            String::from("garbage"),
        ] {
            assert!(
                matches!(verify(&header, TS), Err(VerifyError::Malformed(_))),
                "{header}"
            );
        }
    }

    #[test]
    fn old_and_future_timestamps_are_refused() {
        let header = format!("t={TS},v1={V1}");
        assert_eq!(verify(&header, TS + 300), Ok(0));
        assert_eq!(
            verify(&header, TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            verify(&header, TS - 301),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        // The timestamp is signed: moving it forward breaks the MAC, not the window.
        assert_eq!(
            verify(&format!("t={},v1={V1}", TS + 400), TS + 400),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn sign_produces_the_vector() {
        let v = Verifier::new("stripe", None, &[SECRET.to_string()], None).unwrap();
        let expected = [("stripe-signature".to_string(), format!("t={TS},v1={V1}"))];
        assert_eq!(v.sign(BODY.as_bytes(), TS, "ignored"), expected);
    }
}
