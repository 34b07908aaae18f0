//! Discord interactions: `X-Signature-Ed25519: <hex>`, an Ed25519 signature over the bytes of
//! `X-Signature-Timestamp` followed by the raw body (no separator), made with the application's
//! private key. The endpoint holds the application's public key (`public_key`, 64 hex chars,
//! from the Developer Portal), never a shared secret, so nothing can be signed here.
//!
//! Verification is strict (as libsodium's, which Discord's own libraries use): a non-canonical
//! signature or a small-order point is refused. A key that is not a point, or a weak one, does
//! not load. Discord documents no replay window; the timestamp is checked against the usual
//! ±300 s (`tolerance_secs` changes it). Discord sends requests with deliberately wrong
//! signatures to test the endpoint: those get 401 like any other.
//!
//! A verified PING (`"type": 1`) is the URL check, answered `{"type":1}` and never stored.
//! Other interactions are stored (dedup on the interaction `id`) and answered `{"type":5}`
//! (a deferred response: the forward target edits it with the interaction token).
//! Source: discord-interactions (`verify_key`), signature-schemes.md §4.

use ed25519_dalek::{Signature, VerifyingKey};

use super::preset::{Coverage, Preset, Scheme, Signed, json_rule};
use super::{Checked, Reply, Request, Secret, VerifyError, check_window, header, parse_timestamp};

pub const SIGNATURE: &str = "x-signature-ed25519";
pub const TIMESTAMP: &str = "x-signature-timestamp";

/// The answer to an accepted interaction: DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE.
const DEFERRED: &str = r#"{"type":5}"#;

pub(super) fn preset(public_key: Option<&str>) -> Result<Preset, String> {
    let text = public_key.ok_or_else(|| {
        "provider `discord` needs `public_key = \"<64 hex chars>\"`, the application's public \
         key (Developer Portal, General Information)"
            .to_string()
    })?;
    let key = parse_public_key(text)?;
    Ok(Preset::new("discord", Discord { key }, json_rule("/id"))
        .json_ack(DEFERRED)
        .without_secret("public_key"))
}

/// 32 bytes in hex that decode to a point of the curve that is not of small order.
fn parse_public_key(text: &str) -> Result<VerifyingKey, String> {
    let bytes = hex::decode(text.trim())
        .map_err(|_| "public_key: not hex (64 characters 0-9, a-f)".to_string())?;
    let bytes: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        format!(
            "public_key: {} bytes; an Ed25519 public key is 32 (64 hex characters)",
            bytes.len()
        )
    })?;
    let key = VerifyingKey::from_bytes(&bytes)
        .map_err(|_| "public_key: not an Ed25519 public key (not a point of the curve)")?;
    if key.is_weak() {
        return Err(
            "public_key: a weak (small-order) Ed25519 key, which anyone can sign for".into(),
        );
    }
    Ok(key)
}

#[derive(Debug)]
struct Discord {
    key: VerifyingKey,
}

impl Scheme for Discord {
    fn verify(
        &self,
        _keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let signature = header(request.headers, SIGNATURE)?;
        let timestamp = header(request.headers, TIMESTAMP)?;
        let when = parse_timestamp(timestamp, TIMESTAMP)?;
        let mut bytes = [0u8; 64];
        hex::decode_to_slice(signature, &mut bytes).map_err(|_| {
            VerifyError::Malformed(format!("`{SIGNATURE}` is not 128 hex characters"))
        })?;
        let mut message = Vec::with_capacity(timestamp.len() + request.body.len());
        message.extend_from_slice(timestamp.as_bytes());
        message.extend_from_slice(request.body);
        self.key
            .verify_strict(&message, &Signature::from_bytes(&bytes))
            .map_err(|_| VerifyError::Mismatch)?;
        check_window(when, now, tolerance_secs)?;
        Ok(0.into())
    }

