//! WooCommerce: `X-WC-Webhook-Signature: <base64>`, the HMAC-SHA256 of the raw body keyed by the
//! webhook's secret as UTF-8 (`class-wc-webhook.php`: `base64_encode(hash_hmac('sha256',
//! $payload, $secret, true))`). No timestamp is signed.
//!
//! When a webhook is saved, WooCommerce POSTs the form `webhook_id=<n>` with no signature and
//! wants a 2xx before it activates the webhook: a request with no `X-WC-Webhook-Signature` at
//! all and exactly that body is answered 200 and never stored. Anything else unsigned gets 401.
//!
//! Dedup: the SHA-256 of the body. `X-WC-Webhook-Delivery-ID` is new on every delivery (a hash
//! of the webhook id and the time), so it would not catch a redelivery. The event type is
//! `X-WC-Webhook-Topic` (`order.created`, ...).

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, WithHandshake};
use super::{Reply, Request};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-wc-webhook-signature";
pub const TOPIC: &str = "x-wc-webhook-topic";
pub const DELIVERY_ID: &str = "x-wc-webhook-delivery-id";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Base64,
    )
    .with_delivery_header(HeaderName::from_static(DELIVERY_ID));
    Preset::new(
        "woocommerce",
        WithHandshake {
            scheme,
            handshake: None,
            unsigned: Some(woocommerce_ping),
        },
        DedupRule::BodySha256,
    )
    .event_type_header(TOPIC)
}

/// `webhook_id=` and 1 to 20 digits, nothing else.
fn is_creation_ping(body: &[u8]) -> bool {
    body.strip_prefix(b"webhook_id=")
        .is_some_and(|id| (1..=20).contains(&id.len()) && id.iter().all(u8::is_ascii_digit))
}

/// The answer to the unsigned creation ping (`preset::Scheme::unsigned_handshake`).
fn woocommerce_ping(request: &Request<'_>) -> Option<Reply> {
    let unsigned = !request.headers.contains_key(SIGNATURE);
    (unsigned && is_creation_ping(request.body))
        .then(|| Reply::json(&serde_json::json!({ "ping": "ok" })))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Request, Verifier, VerifyError};
    use super::is_creation_ping;

    // Computed vector (Python stdlib, signature-schemes.md §7.2): WooCommerce publishes none,
    // and its own code is PHP, which this machine does not run.
    const SECRET: &str = "woo_secret";
    const BODY: &str = r#"{"id":123,"status":"processing"}"#;
    const SIG: &str = "UyqdfIBBNFokgigVTFq/fX7Wvs8gwS5pNQ6gNNwZ7LY=";

    fn woo() -> Verifier {
        Verifier::new("woocommerce", None, &[SECRET.to_string()], None).unwrap()
    }

    #[test]
    fn verifies_the_computed_vector() {
        let h = headers(&[("X-WC-Webhook-Signature", SIG)]);
        assert!(woo().verify(&h, BODY.as_bytes(), 0).is_ok());
        assert_eq!(
            woo()
                .verify(&h, br#"{"id":124,"status":"processing"}"#, 0)
                .unwrap_err(),
            VerifyError::Mismatch
        );
        let signed = woo().sign(BODY.as_bytes(), 0, "d1");
        assert_eq!(
            signed[0],
            ("x-wc-webhook-signature".to_string(), SIG.to_string())
        );
        assert_eq!(woo().event_type_header(), Some("x-wc-webhook-topic"));
        assert_eq!(woo().default_dedup().to_string(), "body-sha256");
    }

    #[test]
    fn only_the_unsigned_creation_ping_is_answered() {
        let v = woo();
        let none = http::HeaderMap::new();
        let reply = v.unsigned_handshake(&Request::new(&none, b"webhook_id=42"));
        assert_eq!(reply.map(|r| r.body), Some(br#"{"ping":"ok"}"#.to_vec()));
        // With a signature header, even a wrong one, it is an event that failed: 401.
        let signed = headers(&[("X-WC-Webhook-Signature", SIG)]);
        assert_eq!(
            v.unsigned_handshake(&Request::new(&signed, b"webhook_id=42")),
            None
        );
        for body in [
            &b"webhook_id="[..],
            b"webhook_id=4a",
            b"webhook_id=42&x=1",
            b"webhook_id=42\n",
            b"{\"webhook_id\":42}",
            b"",
            b"webhook_id=123456789012345678901",
        ] {
            assert!(!is_creation_ping(body), "{}", String::from_utf8_lossy(body));
            assert_eq!(v.unsigned_handshake(&Request::new(&none, body)), None);
        }
    }
}
