//! Vindi (recorrência): no signature. The webhook URL carries the credential, either as
//! `https://user:password@host/...` (the client sends it as `Authorization: Basic`) or as a
//! secret query parameter (portal-dev-vindi "Webhooks: segurança e testes"; signature-schemes
//! §9). The endpoint accepts either: Basic when the request has `Authorization` (and then only
//! Basic: a wrong one is not rescued by the query), else the query parameter, `token` unless
//! `query_param` names another. A secret with a `:` is a `user:password` pair (percent-decoded,
//! as the client sends it); any secret may match either way, so a token and a pair may be
//! configured side by side while switching.
//!
//! No delivery id: dedup on the body's SHA-256.
//!
//! Patience: 15 retries over about 48 h (one version of the page says 10); a 3xx counts as a
//! failure, and an answer must come within 20 s (portal-dev-vindi "Webhooks: segurança e
//! testes", atendimento.vindi.com.br article 203305800; signature-schemes.md §9).

use super::Settings;
use super::credential::Credential;
use super::patience::Rule;
use super::preset::Preset;
use crate::dedup::DedupRule;

pub const DEFAULT_QUERY_PARAM: &str = "token";

pub(super) fn preset(settings: &Settings<'_>) -> Preset {
    let param = settings.query_param.unwrap_or(DEFAULT_QUERY_PARAM);
    Preset::new(
        "vindi",
        Credential::basic_or_query(param),
        DedupRule::BodySha256,
    )
    .patience(
        "Vindi",
        Rule::Span {
            span: std::time::Duration::from_secs(48 * 3600),
            attempts: Some(15),
        },
    )
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::super::tests::headers;
    use super::super::{Request, Settings, Verifier, VerifyError};

    const BODY: &[u8] = br#"{"event":{"type":"bill_paid","created_at":"2026-11-30T08:00:00.000-03:00","data":{"bill":{"id":42}}}}"#;

    fn verifier(param: Option<&str>, secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let settings = Settings {
            query_param: param,
            ..Settings::default()
        };
        Verifier::with_settings("vindi", &settings, &secrets, None).unwrap()
    }

    fn check(v: &Verifier, auth: Option<&str>, query: Option<&str>) -> Result<usize, VerifyError> {
        let pairs: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let h = headers(&pairs);
        v.verify_request(&Request::new(&h, BODY).with_query(query), 0)
            .map(|p| p.secret_index())
    }

    #[test]
    fn basic_from_the_url_userinfo_or_the_token_parameter() {
        let v = verifier(None, &["vindi:s3nh@", "tok_9f8e"]);
        let basic = format!("Basic {}", STANDARD.encode("vindi:s3nh@"));
        assert_eq!(check(&v, Some(&basic), None), Ok(0));
        assert_eq!(check(&v, None, Some("token=tok_9f8e")), Ok(1));
        assert_eq!(
            check(&v, None, Some("token=tok_9f8f")),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(&v, None, None),
            Err(VerifyError::MissingQuery("token".to_string()))
        );
        let wrong = format!("Basic {}", STANDARD.encode("vindi:senha"));
        assert_eq!(
            check(&v, Some(&wrong), Some("token=tok_9f8e")),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn the_parameter_name_is_configurable_and_sign_follows_the_secret() {
        let v = verifier(Some("chave"), &["tok_1"]);
        assert_eq!(check(&v, None, Some("chave=tok_1")), Ok(0));
        assert_eq!(
            check(&v, None, Some("token=tok_1")),
            Err(VerifyError::MissingQuery("chave".to_string()))
        );
        let signed = v.sign_request(BODY, 0, "").unwrap();
        assert_eq!(signed.query.as_deref(), Some("chave=tok_1"));
        let pair = verifier(None, &["u:p"]);
        let signed = pair.sign_request(BODY, 0, "").unwrap();
        assert_eq!(signed.query, None);
        assert_eq!(
            signed.headers,
            [("authorization".to_string(), "Basic dTpw".to_string())]
        );
        assert_eq!(pair.default_dedup().to_string(), "body-sha256");
        assert!(pair.credential_headers().is_empty()); // Authorization: redacted always
    }
}
