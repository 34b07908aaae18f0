//! Slack: `X-Slack-Signature: v0=<hex>`, the HMAC-SHA256 of `v0:<X-Slack-Request-Timestamp>:<raw
//! body>` keyed by the app's signing secret as UTF-8; the timestamp must be within 300 s of now
//! either way, as in `slack-sdk`'s `SignatureVerifier` (`abs(now - ts) > 60 * 5` fails).
//!
//! When a request URL is set, Slack sends a signed `{"type":"url_verification","challenge":..}`:
//! answered `{"challenge":"..."}` (Slack accepts that JSON or the bare text; JSON is what its
//! docs show first), never stored or forwarded. An unsigned or badly signed one gets 401 like any
//! other request.
//!
//! Dedup: the Events API's `event_id` (retries, with `X-Slack-Retry-Num`, carry the same one);
//! slash commands and interactive payloads are forms without it, so for them the SHA-256 of the
//! body.

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, WithHandshake, json_rule};
use super::{Reply, Request, Secret};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-slack-signature";
pub const TIMESTAMP: &str = "x-slack-request-timestamp";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
    )
    .with_prefix("v0=", true)
    .with_timestamp(HeaderName::from_static(TIMESTAMP), "v0:", ":");
    let dedup = DedupRule::FirstOf(vec![json_rule("/event_id"), DedupRule::BodySha256]);
    Preset::new(
        "slack",
        WithHandshake {
            scheme,
            handshake: Some(slack_handshake),
            unsigned: None,
        },
        dedup,
    )
}

/// The answer to a verified URL check (`preset::Scheme::handshake`).
fn slack_handshake(_key: &Secret, request: &Request<'_>) -> Option<Reply> {
    let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
    if body.get("type")?.as_str()? != "url_verification" {
        return None;
    }
    let challenge = body.get("challenge")?.as_str()?;
    Some(Reply::json(&serde_json::json!({ "challenge": challenge })))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Request, Verifier, VerifyError};

    // Official vector: python-slack-sdk `tests/slack_sdk/signature/test_signature_verifier.py`
    // (values from Slack's docs), signature-schemes.md §7.1.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: i64 = 1531420618;
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn slack() -> Verifier {
        Verifier::new("slack", None, &[SECRET.to_string()], None).unwrap()
    }

    fn verify(ts: &str, sig: &str, body: &str, now: i64) -> Result<usize, VerifyError> {
        let h = headers(&[
            ("X-Slack-Request-Timestamp", ts),
            ("X-Slack-Signature", sig),
        ]);
        slack()
            .verify(&h, body.as_bytes(), now)
            .map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_official_vector_within_300_s_both_ways() {
        let ts = TS.to_string();
        assert_eq!(verify(&ts, SIG, BODY, TS), Ok(0));
        assert_eq!(verify(&ts, SIG, BODY, TS + 300), Ok(0));
        assert_eq!(verify(&ts, SIG, BODY, TS - 300), Ok(0));
        assert_eq!(
            verify(&ts, SIG, BODY, TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            verify(&ts, SIG, BODY, TS - 301),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        assert_eq!(
            verify(&ts, SIG, &BODY.replace("foobar", "foobaz"), TS),
            Err(VerifyError::Mismatch)
        );
        // The timestamp is signed.
        assert_eq!(
            verify(&(TS + 1).to_string(), SIG, BODY, TS),
            Err(VerifyError::Mismatch)
        );
        let bare = SIG.trim_start_matches("v0=");
        assert!(matches!(
            verify(&ts, bare, BODY, TS),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn signs_the_official_vector() {
        let signed = slack().sign(BODY.as_bytes(), TS, "ignored");
        assert_eq!(
            signed,
            [
                ("x-slack-signature".to_string(), SIG.to_string()),
                ("x-slack-request-timestamp".to_string(), TS.to_string()),
            ]
        );
    }

    #[test]
    fn answers_a_verified_url_verification_with_the_challenge() {
        let v = slack();
        let body = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let signed = headers(&v.sign(body, TS, ""));
        let request = Request::new(&signed, body);
        let proof = v.verify_request(&request, TS).unwrap();
        let reply = v.handshake(&proof, &request).unwrap();
        assert_eq!(reply.content_type, "application/json");
        assert_eq!(
            reply.body,
            br#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#
        );
        // An event is an event.
        let event = br#"{"type":"event_callback","event_id":"Ev1","challenge":"x"}"#;
        let signed = headers(&v.sign(event, TS, ""));
        let request = Request::new(&signed, event);
        let proof = v.verify_request(&request, TS).unwrap();
        assert_eq!(v.handshake(&proof, &request), None);
        assert_eq!(v.unsigned_handshake(&Request::new(&signed, body)), None);
    }

    #[test]
    fn dedups_on_event_id_else_the_body() {
        let rule = slack().default_dedup();
        assert_eq!(rule.to_string(), r#"["json:/event_id", "body-sha256"]"#);
        let none = http::HeaderMap::new();
        let event = br#"{"type":"event_callback","event_id":"Ev08MFMKH6J7"}"#;
        assert_eq!(rule.extract(&none, event).as_deref(), Ok("Ev08MFMKH6J7"));
        assert_eq!(
            rule.extract(&none, BODY.as_bytes()).map(|k| k.len()),
            Ok(64)
        );
    }
}
