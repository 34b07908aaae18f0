//! Cielo (API E-commerce 3.0, "Post de Notificação"): no signature. The merchant registers up
//! to three custom headers (KEY/VALUE) with Cielo Support, and Cielo sends them on every
//! notification (docs.cielo.com.br; signature-schemes.md §3 and §9).
//!
//! Config: `credential_headers = ["X-Shop-Key", ...]` names the headers, and the secrets
//! (`secret`, `secrets`, `secret_env`, `secret_file`) give their values in the same order: one
//! secret per header, and every header must match. The headers are redacted before storage.
//! There is no rotation of a header set here (Cielo changes it through Support anyway).
//!
//! The body is only `{"PaymentId":..,"ChangeType":1}`: two status changes of one payment give
//! identical bodies. Dedup is on the body's SHA-256, so the endpoint's dedup window should be
//! short (see docs/providers.md), and the notification only says "look the payment up".
//!
//! Patience: a notification not answered 200 is tried again twice (the gateway's
//! "notification-post" page) or three times (the e-commerce split docs): 3 attempts is what
//! portaria says, and the schedule is not published (signature-schemes.md §9; reconcile.md §7).

use super::Settings;
use super::credential::Credential;
use super::patience::Rule;
use super::preset::Preset;
use crate::dedup::DedupRule;

pub(super) fn preset(settings: &Settings<'_>) -> Result<Preset, String> {
    let names = settings.credential_headers.ok_or_else(|| {
        "provider `cielo` needs `credential_headers = [\"...\"]`: the custom headers registered \
         with Cielo, one secret each in the same order"
            .to_string()
    })?;
    let credential = Credential::header_set(names)?;
    let headers = credential.headers();
    Ok(Preset::new("cielo", credential, DedupRule::BodySha256)
        .credential_headers(headers)
        .patience("Cielo", Rule::Attempts { attempts: 3 }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Settings, Verifier, VerifyError};

    const BODY: &[u8] = br#"{"PaymentId":"24bc8366-fc31-4d6c-8555-17049a836a07","ChangeType":1}"#;

    fn verifier(names: &[&str], secrets: &[&str]) -> Result<Verifier, String> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let settings = Settings {
            credential_headers: Some(&names),
            ..Settings::default()
        };
        Verifier::with_settings("cielo", &settings, &secrets, None)
    }

    #[test]
    fn every_configured_header_must_hold_its_secret() {
        let v = verifier(&["X-Shop-Key", "X-Shop-Id"], &["key-abc", "id-42"]).unwrap();
        let good = [("x-shop-key", "key-abc"), ("X-Shop-Id", "id-42")];
        assert_eq!(
            v.verify(&headers(&good), BODY, 0).map(|p| p.secret_index()),
            Ok(0)
        );
        let swapped = [("x-shop-key", "id-42"), ("X-Shop-Id", "key-abc")];
        assert_eq!(
            v.verify(&headers(&swapped), BODY, 0).unwrap_err(),
            VerifyError::Mismatch
        );
        assert_eq!(
            v.verify(&headers(&good[..1]), BODY, 0).unwrap_err(),
            VerifyError::MissingHeader("x-shop-id".to_string())
        );
        assert_eq!(v.credential_headers(), ["x-shop-key", "x-shop-id"]);
        assert_eq!(v.default_dedup().to_string(), "body-sha256");
        let signed = v.sign(BODY, 0, "");
        assert_eq!(signed.len(), 2);
        assert!(v.verify(&headers(&signed), BODY, 0).is_ok());
    }

    #[test]
    fn the_config_must_name_the_headers_and_give_one_secret_each() {
        let err = verifier(&["X-A", "X-B"], &["only-one"]).unwrap_err();
        assert!(err.contains("give 2 secret(s), one per header"), "{err}");
        assert!(!err.contains("only-one"), "{err}");
        let none = Verifier::new("cielo", None, &["s".to_string()], None).unwrap_err();
        assert!(
            none.starts_with("provider `cielo` needs `credential_headers"),
            "{none}"
        );
        assert!(verifier(&["a", "b", "c", "d"], &["1", "2", "3", "4"]).is_err());
        assert!(verifier(&["X-A", "X-B", "X-C"], &["1", "2", "3"]).is_ok());
    }
}
