//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the raw body keyed by the
//! webhook secret as UTF-8. There is no timestamp, hence no replay window. The legacy SHA-1
//! header is ignored.
//!
//! Dedup: the body's SHA-256, the one thing signed. A redelivery carries the same payload (and
//! the same `X-GitHub-Delivery` GUID, which was the key before); the GUID is not signed, so a
//! captured delivery re-sent with a new GUID was a new event, forever (no timestamp bounds it).
//! Nor is `X-GitHub-Event`, the event type.
//!
//! Patience: none. GitHub does not retry a failed delivery by itself; it can be redelivered
//! from the hook's settings or its API within 3 days (docs.github.com "Handling failed webhook
//! deliveries"; reconcile.md §5 and §9).

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::patience::Rule;
use super::preset::Preset;
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-hub-signature-256";
pub const DELIVERY: &str = "x-github-delivery";
pub const EVENT: &str = "x-github-event";

pub fn scheme() -> HmacScheme {
    HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
    )
    .with_prefix("sha256=", true)
    .with_delivery_header(HeaderName::from_static(DELIVERY))
}

pub(super) fn preset() -> Preset {
    Preset::new("github", scheme(), DedupRule::BodySha256)
        .event_type_header(EVENT)
        .patience("GitHub", Rule::Never)
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    fn verify(secret: &str, signature: &str, body: &str) -> Result<usize, VerifyError> {
        let v = Verifier::new("github", None, &[secret.to_string()], None).unwrap();
        let h = headers(&[("X-Hub-Signature-256", signature)]);
        v.verify(&h, body.as_bytes(), 0).map(|v| v.secret_index())
    }

    // Official vector: github/docs `validating-webhook-deliveries.md`.
    #[test]
    fn verifies_the_docs_example() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            verify("It's a Secret to Everybody", sig, "Hello, World!"),
            Ok(0)
        );
        assert_eq!(
            verify("It's a Secret to Everybody", sig, "Hello, World?"),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("It's a secret to everybody", sig, "Hello, World!"),
            Err(VerifyError::Mismatch)
        );
    }

    // Official vector: octokit/webhooks-methods.js `test/sign.test.ts`.
    #[test]
    fn verifies_the_octokit_example() {
        let sig = "sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3";
        assert_eq!(verify("mysecret", sig, r#"{"foo":"bar"}"#), Ok(0));
    }

    #[test]
    fn requires_the_sha256_prefix_and_header() {
        let hex = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let r = verify("It's a Secret to Everybody", hex, "Hello, World!");
        assert!(matches!(r, Err(VerifyError::Malformed(_))));
        let r = verify(
            "It's a Secret to Everybody",
            "sha256=not-hex",
            "Hello, World!",
        );
        assert!(matches!(r, Err(VerifyError::Malformed(_))));
        // Only the legacy SHA-1 header: not enough.
        let v = Verifier::new("github", None, &["s".to_string()], None).unwrap();
        let h = headers(&[(
            "X-Hub-Signature",
            "sha1=0000000000000000000000000000000000000000",
        )]);
        assert_eq!(
            v.verify(&h, b"", 0).unwrap_err(),
            VerifyError::MissingHeader("x-hub-signature-256".to_string())
        );
    }

    #[test]
    fn signs_like_github() {
        let v = Verifier::new(
            "github",
            None,
            &["It's a Secret to Everybody".to_string()],
            None,
        )
        .unwrap();
        let signed = v.sign(b"Hello, World!", 0, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
        let expected = [
            (
                "x-hub-signature-256",
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            ),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ];
        let signed: Vec<_> = signed
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(signed, expected);
    }
}
