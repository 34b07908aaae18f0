//! plowf: `X-Webhook-Signature` carries the HMAC-SHA256 of the raw body in hex, keyed by the
//! webhook token.
//!
//! plowf does not document its signature (see signature-schemes.md §5), so this preset is
//! lenient on spelling: either hex case, with or without a `sha256=` prefix. It is a plain
//! [`HmacScheme`] so it can be pinned down in one place once a real delivery is captured.

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::Preset;
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-webhook-signature";

pub fn scheme() -> HmacScheme {
    HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
    )
    .with_prefix("sha256=", false)
}

/// No delivery id or event type header is documented: dedup on the body.
pub(super) fn preset() -> Preset {
    Preset::new("plowf", scheme(), DedupRule::BodySha256)
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed here with Python's hmac (plowf publishes no vector).
    const BODY: &str = r#"{"event":"charge.paid","data":{"uuid":"c1","status":"PAID"}}"#;
    const MAC: &str = "991dbab0b3d560e65acec03c152dff1b37b4b810204b1889ffd8e42e990cc4d7";

    fn verify(value: &str) -> Result<usize, VerifyError> {
        let v = Verifier::new("plowf", None, &["plowf_token".to_string()], None).unwrap();
        let h = headers(&[("X-Webhook-Signature", value)]);
        v.verify(&h, BODY.as_bytes(), 0).map(|v| v.secret_index())
    }

    #[test]
    fn accepts_either_hex_case_with_or_without_prefix() {
        assert_eq!(verify(MAC), Ok(0));
        assert_eq!(verify(&MAC.to_uppercase()), Ok(0));
        assert_eq!(verify(&format!("sha256={MAC}")), Ok(0));
    }

    #[test]
    fn rejects_other_prefixes_and_wrong_macs() {
        assert!(matches!(
            verify(&format!("sha1={MAC}")),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(verify(&"0".repeat(64)), Err(VerifyError::Mismatch));
    }

    #[test]
    fn signs_bare_hex() {
        let v = Verifier::new("plowf", None, &["plowf_token".to_string()], None).unwrap();
        let signed = v.sign(BODY.as_bytes(), 0, "ignored");
        assert_eq!(
            signed,
            [("x-webhook-signature".to_string(), MAC.to_string())]
        );
    }
}
