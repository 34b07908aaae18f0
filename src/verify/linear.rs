//! Linear: `Linear-Signature: <hex>`, the HMAC-SHA256 of the raw body keyed by the webhook's
//! signing secret as UTF-8. The timestamp is inside the signed body: `webhookTimestamp`, in
//! milliseconds, must be within 60 s of now either way (`@linear/sdk`'s
//! `LinearWebhookClient.verify`: `Math.abs(Date.now() - webhookTimestamp) > 60000` fails).
//!
//! Unlike the header-timestamp schemes, the body is parsed only after its MAC matched (nobody
//! else's JSON is parsed), so a missing or non-numeric `webhookTimestamp` is reported after the
//! MAC, as `Malformed`. The `Linear-Timestamp` header is not signed and is ignored, as in the
//! SDK.
//!
//! Dedup ([`DEDUP`]): the SHA-256 of the signed body without its `webhookTimestamp` (the body
//! parsed, the member removed, written again with its members in order). A retry must carry a
//! new `webhookTimestamp` to pass the 60 s window, so the raw body's hash would make each retry
//! a new event; everything else of the body is what Linear signed for that delivery. The
//! `Linear-Delivery` header (a UUID per delivery) was the key before: it is not signed, so a
//! captured delivery re-sent within the minute with another UUID was a second event. Event
//! type: `Linear-Event` (`Issue`, `Comment`, ...), not signed either.

use http::HeaderName;
use serde_json::Value;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, check_window};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "linear-signature";
pub const DELIVERY: &str = "linear-delivery";
pub const EVENT: &str = "linear-event";

/// The SDK's window.
const TOLERANCE_SECS: u64 = 60;

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
    )
    .with_delivery_header(HeaderName::from_static(DELIVERY));
    Preset::new("linear", Linear(scheme), DEDUP)
        .event_type_header(EVENT)
        .tolerance_secs(TOLERANCE_SECS)
}

#[derive(Debug)]
struct Linear(HmacScheme);

/// The dedup rule: the key [`signed_body`] builds, through `Verified::signed_key`.
pub const DEDUP: DedupRule = DedupRule::Signed("linear-body-sha256");

const TIMESTAMP_MEMBER: &str = "webhookTimestamp";

/// `webhookTimestamp` in unix seconds (floored), and the dedup key, from a body whose MAC
/// matched: the hex SHA-256 of the body written again without that member.
fn signed_body(body: &[u8]) -> Result<(i64, String), VerifyError> {
    let bad = || {
        VerifyError::Malformed(
            "the body's `webhookTimestamp` is missing or not a whole number of milliseconds"
                .to_string(),
        )
    };
    let mut value: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    let object = value.as_object_mut().ok_or_else(bad)?;
    let millis = object
        .remove(TIMESTAMP_MEMBER)
        .as_ref()
        .and_then(Value::as_i64)
        .ok_or_else(bad)?;
    // serde_json's map keeps its members sorted, so the text is one per content.
    let canonical = value.to_string();
    let key = hex::encode(crate::digest::sha256(&[canonical.as_bytes()]));
    Ok((millis.div_euclid(1000), key))
}

impl Scheme for Linear {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let index = Scheme::verify(&self.0, keys, request, now, tolerance_secs)?.index;
        let (timestamp, key) = signed_body(request.body)?;
        check_window(timestamp, now, tolerance_secs)?;
        Ok(Checked {
            index,
            signed_key: Some(key),
            ..Checked::default()
        })
    }

    /// The body must carry its own current `webhookTimestamp`; `sign` cannot add one.
    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Scheme::sign(&self.0, key, body, now, delivery_id)
    }

    fn signs_timestamp(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed vector (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    const SECRET: &str = "lin_wh_secret";
    const BODY: &str = r#"{"action":"create","type":"Issue","webhookTimestamp":1700000000000}"#;
    const SIG: &str = "91e919dc0fd99df1cae12efef1ca08b082cfa523f101b572ec14ed98863fdf35";
    const NOW: i64 = 1_700_000_000;

    fn verify(secret: &str, body: &str, now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new("linear", None, &[secret.to_string()], None).unwrap();
        let h = headers(&[("Linear-Signature", SIG)]);
        v.verify(&h, body.as_bytes(), now).map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_computed_vector_within_60_s_of_the_body_timestamp() {
        assert_eq!(verify(SECRET, BODY, NOW), Ok(0));
        assert_eq!(verify(SECRET, BODY, NOW + 60), Ok(0));
        assert_eq!(verify(SECRET, BODY, NOW - 60), Ok(0));
        assert_eq!(
            verify(SECRET, BODY, NOW + 61),
            Err(VerifyError::StaleTimestamp { skew_secs: 61 })
        );
        assert_eq!(
            verify(SECRET, BODY, NOW - 61),
            Err(VerifyError::StaleTimestamp { skew_secs: -61 })
        );
        // A forger learns nothing about the window: the MAC comes first.
        assert_eq!(verify("other", BODY, NOW + 61), Err(VerifyError::Mismatch));
        let moved = BODY.replace("1700000000000", "1700000100000");
        assert_eq!(
            verify(SECRET, &moved, NOW + 100),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_signed_body_without_a_numeric_timestamp_is_malformed() {
        let v = Verifier::new("linear", None, &[SECRET.to_string()], None).unwrap();
        for body in [
            &br#"{"action":"create"}"#[..],
            br#"{"webhookTimestamp":"1700000000000"}"#,
            br#"{"webhookTimestamp":1.7e12}"#,
            b"not json",
        ] {
            let signed = headers(&v.sign(body, NOW, "d"));
            assert!(
                matches!(v.verify(&signed, body, NOW), Err(VerifyError::Malformed(m)) if m.contains("webhookTimestamp")),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn signs_like_linear_with_its_defaults() {
        let v = Verifier::new("linear", None, &[SECRET.to_string()], None).unwrap();
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, "uuid-1"),
            [
                ("linear-signature".to_string(), SIG.to_string()),
                ("linear-delivery".to_string(), "uuid-1".to_string()),
            ]
        );
        assert_eq!(v.tolerance_secs(), 60);
        assert_eq!(v.event_type_header(), Some("linear-event"));
        assert_eq!(v.default_dedup().to_string(), "linear-body-sha256");
    }

    #[test]
    fn the_key_leaves_out_the_timestamp_only() {
        let v = Verifier::new("linear", None, &[SECRET.to_string()], None).unwrap();
        let key = |body: &str, now: i64| {
            let signed = headers(&v.sign(body.as_bytes(), now, "d"));
            let proof = v.verify(&signed, body.as_bytes(), now).unwrap();
            proof.signed_key().unwrap().to_string()
        };
        let first = key(BODY, NOW);
        // A retry a minute later: a new `webhookTimestamp`, the same key.
        let retry = BODY.replace("1700000000000", "1700000090000");
        assert_eq!(key(&retry, NOW + 90), first);
        // The same content spelled with other spaces and order: the same key.
        let spelled = r#"{ "webhookTimestamp":1700000000000, "type":"Issue","action":"create" }"#;
        assert_eq!(key(spelled, NOW), first);
        // Anything else changed: another key.
        assert_ne!(key(&BODY.replace("create", "update"), NOW), first);
        assert_eq!(first.len(), 64);
    }
}
