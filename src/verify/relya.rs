//! Relya: `x-relya-signature: v1=<hex>`, the HMAC-SHA256 of `TIMESTAMP.DELIVERY_ID.RAW_BODY`,
//! with the timestamp (unix seconds) and delivery id in their own headers. A timestamp more than
//! the tolerance (300 s) from now, either way, is refused. The delivery id is the dedup key.

use http::HeaderMap;

use super::hmac_scheme::Algorithm;
use super::preset::{Coverage, Preset, Scheme, Signed, header_rule};
use super::{
    Checked, Request, Secret, VerifyError, check_window, find_secret, header, parse_timestamp,
};

pub const SIGNATURE: &str = "x-relya-signature";
pub const TIMESTAMP: &str = "x-relya-timestamp";
pub const DELIVERY_ID: &str = "x-relya-delivery-id";
pub const EVENT_TYPE: &str = "x-relya-event-type";

fn signed_mac(key: &Secret, timestamp: &str, delivery_id: &str, body: &[u8]) -> Vec<u8> {
    let parts = [
        timestamp.as_bytes(),
        b".",
        delivery_id.as_bytes(),
        b".",
        body,
    ];
    key.mac(Algorithm::Sha256, &parts)
}

pub(super) fn verify(
    keys: &[Secret],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance_secs: u64,
) -> Result<usize, VerifyError> {
    let signature = header(headers, SIGNATURE)?;
    let received = signature
        .strip_prefix("v1=")
        .and_then(|hex_mac| hex::decode(hex_mac).ok())
        .ok_or_else(|| VerifyError::Malformed(format!("header `{SIGNATURE}` is not `v1=<hex>`")))?;
    let timestamp_text = header(headers, TIMESTAMP)?;
    let timestamp = parse_timestamp(timestamp_text, TIMESTAMP)?;
    let delivery_id = header(headers, DELIVERY_ID)?;
    // With a `.` in the id, the boundary between id and body would be ambiguous, and a
    // signature could be replayed with a different id (dedup key) and a shortened body.
    if delivery_id.contains('.') {
        return Err(VerifyError::Malformed(format!(
            "header `{DELIVERY_ID}` contains a `.`"
        )));
    }
    let index = find_secret(keys, &[received], |key| {
        signed_mac(key, timestamp_text, delivery_id, body)
    })?;
    check_window(timestamp, now, tolerance_secs)?;
    Ok(index)
}

pub(super) fn sign(
    key: &Secret,
    body: &[u8],
    now: i64,
    delivery_id: &str,
) -> Vec<(String, String)> {
    let timestamp = now.to_string();
    let mac = signed_mac(key, &timestamp, delivery_id, body);
    vec![
        (DELIVERY_ID.to_string(), delivery_id.to_string()),
        (TIMESTAMP.to_string(), timestamp),
        (SIGNATURE.to_string(), format!("v1={}", hex::encode(mac))),
    ]
}

/// The delivery id is the dedup key; the event type has a header of its own.
pub(super) fn preset() -> Preset {
    Preset::new("relya", Relya, header_rule(DELIVERY_ID)).event_type_header(EVENT_TYPE)
}

#[derive(Debug)]
struct Relya;

impl Scheme for Relya {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body, now, tolerance_secs).map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Some(sign(key, body, now, delivery_id).into())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn coverage(&self) -> Coverage {
        Coverage::body_and(&[TIMESTAMP, DELIVERY_ID])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed here with Python's hmac over `1700000000.dlv_01HZX.<body>` (Relya publishes no
    // vector), so it checks the signed-content layout independently of `sign`.
    const TS: i64 = 1_700_000_000;
    const BODY: &str = r#"{"event":"charge.paid","id":"ch_1"}"#;
    const MAC: &str = "v1=6fa0a56fdc4f4f83f4ff4dac45c9f81d92159cb61870b3d17e668fee15877652";

    fn verify_with(secret: &str, pairs: &[(&str, &str)], now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new("relya", None, &[secret.to_string()], None).unwrap();
        v.verify(&headers(pairs), BODY.as_bytes(), now)
            .map(|v| v.secret_index())
    }

    fn verify(pairs: &[(&str, &str)], now: i64) -> Result<usize, VerifyError> {
        verify_with("relya_secret", pairs, now)
    }

    const GOOD: [(&str, &str); 4] = [
        ("x-relya-delivery-id", "dlv_01HZX"),
        ("x-relya-timestamp", "1700000000"),
        ("x-relya-event-type", "charge.paid"),
        ("x-relya-signature", MAC),
    ];

    fn with(name: &str, value: &str) -> Vec<(&'static str, String)> {
        GOOD.iter()
            .map(|(n, v)| {
                (
                    *n,
                    if *n == name {
                        value.to_string()
                    } else {
                        v.to_string()
                    },
                )
            })
            .collect()
    }

    fn verify_owned(pairs: &[(&'static str, String)], now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new("relya", None, &["relya_secret".to_string()], None).unwrap();
        v.verify(&headers(pairs), BODY.as_bytes(), now)
            .map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_computed_vector_within_the_window() {
        assert_eq!(verify(&GOOD, TS), Ok(0));
        assert_eq!(verify(&GOOD, TS + 300), Ok(0));
        assert_eq!(verify(&GOOD, TS - 300), Ok(0));
        assert_eq!(verify_with("other", &GOOD, TS), Err(VerifyError::Mismatch));
    }

    #[test]
    fn stale_and_future_timestamps_are_refused_after_the_mac() {
        assert_eq!(
            verify(&GOOD, TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            verify(&GOOD, TS - 301),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        // Without the secret, an old request is just a mismatch.
        assert_eq!(
            verify_with("other", &GOOD, TS + 3600),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn the_timestamp_and_id_are_signed() {
        assert_eq!(
            verify_owned(&with("x-relya-timestamp", "1700000001"), TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify_owned(&with("x-relya-delivery-id", "dlv_01HZY"), TS),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn malformed_and_missing_headers() {
        for (name, value) in [
            (
                "x-relya-signature",
                "6fa0a56fdc4f4f83f4ff4dac45c9f81d92159cb61870b3d17e668fee15877652",
            ),
            ("x-relya-signature", "v1=xyz"),
            ("x-relya-timestamp", "2026-07-14T12:00:00Z"),
            ("x-relya-delivery-id", "dlv.01HZX"),
        ] {
            let r = verify_owned(&with(name, value), TS);
            assert!(
                matches!(r, Err(VerifyError::Malformed(_))),
                "{name}: {value}: {r:?}"
            );
        }
        let without_id: Vec<_> = GOOD
            .iter()
            .filter(|(n, _)| *n != "x-relya-delivery-id")
            .copied()
            .collect();
        assert_eq!(
            verify(&without_id, TS),
            Err(VerifyError::MissingHeader(
                "x-relya-delivery-id".to_string()
            ))
        );
    }

    #[test]
    fn sign_produces_the_vector() {
        let v = Verifier::new("relya", None, &["relya_secret".to_string()], None).unwrap();
        let signed = v.sign(BODY.as_bytes(), TS, "dlv_01HZX");
        assert!(signed.contains(&("x-relya-signature".to_string(), MAC.to_string())));
    }
}