    /// Only Discord holds the private key.
    fn sign(&self, _key: &Secret, _body: &[u8], _now: i64, _id: &str) -> Option<Signed> {
        None
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn coverage(&self) -> Coverage {
        Coverage::body_and(&[TIMESTAMP])
    }

    fn handshake(&self, _key: &Secret, request: &Request<'_>) -> Option<Reply> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        (body.get("type")?.as_u64()? == 1).then(|| Reply::json(&serde_json::json!({"type": 1})))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Reply, Request, Settings, Verifier, VerifyError};

    // Computed with PyNaCl 1.6.2 (libsodium), seed bytes 0..32; not Discord-issued.
    const PUBLIC_KEY: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
    const TS: &str = "1700000000";
    const BODY: &str = r#"{"id":"1000000000000000001","type":2,"application_id":"42"}"#;
    const SIG: &str = "cdde7f095e9b9501ea3a1b425c99451b2be9666b7ff083911da6c209be977698\
                       6851af4b6986b330376ed68f0f5a7c18d044137f9db52c6b52ec064d0e29c507";
    const PING: &str = r#"{"id":"1000000000000000002","type":1,"application_id":"42"}"#;
    const PING_SIG: &str = "77a7798362ad0138b9e4b8913ec44ffe0eb440f9ff82e9ce4d1c142bb6eeea62\
                            d038be95586b253d5292d365ebb2be59af537c8cd52012203937414c42b85002";
    const NOW: i64 = 1_700_000_100;

    fn with_key(key: &str, secrets: &[String]) -> Result<Verifier, String> {
        let settings = Settings {
            public_key: Some(key),
            ..Settings::default()
        };
        Verifier::with_settings("discord", &settings, secrets, None)
    }

    fn verifier() -> Verifier {
        with_key(PUBLIC_KEY, &[]).unwrap()
    }

    fn check(body: &str, sig: &str, ts: &str, now: i64) -> Result<usize, VerifyError> {
        let h = headers(&[("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", ts)]);
        verifier()
            .verify(&h, body.as_bytes(), now)
            .map(|v| v.secret_index())
    }

    #[test]
    fn verifies_what_pynacl_signed() {
        assert_eq!(check(BODY, SIG, TS, NOW), Ok(0));
        assert_eq!(check(BODY, &SIG.to_uppercase(), TS, NOW), Ok(0));
    }

    #[test]
    fn a_changed_byte_anywhere_is_a_mismatch() {
        let body = BODY.replace("42", "43");
        assert_eq!(check(&body, SIG, TS, NOW), Err(VerifyError::Mismatch));
        assert_eq!(
            check(BODY, SIG, "1700000001", NOW),
            Err(VerifyError::Mismatch)
        );
        let sig = format!("{}0", &SIG[..127]);
        assert_eq!(check(BODY, &sig, TS, NOW), Err(VerifyError::Mismatch));
        // Discord's own test of the endpoint: a well-formed signature that is wrong.
        assert_eq!(
            check(BODY, &"0".repeat(128), TS, NOW),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn the_window_is_checked_after_the_signature() {
        assert_eq!(check(BODY, SIG, TS, 1_700_000_300), Ok(0));
        assert_eq!(
            check(BODY, SIG, TS, 1_700_000_301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        let body = BODY.replace("42", "43");
        assert_eq!(
            check(&body, SIG, TS, 1_800_000_000),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn malformed_headers_are_named() {
        for (sig, ts) in [("abc", TS), (&SIG[..126], TS), (SIG, "17e8"), (SIG, "-1")] {
            assert!(
                matches!(check(BODY, sig, ts, NOW), Err(VerifyError::Malformed(_))),
                "{sig} {ts}"
            );
        }
        let h = headers(&[("X-Signature-Ed25519", SIG)]);
        assert_eq!(
            verifier().verify(&h, BODY.as_bytes(), NOW).unwrap_err(),
            VerifyError::MissingHeader("x-signature-timestamp".into())
        );
    }

    #[test]
    fn a_ping_is_answered_and_other_interactions_are_not() {
        let v = verifier();
        let h = headers(&[
            ("X-Signature-Ed25519", PING_SIG),
            ("X-Signature-Timestamp", TS),
        ]);
        let request = Request::new(&h, PING.as_bytes());
        let proof = v.verify_request(&request, NOW).unwrap();
        assert_eq!(
            v.handshake(&proof, &request),
            Some(Reply::json(&serde_json::json!({"type": 1})))
        );
        let h = headers(&[("X-Signature-Ed25519", SIG), ("X-Signature-Timestamp", TS)]);
        let request = Request::new(&h, BODY.as_bytes());
        let proof = v.verify_request(&request, NOW).unwrap();
        assert_eq!(v.handshake(&proof, &request), None);
        assert_eq!(v.ack(), Some(r#"{"type":5}"#));
    }

    #[test]
    fn nothing_can_be_signed() {
        assert_eq!(verifier().sign_request(BODY.as_bytes(), NOW, "d"), None);
        assert!(verifier().sign(BODY.as_bytes(), NOW, "d").is_empty());
    }

    #[test]
    fn the_public_key_is_the_credential_and_a_secret_is_refused() {
        let err = Verifier::new("discord", None, &[], None).unwrap_err();
        assert!(err.contains("needs `public_key = "), "{err}");
        let err = with_key(PUBLIC_KEY, &["s".to_string()]).unwrap_err();
        assert_eq!(
            err,
            "provider `discord` verifies with a public key (`public_key`), not a shared \
             secret: remove the secret"
        );
        let bad = |key: &str| with_key(key, &[]).unwrap_err();
        assert_eq!(bad("zz"), "public_key: not hex (64 characters 0-9, a-f)");
        assert_eq!(
            bad("03a1"),
            "public_key: 2 bytes; an Ed25519 public key is 32 (64 hex characters)"
        );
        // y = 2 gives no x: not a point.
        let not_a_point = format!("02{}", "00".repeat(31));
        assert!(bad(&not_a_point).contains("not a point of the curve"));
        // y = 1 is the identity, of small order.
        let identity = format!("01{}", "00".repeat(31));
        assert!(bad(&identity).contains("weak"));
        let settings = Settings {
            public_key: Some(PUBLIC_KEY),
            ..Settings::default()
        };
        let err = Verifier::with_settings("github", &settings, &["s".into()], None).unwrap_err();
        assert_eq!(
            err,
            "`public_key` is only for provider `discord`, not `github`"
        );
    }
}
