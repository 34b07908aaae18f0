//! Typeform: `Typeform-Signature: sha256=<base64>`, the HMAC-SHA256 of the raw body keyed by the
//! webhook's secret as UTF-8. No timestamp is signed. Dedup: the body's `event_id`.
//! Typeform publishes no vector and no library that signs; the vector here is computed
//! (signature-schemes.md §7.2).

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, json_rule};

pub const SIGNATURE: &str = "typeform-signature";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Base64,
    )
    .with_prefix("sha256=", true);
    Preset::new("typeform", scheme, json_rule("/event_id"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const SECRET: &str = "typeform_secret";
    const BODY: &str = r#"{"event_id":"01ABC","event_type":"form_response"}"#;
    const SIG: &str = "sha256=avoM/oP7xoyOktm7gKBSCvy0i7ltp/sf6guWr8qLwwA=";

    #[test]
    fn verifies_and_signs_the_computed_vector() {
        let v = Verifier::new("typeform", None, &[SECRET.to_string()], None).unwrap();
        let h = headers(&[("Typeform-Signature", SIG)]);
        assert!(v.verify(&h, BODY.as_bytes(), 0).is_ok());
        assert_eq!(
            v.verify(
                &h,
                br#"{"event_id":"01ABD","event_type":"form_response"}"#,
                0
            )
            .unwrap_err(),
            VerifyError::Mismatch
        );
        let bare = headers(&[("Typeform-Signature", SIG.trim_start_matches("sha256="))]);
        assert!(matches!(
            v.verify(&bare, BODY.as_bytes(), 0),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, ""),
            [("typeform-signature".to_string(), SIG.to_string())]
        );
        assert_eq!(v.default_dedup().to_string(), "json:/event_id");
    }
}
