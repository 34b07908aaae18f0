//! Asaas: no signature. The "Token de autenticação" set on the webhook is sent verbatim in the
//! `asaas-access-token` header (docs.asaas.com, "Criar novo Webhook pela aplicação web";
//! signature-schemes.md §3). Several configured secrets are alternatives (rotation). The header
//! is a credential: redacted before the headers are stored.
//!
//! Delivery is at least once and the docs say to dedup on the event's body `id` (`evt_...`).

use http::HeaderName;

use super::catalog::{Preset, json_rule};
use super::credential::Credential;

pub const TOKEN: &str = "asaas-access-token";

pub(super) fn preset() -> Preset {
    let header = HeaderName::from_static(TOKEN);
    Preset::new(
        "asaas",
        Credential::header(header.clone()),
        json_rule("/id"),
    )
    .credential_headers(vec![header])
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const BODY: &[u8] =
        br#"{"id":"evt_05b708f961d739ea7eba7e4db318f621","event":"PAYMENT_RECEIVED"}"#;

    fn verifier(secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::new("asaas", None, &secrets, None).unwrap()
    }

    #[test]
    fn the_token_header_is_the_credential() {
        let v = verifier(&["tok_old", "tok_new"]);
        let h = headers(&[("asaas-access-token", "tok_new")]);
        assert_eq!(v.verify(&h, BODY, 0).map(|p| p.secret_index()), Ok(1));
        let h = headers(&[("asaas-access-token", "tok_other")]);
        assert_eq!(v.verify(&h, BODY, 0).unwrap_err(), VerifyError::Mismatch);
        assert_eq!(
            v.verify(&headers(&[("x-token", "tok_new")]), BODY, 0)
                .unwrap_err(),
            VerifyError::MissingHeader("asaas-access-token".to_string())
        );
    }

    #[test]
    fn the_header_is_redacted_and_dedup_is_the_event_id() {
        let v = verifier(&["tok"]);
        assert_eq!(v.credential_headers(), ["asaas-access-token"]);
        assert_eq!(v.default_dedup().to_string(), "json:/id");
        assert!(!v.signs_timestamp());
        let signed = v.sign(BODY, 0, "");
        assert_eq!(
            signed,
            [("asaas-access-token".to_string(), "tok".to_string())]
        );
        assert!(v.verify(&headers(&signed), BODY, 0).is_ok());
    }
}
