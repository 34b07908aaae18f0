//! Intercom: `X-Hub-Signature: sha1=<hex>`, the HMAC-SHA1 of the raw body keyed by the app's
//! `client_secret` as UTF-8 (Intercom's developer docs; SHA-1 is Intercom's choice, not ours).
//! No timestamp is signed. Dedup: the notification's `id` (`notif_...`), the same on a retry.
//! Intercom publishes no vector and no library that signs; the vector here is computed
//! (signature-schemes.md §7.2).

use http::HeaderName;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::preset::{Preset, json_rule};

pub const SIGNATURE: &str = "x-hub-signature";

pub(super) fn preset() -> Preset {
    let scheme = HmacScheme::over_raw_body(
        HeaderName::from_static(SIGNATURE),
        Algorithm::Sha1,
        Encoding::Hex,
    )
    .with_prefix("sha1=", true);
    Preset::new("intercom", scheme, json_rule("/id"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const SECRET: &str = "intercom_client_secret";
    const BODY: &str = r#"{"type":"notification_event","id":"notif_1"}"#;
    const SIG: &str = "sha1=3faebb0034e47694de045ab8bc314399711ff673";

    #[test]
    fn verifies_and_signs_the_computed_vector() {
        let v = Verifier::new("intercom", None, &[SECRET.to_string()], None).unwrap();
        let h = headers(&[("X-Hub-Signature", SIG)]);
        assert!(v.verify(&h, BODY.as_bytes(), 0).is_ok());
        assert_eq!(
            v.verify(&h, br#"{"type":"notification_event","id":"notif_2"}"#, 0)
                .unwrap_err(),
            VerifyError::Mismatch
        );
        let bare = headers(&[("X-Hub-Signature", SIG.trim_start_matches("sha1="))]);
        assert!(matches!(
            v.verify(&bare, BODY.as_bytes(), 0),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, ""),
            [("x-hub-signature".to_string(), SIG.to_string())]
        );
        assert_eq!(v.default_dedup().to_string(), "json:/id");
    }
}
