//! PicPay: no signature. A static token the merchant gets from PicPay, compared in constant
//! time and never stored (providers-br-3.md §2):
//!
//! - Payment Link, and the Pix and Checkout APIs: saving the notification URL in the panel
//!   shows a token that PicPay sends in `Authorization` (the default; seen in PicPay's Payment
//!   Link docs; for the Pix/Checkout API the header is not in the stored docs and is assumed
//!   the same, unconfirmed). With or without a `Bearer ` ([`Credential::authorization`]). The
//!   body has an `event_type` ([`Preset::type_at`]); its other fields are unconfirmed.
//! - The legacy e-commerce API: PicPay POSTs to the payment's `callbackUrl` with the seller
//!   token in `x-seller-token` and a body of ids only, `{"referenceId", "authorizationId"}`;
//!   only an HTTP 200 counts. `credential_headers = ["x-seller-token"]` picks it (any one
//!   header name may be given, in case PicPay's other products use another); the object id is
//!   then `referenceId`, and there is no event type (read the status back from PicPay).
//!
//! Dedup: the body's SHA-256. The legacy body is the same for every status change of a
//! payment, so, as Cielo's, a `picpay` endpoint's `dedup_window` defaults to 10 minutes
//! (`config::dedup_window`): a resend within it is one event, a later status change another.
//! What PicPay retries, and when, is not documented.

use http::HeaderName;

use super::Settings;
use super::credential::Credential;
use super::preset::Preset;
use crate::dedup::DedupRule;

/// The legacy e-commerce API's header.
pub const SELLER_TOKEN: &str = "x-seller-token";

pub(super) fn preset(settings: &Settings<'_>) -> Result<Preset, String> {
    let name = match settings.credential_headers {
        None => None,
        Some([one]) => Some(
            HeaderName::from_bytes(one.as_bytes())
                .map_err(|_| format!("`credential_headers`: `{one}` is not a valid header name"))?,
        ),
        Some(_) => {
            return Err(
                "provider `picpay` takes one header in `credential_headers` (e.g. \
                        [\"x-seller-token\"] for the legacy e-commerce API); without it, \
                        the token is read from `Authorization`"
                    .to_string(),
            );
        }
    };
    let preset = match name {
        None => Preset::new("picpay", Credential::authorization(), DedupRule::BodySha256)
            .type_at("json:/event_type"),
        Some(name) => {
            let legacy = name == SELLER_TOKEN;
            let preset = Preset::new(
                "picpay",
                Credential::header(name.clone()),
                DedupRule::BodySha256,
            )
            .credential_headers(vec![name]);
            match legacy {
                true => preset.id_at("json:/referenceId"),
                false => preset,
            }
        }
    };
    Ok(preset)
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Settings, Verifier, VerifyError};

    const LEGACY: &[u8] =
        br#"{"referenceId":"102030","authorizationId":"555008cef7f321d00ef236333"}"#;

    fn verifier(header: Option<&str>, secrets: &[&str]) -> Result<Verifier, String> {
        let names: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        let settings = Settings {
            credential_headers: header.map(|_| names.as_slice()),
            ..Settings::default()
        };
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::with_settings("picpay", &settings, &secrets, None)
    }

    #[test]
    fn the_panel_token_in_authorization_by_default_and_it_rotates() {
        let v = verifier(None, &["old-panel-token", "new-panel-token"]).unwrap();
        let check = |value: &str| {
            v.verify(&headers(&[("authorization", value)]), b"{}", 0)
                .map(|p| p.secret_index())
        };
        assert_eq!(check("new-panel-token"), Ok(1));
        assert_eq!(check("Bearer old-panel-token"), Ok(0));
        assert_eq!(check("new-panel-tokem"), Err(VerifyError::Mismatch));
        assert_eq!(check("another-token"), Err(VerifyError::Mismatch));
        assert_eq!(
            v.event_type_field().unwrap().to_string(),
            "json:/event_type"
        );
        assert!(v.object_id_field().is_none());
        assert!(v.credential_headers().is_empty()); // Authorization: redacted always
        assert!(!v.event_type_signed());
        assert_eq!(v.default_dedup().to_string(), "body-sha256");
        assert!(v.verify(&headers(&v.sign(b"{}", 0, "")), b"{}", 0).is_ok());
    }

    #[test]
    fn the_legacy_seller_token_header_when_configured() {
        let seller = "4ef4edbd-5cda-42da-860b-0e8d7b90c784";
        let v = verifier(Some("x-seller-token"), &[seller]).unwrap();
        let ok = headers(&[("x-seller-token", seller)]);
        assert_eq!(v.verify(&ok, LEGACY, 0).map(|p| p.secret_index()), Ok(0));
        let wrong = headers(&[("x-seller-token", "4ef4edbd-5cda-42da-860b-0e8d7b90c785")]);
        assert_eq!(
            v.verify(&wrong, LEGACY, 0).unwrap_err(),
            VerifyError::Mismatch
        );
        // The panel's header is not this mode's credential.
        let other = headers(&[("authorization", seller)]);
        assert_eq!(
            v.verify(&other, LEGACY, 0).unwrap_err(),
            VerifyError::MissingHeader("x-seller-token".to_string())
        );
        assert_eq!(v.credential_headers(), ["x-seller-token"]);
        assert_eq!(
            v.object_id_field().unwrap().to_string(),
            "json:/referenceId"
        );
        assert!(v.event_type_field().is_none());
        assert_eq!(
            v.sign(LEGACY, 0, ""),
            [("x-seller-token".to_string(), seller.to_string())]
        );
    }

    #[test]
    fn one_valid_header_name_at_most() {
        let two = verifier(Some("a"), &["s"]).map(|_| ());
        assert!(two.is_ok());
        let names = ["x-a".to_string(), "x-b".to_string()];
        let settings = Settings {
            credential_headers: Some(&names),
            ..Settings::default()
        };
        let err =
            Verifier::with_settings("picpay", &settings, &["s".to_string()], None).unwrap_err();
        assert!(err.contains("takes one header"), "{err}");
        let err = verifier(Some("x seller"), &["s"]).unwrap_err();
        assert!(err.contains("not a valid header name"), "{err}");
    }
}
