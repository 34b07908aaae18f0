//! Efí (Gerencianet) Pix, in the mode that skips mTLS: the webhook is registered with
//! `x-skip-mtls-checking: true` and a secret in its URL, `?hmac=<secret>&ignorar=`, and that
//! query parameter is the credential (dev.efipay.com.br "Webhooks"; Efí community; signature-
//! schemes §3 and §9). Despite the name, nothing is an HMAC: the value is compared to the
//! secret. `query_param` renames the parameter.
//!
//! Efí appends `/pix` to the registered URL. With `&ignorar=` last, the `/pix` lands in that
//! ignored parameter and the endpoint path stays as registered; without it, the path must end
//! in `/pix`, and a secret that is the last thing in the URL would get `/pix` glued to it.
//! The mTLS mode (Efí's client certificate, required by Banco Central's rules otherwise) needs
//! TLS in portaria, which is not there yet.
//!
//! Dedup: `/pix/0/endToEndId`, the Pix transaction's id (a body may batch several Pix; the
//! first one names the delivery).

use super::Settings;
use super::catalog::{Preset, json_rule};
use super::credential::Credential;

pub const DEFAULT_QUERY_PARAM: &str = "hmac";

pub(super) fn preset(settings: &Settings<'_>) -> Preset {
    let param = settings.query_param.unwrap_or(DEFAULT_QUERY_PARAM);
    Preset::new(
        "efi",
        Credential::query(param),
        json_rule("/pix/0/endToEndId"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::{Request, Verifier, VerifyError};

    const BODY: &[u8] = br#"{"pix":[{"endToEndId":"E12345678202611300800abcdef12345","txid":"7978c0c97ea847e78e8849634473c1f1","valor":"110.00"}]}"#;

    fn check(query: Option<&str>) -> Result<usize, VerifyError> {
        let v = Verifier::new("efi", None, &["e5f1-secret".to_string()], None).unwrap();
        let h = http::HeaderMap::new();
        v.verify_request(&Request::new(&h, BODY).with_query(query), 0)
            .map(|p| p.secret_index())
    }

    #[test]
    fn the_hmac_parameter_is_the_credential() {
        assert_eq!(check(Some("hmac=e5f1-secret&ignorar=/pix")), Ok(0));
        assert_eq!(check(Some("ignorar=&hmac=e5f1-secret")), Ok(0));
        // Registered with the secret last: Efí's `/pix` spoils it.
        assert_eq!(
            check(Some("hmac=e5f1-secret/pix")),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(None),
            Err(VerifyError::MissingQuery("hmac".to_string()))
        );
    }

    #[test]
    fn dedups_on_the_end_to_end_id_and_signs_the_query() {
        let v = Verifier::new("efi", None, &["e5f1-secret".to_string()], None).unwrap();
        let key = v.default_dedup().extract(&http::HeaderMap::new(), BODY);
        assert_eq!(key.as_deref(), Ok("E12345678202611300800abcdef12345"));
        let signed = v.sign_request(BODY, 0, "").unwrap();
        assert_eq!(signed.query.as_deref(), Some("hmac=e5f1-secret"));
        assert!(signed.headers.is_empty());
    }
}
