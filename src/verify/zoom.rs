//! Zoom: `x-zm-signature: v0=<hex>`, the HMAC-SHA256 of `v0:<x-zm-request-timestamp>:<raw body>`
//! keyed by the app's Secret Token as UTF-8; the timestamp must be within 300 s either way.
//!
//! When the endpoint URL is validated, Zoom sends a signed
//! `{"event":"endpoint.url_validation","payload":{"plainToken":"..."}}` and wants, within 3 s,
//! `{"plainToken":"...","encryptedToken":"<hex HMAC-SHA256(secret token, plainToken)>"}`: answered
//! with the secret that verified the request, never stored or forwarded.
//!
//! Dedup: the SHA-256 of the body (Zoom sends no delivery id; a retry resends the same bytes).
//! Zoom publishes no test vector; the one here is computed (signature-schemes.md §7.2).

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, WithHandshake};
use super::{Reply, Request, Secret};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-zm-signature";
pub const TIMESTAMP: &str = "x-zm-request-timestamp";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
    )
    .with_prefix("v0=", true)
    .with_timestamp(HeaderName::from_static(TIMESTAMP), "v0:", ":");
    Preset::new(
        "zoom",
        WithHandshake {
            scheme,
            handshake: Some(zoom_handshake),
            unsigned: None,
        },
        DedupRule::BodySha256,
    )
}

/// The answer to a verified URL check (`preset::Scheme::handshake`).
fn zoom_handshake(key: &Secret, request: &Request<'_>) -> Option<Reply> {
    let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
    if body.get("event")?.as_str()? != "endpoint.url_validation" {
        return None;
    }
    let plain = body.pointer("/payload/plainToken")?.as_str()?;
    let encrypted = hex::encode(Algorithm::Sha256.mac(key.expose(), &[plain.as_bytes()]));
    Some(Reply::json(&serde_json::json!({
        "plainToken": plain,
        "encryptedToken": encrypted,
    })))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Request, Verifier, VerifyError};

    // Computed vector (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    const SECRET: &str = "zoom_secret_token";
    const TS: i64 = 1_700_000_000;
    const BODY: &str = r#"{"event":"meeting.started","event_ts":1700000000000}"#;
    const SIG: &str = "v0=a5772c155ed3e2bf7ade2acfd89ae175875879f7c8edd8fb36e43596baae1d28";

    fn zoom(secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::new("zoom", None, &secrets, None).unwrap()
    }

    #[test]
    fn verifies_the_computed_vector_within_300_s() {
        let v = zoom(&[SECRET]);
        let h = headers(&[
            ("x-zm-request-timestamp", "1700000000"),
            ("x-zm-signature", SIG),
        ]);
        assert!(v.verify(&h, BODY.as_bytes(), TS).is_ok());
        assert!(v.verify(&h, BODY.as_bytes(), TS - 300).is_ok());
        assert_eq!(
            v.verify(&h, BODY.as_bytes(), TS + 301).unwrap_err(),
            VerifyError::StaleTimestamp { skew_secs: 301 }
        );
        assert_eq!(v.verify(&h, b"{}", TS).unwrap_err(), VerifyError::Mismatch);
        assert_eq!(
            v.sign(BODY.as_bytes(), TS, ""),
            [
                ("x-zm-signature".to_string(), SIG.to_string()),
                ("x-zm-request-timestamp".to_string(), TS.to_string()),
            ]
        );
        assert_eq!(v.default_dedup().to_string(), "body-sha256");
    }

    #[test]
    fn answers_url_validation_with_the_key_that_verified() {
        // Signed with the second secret: the answer must use that one.
        let sender = zoom(&["new-secret"]);
        let v = zoom(&["old-secret", "new-secret"]);
        let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
        let h = headers(&sender.sign(body, TS, ""));
        let request = Request::new(&h, body);
        let proof = v.verify_request(&request, TS).unwrap();
        assert_eq!(proof.secret_index(), 1);
        let reply = v.handshake(&proof, &request).unwrap();
        // hex(HMAC-SHA256("new-secret", "qgg8vlvZRS6UYooatFL8Aw")), computed with Python's hmac.
        let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({
                "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                "encryptedToken": "72442ccdd6290c1eebe74ed224684b50e9ee69b94bd1daa05100f11e2b5f4587",
            })
        );
        assert_eq!(reply.content_type, "application/json");
        let event = headers(&sender.sign(BODY.as_bytes(), TS, ""));
        let request = Request::new(&event, BODY.as_bytes());
        let proof = v.verify_request(&request, TS).unwrap();
        assert_eq!(v.handshake(&proof, &request), None);
    }
}
