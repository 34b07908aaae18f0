//! Rede (e.Rede) Pix: no signature. When the notification URL is registered, the merchant may
//! give an `authorization` (`{type: "Bearer" | "Basic", token}`), and Rede sends the token
//! verbatim in the `Authorization` header of every notification; integrators put the scheme
//! in the token, so it arrives as `Bearer <secret>` (providers-br-3.md §1, from independent
//! integrations: Rede's portal is not public). The secret may be given either way (`Bearer
//! s3cr3t` or `s3cr3t`): [`Credential::authorization`]. `Authorization` is never stored.
//!
//! Rede probes the URL with a bare GET when it is registered: answered 200, nothing stored.
//!
//! Body: `{"id", "companyNumber", "events": ["PV.UPDATE_TRANSACTION_PIX"], "data": {"id":
//! <TID>, ...}}`. The event type is `events[0]` (`PV.UPDATE_TRANSACTION_PIX` paid,
//! `PV.REFUND_PIX` refunded), the object id `data.id`, the e.Rede TID ([`Preset::type_at`]).
//! Dedup ([`DEDUP`]): `<events[0]>:<data.id>`, since a payment and a refund of one TID are two
//! events; a body without both is keyed by its SHA-256. Nothing signs the body, so the key,
//! like the type, is as good as the credential (marked unsigned for the targets): keep HTTPS,
//! and look the TID up (`GET /erede/v2/transactions/{tid}`) before releasing goods.

use http::HeaderMap;
use serde_json::Value;

use super::credential::Credential;
use super::preset::Preset;
use crate::dedup::{CustomKey, DedupError, DedupRule, body_key, fit};

/// The default dedup key of a Rede endpoint (see the module doc).
pub const DEDUP: CustomKey = CustomKey {
    name: "rede-event-tid",
    key: dedup_key,
    items: None,
};

pub(super) fn preset() -> Preset {
    Preset::new(
        "rede",
        Credential::authorization(),
        DedupRule::Custom(DEDUP),
    )
    .type_at("json:/events/0")
    .id_at("json:/data/id")
    .answers_get()
}

fn dedup_key(_headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
    let document: Option<Value> = serde_json::from_slice(body).ok();
    let text = |pointer: &str| match document.as_ref()?.pointer(pointer)? {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    };
    Ok(match (text("/events/0"), text("/data/id")) {
        (Some(event), Some(tid)) => fit(format!("{event}:{tid}")),
        _ => body_key(body),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const BODY: &[u8] = br#"{"id":"f0c1","companyNumber":"12345678","events":["PV.UPDATE_TRANSACTION_PIX"],"data":{"id":"TID1234567890","txid":"7978c0c9","endToEndId":"E1234"}}"#;

    fn verifier(secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::new("rede", None, &secrets, None).unwrap()
    }

    fn check(v: &Verifier, authorization: &str) -> Result<usize, VerifyError> {
        let h = headers(&[("authorization", authorization)]);
        v.verify(&h, BODY, 0).map(|p| p.secret_index())
    }

    #[test]
    fn the_authorization_rede_was_given_is_the_credential_and_rotates() {
        let v = verifier(&["Bearer rede-old-s3cr3t", "rede-new-s3cr3t"]);
        assert_eq!(check(&v, "Bearer rede-old-s3cr3t"), Ok(0));
        assert_eq!(check(&v, "Bearer rede-new-s3cr3t"), Ok(1));
        assert_eq!(check(&v, "rede-new-s3cr3t"), Ok(1));
        // A changed byte, another credential, none.
        assert_eq!(
            check(&v, "Bearer rede-new-s3cr3u"),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(check(&v, "Bearer other"), Err(VerifyError::Mismatch));
        assert_eq!(
            v.verify(&headers(&[("x-token", "rede-new-s3cr3t")]), BODY, 0)
                .map(|p| p.secret_index()),
            Err(VerifyError::MissingHeader("authorization".to_string()))
        );
        // What `portaria send` adds verifies.
        assert!(v.verify(&headers(&v.sign(BODY, 0, "")), BODY, 0).is_ok());
    }

    #[test]
    fn type_id_and_dedup_come_from_events_and_the_tid_marked_unsigned() {
        let v = verifier(&["s"]);
        assert_eq!(v.event_type_field().unwrap().to_string(), "json:/events/0");
        assert_eq!(v.object_id_field().unwrap().to_string(), "json:/data/id");
        assert!(!v.event_type_signed());
        assert!(v.static_credential());
        assert!(v.answers_get());
        assert!(v.credential_headers().is_empty()); // Authorization: redacted always
        let key = |body: &str| {
            v.default_dedup()
                .extract(&http::HeaderMap::new(), body.as_bytes())
                .unwrap()
        };
        assert_eq!(
            key(std::str::from_utf8(BODY).unwrap()),
            "PV.UPDATE_TRANSACTION_PIX:TID1234567890"
        );
        let refund = r#"{"events":["PV.REFUND_PIX"],"data":{"id":"TID1234567890"}}"#;
        assert_eq!(key(refund), "PV.REFUND_PIX:TID1234567890");
        // No event or no TID: the body's hash.
        assert_eq!(key(r#"{"data":{"id":"T"}}"#).len(), 64);
        assert_eq!(key(r#"{"events":[],"data":{"id":"T"}}"#).len(), 64);
        let long = format!(
            r#"{{"events":["E"],"data":{{"id":"{}"}}}}"#,
            "9".repeat(600)
        );
        assert!(key(&long).starts_with("sha256:"));
    }
}
