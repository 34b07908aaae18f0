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
//! Dedup: `Linear-Delivery` (a UUID per delivery, the same on a retry). Event type:
//! `Linear-Event` (`Issue`, `Comment`, ...).

use http::HeaderName;

use super::catalog::{Preset, Scheme, Signed, header_rule};
use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::{Checked, Request, Secret, VerifyError, check_window};

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
    Preset::new("linear", Linear(scheme), header_rule(DELIVERY))
        .event_type_header(EVENT)
        .tolerance_secs(TOLERANCE_SECS)
}

#[derive(Debug)]
struct Linear(HmacScheme);

/// `webhookTimestamp` in unix seconds (floored), from a body whose MAC matched.
fn body_timestamp(body: &[u8]) -> Result<i64, VerifyError> {
    let bad = || {
        VerifyError::Malformed(
            "the body's `webhookTimestamp` is missing or not a whole number of milliseconds"
                .to_string(),
        )
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| bad())?;
    let millis = value
        .get("webhookTimestamp")
        .and_then(serde_json::Value::as_i64)
        .ok_or_else(bad)?;
    Ok(millis.div_euclid(1000))
}

impl Scheme for Linear {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let index = Scheme::verify(&self.0, keys, request, now, tolerance_secs)?;
        check_window(body_timestamp(request.body)?, now, tolerance_secs)?;
        Ok(index)
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
        assert_eq!(v.default_dedup().to_string(), "header:linear-delivery");
    }
}
