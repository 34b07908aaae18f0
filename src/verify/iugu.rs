//! iugu: no signature, and no credential of iugu's own (its trigger has an event and a URL;
//! dev.iugu.com "Gatilhos"). So the credential is a secret the merchant puts in the trigger's
//! URL, `https://host/webhooks/iugu?token=<secret>` (`query_param` renames it), compared in
//! constant time; the query string is never stored. Since the URL travels with every request
//! and nothing else is proof, an `iugu` endpoint needs `allow_ips` (iugu publishes its egress
//! address, `98.82.243.132` since 2025-08-04): config refuses one without it
//! ([`Preset::needs_allow_ips`]). Verifying by fetching the invoice from iugu's API is the
//! other way, still to come.
//!
//! Body: `application/x-www-form-urlencoded`, Rails-style keys:
//! `event=invoice.status_changed&data[id]=<invoice>&data[status]=paid&...`. The event type is
//! the `event` field, the object id `data[id]` ([`Preset::type_at`]). Dedup ([`DEDUP`]):
//! `<event>:<data[id]>:<data[status]>` (a pending and a paid `status_changed` of one invoice
//! are two events; a resend repeats the payload); a body without `event` or `data[id]` is
//! keyed by its SHA-256. Nothing is signed: the type and key are marked unsigned.

use http::HeaderMap;

use super::Settings;
use super::credential::Credential;
use super::preset::Preset;
use crate::dedup::{CustomKey, DedupError, DedupRule, body_key, fit};

pub const DEFAULT_QUERY_PARAM: &str = "token";

/// iugu's published egress address (dev.iugu.com "Gatilhos", since 2025-08-04).
pub const EGRESS: &str = "98.82.243.132";

/// The default dedup key of an iugu endpoint (see the module doc).
pub const DEDUP: CustomKey = CustomKey {
    name: "iugu-event-id-status",
    key: dedup_key,
    items: None,
};

const NEEDS_ALLOW_IPS: &str = "iugu signs nothing and its only credential is the token in \
     the URL, so an `iugu` endpoint needs `allow_ips`: iugu publishes the address it sends \
     from, `allow_ips = [\"98.82.243.132/32\"]` (dev.iugu.com \"Gatilhos\"; check it there); \
     verifying by fetching the invoice from iugu's API is the other way, still to come";

pub(super) fn preset(settings: &Settings<'_>) -> Preset {
    let param = settings.query_param.unwrap_or(DEFAULT_QUERY_PARAM);
    Preset::new("iugu", Credential::query(param), DedupRule::Custom(DEDUP))
        .type_at("form:event")
        .id_at("form:data[id]")
        .needs_allow_ips(NEEDS_ALLOW_IPS)
}

fn dedup_key(_headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
    let field = |name: &str| {
        form_urlencoded::parse(body)
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
            .filter(|value| !value.is_empty())
    };
    Ok(match (field("event"), field("data[id]")) {
        (Some(event), Some(id)) => {
            let status = field("data[status]").unwrap_or_default();
            fit(format!("{event}:{id}:{status}"))
        }
        _ => body_key(body),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Request, Settings, Verifier, VerifyError};

    const BODY: &[u8] = b"event=invoice.status_changed&data%5Bid%5D=899E76B431864AAB854977026372A704&data%5Bstatus%5D=paid&data%5Baccount_id%5D=42591B1C08134F03B544FCE71238B582";

    fn verifier(param: Option<&str>, secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let settings = Settings {
            query_param: param,
            ..Settings::default()
        };
        Verifier::with_settings("iugu", &settings, &secrets, None).unwrap()
    }

    fn check(v: &Verifier, query: Option<&str>) -> Result<usize, VerifyError> {
        let h = http::HeaderMap::new();
        v.verify_request(&Request::new(&h, BODY).with_query(query), 0)
            .map(|p| p.secret_index())
    }

    #[test]
    fn the_token_in_the_url_is_the_credential_and_rotates() {
        let v = verifier(None, &["iugu-old-9f8e", "iugu-new-7d6c"]);
        assert_eq!(check(&v, Some("token=iugu-old-9f8e")), Ok(0));
        assert_eq!(check(&v, Some("token=iugu-new-7d6c")), Ok(1));
        assert_eq!(
            check(&v, Some("token=iugu-new-7d6d")),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(check(&v, Some("token=other")), Err(VerifyError::Mismatch));
        assert_eq!(
            check(&v, None),
            Err(VerifyError::MissingQuery("token".to_string()))
        );
        let renamed = verifier(Some("chave"), &["k"]);
        assert_eq!(check(&renamed, Some("chave=k")), Ok(0));
        let signed = renamed.sign_request(BODY, 0, "").unwrap();
        assert_eq!(signed.query.as_deref(), Some("chave=k"));
    }

    #[test]
    fn form_fields_give_the_type_the_id_and_the_key_marked_unsigned() {
        let v = verifier(None, &["t"]);
        assert_eq!(v.event_type_field().unwrap().to_string(), "form:event");
        assert_eq!(v.object_id_field().unwrap().to_string(), "form:data[id]");
        assert!(!v.event_type_signed());
        assert!(v.needs_allow_ips().unwrap().contains("98.82.243.132/32"));
        let key = |body: &[u8]| {
            v.default_dedup()
                .extract(&http::HeaderMap::new(), body)
                .unwrap()
        };
        assert_eq!(
            key(BODY),
            "invoice.status_changed:899E76B431864AAB854977026372A704:paid"
        );
        let pending = b"event=invoice.status_changed&data[id]=899E&data[status]=pending";
        assert_eq!(key(pending), "invoice.status_changed:899E:pending");
        assert_eq!(
            key(b"event=invoice.created&data[id]=899E"),
            "invoice.created:899E:"
        );
        assert_eq!(key(b"data[id]=899E").len(), 64);
        assert_eq!(key(b"{\"event\":\"x\"}").len(), 64);
    }
}
