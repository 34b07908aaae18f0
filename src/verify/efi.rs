//! Efí (Gerencianet) Pix, in the mode that skips mTLS: the webhook is registered with
//! `x-skip-mtls-checking: true` and a secret in its URL, `?hmac=<secret>&ignorar=`, and that
//! query parameter is the credential (dev.efipay.com.br "Webhooks"; Efí community; signature-
//! schemes §3 and §9). Despite the name, nothing is an HMAC: the value is compared to the
//! secret. `query_param` renames the parameter.
//!
//! Efí appends `/pix` to the registered URL. With `&ignorar=` last, the `/pix` lands in that
//! ignored parameter and the path stays as registered; a URL without a query (the mTLS mode)
//! is called at its path plus `/pix`. So an `efi` endpoint answers on its path and on its path
//! followed by `/pix`, in both modes, and nowhere else ([`PIX`]): the path a user registers is
//! the path they configure. A secret that is the last thing in the URL gets `/pix` glued to it.
//!
//! The mTLS mode ([`mtls_preset`]): Efí presents a client certificate from its CA, which the
//! TLS listener verifies (`[server] tls.client_ca_file`) and the endpoint requires
//! (`require_client_cert`); the certificate is the credential, and nothing in the request is.
//! Config builds it for an `efi` endpoint that requires a client certificate and gives no
//! secret (docs/tls.md).
//!
//! Dedup ([`DEDUP`]): one webhook is one event, keyed by every item's `endToEndId` (the Pix
//! transaction's id), sorted and joined with `,`: a resend of the same webhook is a
//! duplicate, and two webhooks that share only their first Pix are two events (a key of the
//! first item alone made the second one's other Pix vanish as a duplicate). A key longer
//! than the limit is `sha256:` and the hash of that list; a body with no Pix items (Efí's
//! test call when the webhook is registered) is keyed by its SHA-256.

use http::HeaderMap;
use serde_json::Value;

use super::credential::Credential;
use super::preset::{Coverage, Preset, Scheme, Signed};
use super::{Checked, Request, Secret, Settings, VerifyError};
use crate::dedup::{CustomKey, DedupError, DedupRule, body_key, fit};

pub const DEFAULT_QUERY_PARAM: &str = "hmac";

/// What Efí appends to the registered URL.
pub const PIX: &str = "/pix";

/// What a path used twice, when it ends in [`PIX`], may owe to an `efi` endpoint (for config).
pub fn path_note(path: &str) -> &'static str {
    match path.ends_with(PIX) {
        true => " (an `efi` endpoint answers on its path and on it plus `/pix`)",
        false => "",
    }
}

/// The default dedup key of an Efí endpoint (see the module doc).
pub const DEDUP: CustomKey = CustomKey {
    name: "efi-pix-items",
    key: dedup_key,
    items: None,
};

pub(super) fn preset(settings: &Settings<'_>) -> Preset {
    let param = settings.query_param.unwrap_or(DEFAULT_QUERY_PARAM);
    Preset::new("efi", Credential::query(param), DedupRule::Custom(DEDUP)).appended_path(PIX)
}

/// The mTLS mode: the verified client certificate, checked before the body is read, is the
/// credential. Built only for an endpoint with `require_client_cert` (config refuses it
/// otherwise), so a request reaching [`Scheme::verify`] here came over such a connection.
pub(super) fn mtls_preset() -> Preset {
    let mut preset =
        Preset::new("efi", ClientCertificate, DedupRule::Custom(DEDUP)).appended_path(PIX);
    preset.public_key_setting = Some("require_client_cert");
    preset
}

/// The credential of the mTLS mode: the TLS layer has verified it; nothing here to check.
#[derive(Debug)]
struct ClientCertificate;

impl Scheme for ClientCertificate {
    fn verify(
        &self,
        _keys: &[Secret],
        _request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        Ok(0.into())
    }

    /// A sender proves itself with its certificate, not with anything in the request.
    fn sign(&self, _key: &Secret, _body: &[u8], _now: i64, _delivery_id: &str) -> Option<Signed> {
        None
    }

    fn coverage(&self) -> Coverage {
        Coverage::Connection
    }
}

fn dedup_key(_headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
    let Some(mut ids) = end_to_end_ids(body) else {
        return Ok(body_key(body));
    };
    ids.sort_unstable();
    ids.dedup();
    Ok(fit(ids.join(",")))
}

/// Every item's `endToEndId`; None if the body has no `pix` items. An item without one
/// (or with an empty one) is an error: the body claims Pix it does not identify.
fn end_to_end_ids(body: &[u8]) -> Option<Vec<String>> {
    let document: Value = serde_json::from_slice(body).ok()?;
    let items = document.get("pix")?.as_array().filter(|a| !a.is_empty())?;
    let mut ids = Vec::with_capacity(items.len());
    for item in items {
        match item.get("endToEndId") {
            Some(Value::String(id)) if !id.is_empty() => ids.push(id.clone()),
            // Hashing the whole body still dedups a resend of this exact webhook.
            _ => return None,
        }
    }
    Some(ids)
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
        let key = |body: &str| {
            v.default_dedup()
                .extract(&http::HeaderMap::new(), body.as_bytes())
        };
        // Every item counts, in any order: two webhooks sharing only their first Pix differ.
        let ab = key(r#"{"pix":[{"endToEndId":"E1"},{"endToEndId":"E2"}]}"#).unwrap();
        let ba = key(r#"{"pix":[{"endToEndId":"E2"},{"endToEndId":"E1"}]}"#).unwrap();
        let ac = key(r#"{"pix":[{"endToEndId":"E1"},{"endToEndId":"E3"}]}"#).unwrap();
        assert_eq!(ab, "E1,E2");
        assert_eq!(ab, ba);
        assert_ne!(ab, ac);
        // Efí's test call has no Pix: keyed by the body.
        let test = key(r#"{"evento":"teste_webhook"}"#).unwrap();
        assert_eq!(test.len(), 64);
        // Too many to join: a hash of the list, still the same for the same Pix.
        let many: Vec<String> = (0..40)
            .map(|i| format!(r#"{{"endToEndId":"E{i:031}"}}"#))
            .collect();
        let long = key(&format!(r#"{{"pix":[{}]}}"#, many.join(","))).unwrap();
        assert!(long.starts_with("sha256:") && long.len() == 71, "{long}");
        let signed = v.sign_request(BODY, 0, "").unwrap();
        assert_eq!(signed.query.as_deref(), Some("hmac=e5f1-secret"));
        assert!(signed.headers.is_empty());
    }
}
