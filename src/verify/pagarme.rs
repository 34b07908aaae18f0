//! Pagar.me postbacks: `X-Hub-Signature: <algorithm>=<hex>`, an HMAC of the raw body keyed by
//! the API key. The prefix names the algorithm: `sha256=`, or `sha1=`, which legacy (v1-v4)
//! postbacks send. Anything else is refused rather than guessed.
//!
//! Pagar.me v5's RS256 `X-Webhook-Asymmetric-Signature` is a different scheme, not handled here.

use http::{HeaderMap, HeaderName};

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, header};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-hub-signature";

/// One preset per algorithm the prefix may name.
fn scheme(algorithm: Algorithm, prefix: &str) -> HmacScheme {
    HmacScheme::over_raw_body(HeaderName::from_static(SIGNATURE), algorithm, Encoding::Hex)
        .with_prefix(prefix, true)
}

pub(super) fn verify(
    keys: &[Secret],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<usize, VerifyError> {
    let value = header(headers, SIGNATURE)?;
    let scheme = match value.split_once('=') {
        Some(("sha256", _)) => scheme(Algorithm::Sha256, "sha256="),
        Some(("sha1", _)) => scheme(Algorithm::Sha1, "sha1="),
        _ => {
            return Err(VerifyError::Malformed(format!(
                "header `{SIGNATURE}` is not `sha256=<hex>` or `sha1=<hex>`"
            )));
        }
    };
    // No timestamp in this scheme, so `now` and the tolerance play no part.
    scheme.verify(keys, headers, body, 0, 0)
}

/// Signs the way current postbacks do, with SHA-256.
pub(super) fn sign(key: &Secret, body: &[u8]) -> Vec<(String, String)> {
    scheme(Algorithm::Sha256, "sha256=").sign(key, body, 0, "")
}

/// Postbacks carry no delivery id: dedup on the body.
pub(super) fn preset() -> Preset {
    Preset::new("pagarme", Pagarme, DedupRule::BodySha256)
}

#[derive(Debug)]
struct Pagarme;

impl Scheme for Pagarme {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body).map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], _now: i64, _delivery_id: &str) -> Option<Signed> {
        Some(sign(key, body).into())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const BODY: &str = "id=194330&event=transaction_status_changed&current_status=paid";

    fn verify(secret: &str, signature: &str) -> Result<usize, VerifyError> {
        let v = Verifier::new("pagarme", None, &[secret.to_string()], None).unwrap();
        let h = headers(&[("X-Hub-Signature", signature)]);
        v.verify(&h, BODY.as_bytes(), 0).map(|v| v.secret_index())
    }

    // Computed vector (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    #[test]
    fn verifies_a_legacy_sha1_postback() {
        let sig = "sha1=039e6a8682ba6e23add3283f5c86fd9c000c8f51";
        assert_eq!(verify("ak_test_key", sig), Ok(0));
        assert_eq!(verify("ak_live_key", sig), Err(VerifyError::Mismatch));
    }

    // Computed here with Python's hmac, not provider-issued.
    #[test]
    fn verifies_sha256_and_signs_with_it() {
        let sig = "sha256=b31b7d9e36683e98252f0137789db869537adb4db47e1241d25770be7396f170";
        assert_eq!(verify("ak_test_key", sig), Ok(0));
        let v = Verifier::new("pagarme", None, &["ak_test_key".to_string()], None).unwrap();
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, "x"),
            [("x-hub-signature".to_string(), sig.to_string())]
        );
    }

    #[test]
    fn the_prefix_picks_the_algorithm() {
        // A SHA-1 MAC labelled sha256 has the wrong length; a SHA-256 one labelled sha1 too.
        let r = verify(
            "ak_test_key",
            "sha256=039e6a8682ba6e23add3283f5c86fd9c000c8f51",
        );
        assert!(matches!(r, Err(VerifyError::Malformed(_))));
        let sha256 = "b31b7d9e36683e98252f0137789db869537adb4db47e1241d25770be7396f170";
        assert!(matches!(
            verify("ak_test_key", &format!("sha1={sha256}")),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn other_prefixes_are_malformed() {
        for bad in [
            "md5=039e6a86",
            "SHA1=039e6a8682ba6e23add3283f5c86fd9c000c8f51",
            "039e6a86",
        ] {
            assert!(
                matches!(verify("ak_test_key", bad), Err(VerifyError::Malformed(_))),
                "{bad}"
            );
        }
    }
}
