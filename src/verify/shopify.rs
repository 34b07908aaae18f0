//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, the HMAC-SHA256 of the raw body keyed by the
//! app's client secret (API secret key) as UTF-8. No timestamp is signed. An empty body is
//! refused, as in Shopify's own `shopify.webhooks.validate` (`@shopify/shopify-api`). The
//! other `X-Shopify-*` headers are not signed.
//!
//! Dedup: the body's SHA-256, the one thing signed. `X-Shopify-Event-Id` (Shopify's "ignore
//! duplicate webhooks" guide), else `X-Shopify-Webhook-Id`, was the key before; neither is
//! signed, so a captured delivery re-sent with a new id was a new event, forever (no timestamp
//! bounds it). A retry resends the same payload. What is lost: one event delivered to two
//! subscriptions whose payloads differ (two API versions) is two events now. Webhooks
//! triggered by hand from a store's notification settings are signed with another key and
//! fail, as they do in the SDK.

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::Preset;
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-shopify-hmac-sha256";
pub const EVENT_ID: &str = "x-shopify-event-id";
pub const WEBHOOK_ID: &str = "x-shopify-webhook-id";
pub const TOPIC: &str = "x-shopify-topic";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Base64,
    )
    .with_body_required()
    .with_delivery_header(HeaderName::from_static(WEBHOOK_ID))
    .with_delivery_header(HeaderName::from_static(EVENT_ID));
    Preset::new("shopify", scheme, DedupRule::BodySha256).event_type_header(TOPIC)
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed vector (Python stdlib, signature-schemes.md §7.2): Shopify publishes none.
    const SECRET: &str = "shpss_test_secret";
    const BODY: &str = r#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    const SIG: &str = "LnwdZPLBbdjkBwPD/lDL1/rYEGby/GHPtL1aAH6Dxjc=";

    fn verify(secret: &str, sig: &str, body: &str) -> Result<usize, VerifyError> {
        let v = Verifier::new("shopify", None, &[secret.to_string()], None).unwrap();
        let h = headers(&[("X-Shopify-Hmac-Sha256", sig)]);
        v.verify(&h, body.as_bytes(), 0).map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_computed_vector() {
        assert_eq!(verify(SECRET, SIG, BODY), Ok(0));
        let unpadded = SIG.trim_end_matches('=');
        assert_eq!(verify(SECRET, unpadded, BODY), Ok(0));
        assert_eq!(
            verify(SECRET, SIG, &BODY.replace("jon", "jan")),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(verify("shpss_other", SIG, BODY), Err(VerifyError::Mismatch));
    }

    #[test]
    fn an_empty_body_or_a_hex_signature_is_malformed() {
        assert!(matches!(
            verify(SECRET, SIG, ""),
            Err(VerifyError::Malformed(m)) if m.contains("body is empty")
        ));
        let hex = "2e7c1d64f2c16dd8e40703c3fe50cbd7fad81066f2fc61cfb4bd5a007e83c737";
        assert!(matches!(
            verify(SECRET, hex, BODY),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn signs_like_shopify_and_dedups_on_the_body() {
        let v = Verifier::new("shopify", None, &[SECRET.to_string()], None).unwrap();
        let signed = v.sign(BODY.as_bytes(), 0, "dlv_1");
        assert_eq!(
            signed[0],
            ("x-shopify-hmac-sha256".to_string(), SIG.to_string())
        );
        assert!(signed.contains(&("x-shopify-webhook-id".to_string(), "dlv_1".to_string())));
        assert_eq!(v.event_type_header(), Some("x-shopify-topic"));
        assert_eq!(v.default_dedup().to_string(), "body-sha256");
    }
}
