//! Woovi (also OpenPix, one platform under two names): every delivery carries
//! `x-webhook-signature`, the base64 RSASSA-PKCS1-v1_5 / SHA-256 signature of the raw body by
//! Woovi's private key, and `x-openpix-signature`, the base64 HMAC-SHA1 of the raw body with
//! the webhook's own secret (deprecated by Woovi). Woovi's docs:
//! woovibr/woovi-developers `docs/webhook/seguranca/webhook-signature-validation.mdx` and
//! `webhook-hmac.mdx`; providers-br-3.md §3.
//!
//! An endpoint checks the forms it is configured for: the RSA one with `public_key_file`
//! (the default and recommended), the HMAC one with a secret, either passing when both are.
//! The key file holds Woovi's public key as PEM (one or more `BEGIN PUBLIC KEY` blocks), or is
//! the JSON answer of `GET https://api.woovi.com/api/v1/webhook/public-keys` saved as is,
//! every key it lists: during a rotation Woovi lists the old and the new key, and a signature
//! by any of them passes. Woovi's production key has 1024 bits (the sandbox's 2048), so keys
//! of 1024 bits are accepted here, which `ring` allows only as a legacy algorithm. This scheme
//! fetches nothing: save the key again when Woovi rotates.
//!
//! The event type is the body's `event` (`OPENPIX:CHARGE_COMPLETED`), the object id the
//! charge's `correlationID` (the merchant's own id). Dedup ([`DEDUP`]): `<event>:<charge
//! correlationID>:<pix endToEndId>`, all from the signed body: a charge's created, completed
//! and expired events are three, a static QR code's Pix (no charge) are one each by their
//! end-to-end id, a resend is the same key. A body without an `event`, or without both ids
//! (Woovi's test call, `{"evento":"teste_webhook"}`), is keyed by its SHA-256.

use std::time::Duration;

use http::{HeaderMap, HeaderName};
use ring::signature::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY;
use serde_json::Value;

use super::hmac_scheme::{Algorithm, Encoding, HmacScheme};
use super::patience::Rule;
use super::preset::{Preset, Scheme, Signed};
use super::rsa::{self, RsaKey};
use super::{Checked, Request, Secret, Settings, VerifyError, header};
use crate::dedup::{CustomKey, DedupError, DedupRule, body_key, fit};

pub const SIGNATURE: &str = "x-webhook-signature";
pub const HMAC_SIGNATURE: &str = "x-openpix-signature";

/// Woovi's production key's size.
const MIN_BITS: usize = 1024;

/// The default dedup key of a Woovi endpoint (see the module doc).
pub const DEDUP: CustomKey = CustomKey {
    name: "woovi-event-ids",
    key: dedup_key,
    items: None,
};

pub(super) fn preset(settings: &Settings<'_>) -> Result<Preset, String> {
    let keys = match settings.public_key_pem {
        Some(text) => parse_keys(text).map_err(|why| format!("public_key_file: {why}"))?,
        None => Vec::new(),
    };
    let hmac = HmacScheme::over_raw_body(
        HeaderName::from_static(HMAC_SIGNATURE),
        Algorithm::Sha1,
        Encoding::Base64,
    );
    let mut preset = Preset::new("woovi", Woovi { keys, hmac }, DedupRule::Custom(DEDUP))
        .type_at("json:/event")
        .id_at("json:/charge/correlationID")
        .without_secret("public_key_file")
        // 8 attempts, 10 s doubling to 1280 s: 2550 s in all (Woovi's "webhook-retry").
        .patience(
            "Woovi",
            Rule::Span {
                span: Duration::from_secs(2550),
                attempts: Some(8),
            },
        );
    preset.secret_too = true;
    Ok(preset)
}

/// The keys of a PEM file, or of the JSON of Woovi's public-keys endpoint.
fn parse_keys(text: &str) -> Result<Vec<RsaKey>, String> {
    if !text.trim_start().starts_with('{') {
        return rsa::from_pem(text, MIN_BITS);
    }
    let listed: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let pems: Vec<&str> = listed["public_keys"]
        .as_array()
        .map(|keys| keys.iter().filter_map(|k| k["key"].as_str()).collect())
        .unwrap_or_default();
    if pems.is_empty() {
        return Err("no `public_keys[].key` (the answer of Woovi's public-keys endpoint)".into());
    }
    rsa::from_pem(&pems.join("\n"), MIN_BITS)
}

struct Woovi {
    /// Woovi's public keys; empty: the RSA form is not checked.
    keys: Vec<RsaKey>,
    hmac: HmacScheme,
}

impl std::fmt::Debug for Woovi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Woovi")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Woovi {
    /// The position of Woovi's key that signed the body.
    fn rsa(&self, request: &Request<'_>) -> Result<usize, VerifyError> {
        let text = header(request.headers, SIGNATURE)?;
        let signature = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text)
            .map_err(|_| VerifyError::Malformed(format!("header `{SIGNATURE}` is not base64")))?;
        let params = &RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY;
        self.keys
            .iter()
            .position(|key| key.verify(params, request.body, &signature).is_ok())
            .ok_or(VerifyError::Mismatch)
    }
}

impl Scheme for Woovi {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let rsa = (!self.keys.is_empty()).then(|| self.rsa(request));
        let hmac = (!keys.is_empty())
            .then(|| (self.hmac).verify(keys, request.headers, request.body, now, tolerance_secs));
        // A form that passes is enough; else the failure of a form whose header came, else
        // the missing header of the first configured form.
        let (mut missing, mut failed) = (None, None);
        for result in [rsa, hmac].into_iter().flatten() {
            match result {
                Ok(index) => return Ok(index.into()),
                Err(e @ VerifyError::MissingHeader(_)) => {
                    missing.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        Err(failed.or(missing).unwrap_or(VerifyError::Mismatch))
    }

    /// Only the HMAC form can be imitated: Woovi alone holds the RSA key.
    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Some(self.hmac.sign(key, body, now, delivery_id).into())
    }

    fn sign_with_keys(&self, keys: &[Secret], body: &[u8], now: i64, id: &str) -> Option<Signed> {
        self.sign(keys.first()?, body, now, id)
    }

    /// With no secret, a public key is required.
    fn check_keys(&self, count: usize) -> Result<(), String> {
        match (count, self.keys.is_empty()) {
            (0, true) => Err(
                "provider `woovi` needs `public_key_file` (Woovi's public key, \
                 from https://api.woovi.com/api/v1/webhook/public-keys) or a secret (the \
                 webhook's HMAC secret, for `x-openpix-signature`, deprecated by Woovi)"
                    .to_string(),
            ),
            _ => Ok(()),
        }
    }
}

fn dedup_key(_headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
    let document: Option<Value> = serde_json::from_slice(body).ok();
    let text = |pointer: &str| match document.as_ref()?.pointer(pointer)? {
        Value::String(text) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    };
    let ids = (text("/charge/correlationID"), text("/pix/endToEndId"));
    Ok(match (text("/event"), ids) {
        (Some(event), (Some(_), _) | (_, Some(_))) => {
            let (charge, pix) = (ids.0.unwrap_or(""), ids.1.unwrap_or(""));
            fit(format!("{event}:{charge}:{pix}"))
        }
        _ => body_key(body),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::headers;
    use super::super::{Settings, Verifier, VerifyError};

    /// Woovi's published example (webhook-signature-validation.mdx @100e3cd9): the payload of
    /// its PHP sample, byte for byte (1,902 bytes, with `José`), signed with the production
    /// key, which the docs print as PEM.
    const PAYLOAD: &[u8] = include_bytes!("../../tests/fixtures/woovi/charge-completed.json");
    const PRODUCTION: &str = include_str!("../../tests/fixtures/woovi/public-key.pem");
    const SIGNATURE: &str = "lL2nnXgmLFGgxJ8+jCDguqouU4ucrIxYJcU5SPrJFaNcJajTJHYVldqc/z4YFIjAjtPEALe699WosgPY08W7CLpidvtm06Qwa4YMB0l/DcTS93O91NdSH/adjugEKiOb76Zj/0jB8mqOmWCFYbweOBa17bssuEkd5Lw7Q5L314Y=";

    /// Woovi's HMAC example (webhook-hmac.mdx @29cae64c): this body, this secret, this value.
    const HMAC_BODY: &[u8] =
        br#"{"data_criacao":"2021-08-10T20:32:14.429Z","evento":"teste_webhook"}"#;
    const HMAC_SECRET: &str = "hmac-secret-key";
    const HMAC: &str = "jgR2XF0PKDiAwHP1s+TryvxMySQ=";

    /// A 2048-bit key made with cryptography 50.0.2 (not Woovi's), and its signature of
    /// `NEW_BODY`: the key a rotation would bring.
    const NEW_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAz4eWNdNrmf+4/9WNJsGt
uRU7isW9gGmki/INjblndSMYKki8bFtgCaXlWTnouXQ2DjjPWd/I/zxPGRUglsV5
K8M5u0JQJ4qcnlAQQvIsNly/cFwvTKr5oIeDwbzjyPTpjmgTUJVSFhaVw0Y97uat
dR3LeriakjrCOXSb9EfUO5Do/gKE7Ypt4ZV9mvWha7Zu/RspNCNRI20ieXXCyosW
tuY7PcjQLkHeJiuTor/1TdHS65fkgJuYpB2KipW4BOolDCxZnXmUkhc3aKcl8WHP
p7KKFp2HstBS8JEkN6zNr5n7FFQQw7PtLk/ZdCZ+jHXOj71UU5zRP3YPVUHt5Sqd
NQIDAQAB
-----END PUBLIC KEY-----
";
    const NEW_BODY: &[u8] = br#"{"event":"OPENPIX:CHARGE_COMPLETED","charge":{"correlationID":"c-1"},"pix":{"endToEndId":"E1"}}"#;
    const NEW_SIGNATURE: &str = "De8i0EqgoBoVwRlioTTTc8PkORu2NrUJ7WbObEhpjg0OyOmAZznDGLh+1/ebsNu1QYkBs66RhGpfO527NSQsLLC5j8pGQTchgggfI69fXM5MMVY7AQQgOacCkfX+5UagmLGEk5GWJRLmMaVXRSSSt91eS+6Sesj0CM44B6BLbOftWebFByX4qOPFQXny6QLopPuzVfwK5p8s89rpAaU+Nuy0L5efZf6VHERQLLes/f1K6FG1O7h9UIs3RfmxSyMiEG+26xczDiWUTEwu1rrHjRmmDanZ0dhE5BIvHSaUKWNm3g0dNvopOkv1v5xXE9Y6J9H6Ciji58jO7hKAef6WyA==";

    fn verifier(provider: &str, keys: Option<&str>, secrets: &[&str]) -> Result<Verifier, String> {
        let settings = Settings {
            public_key_pem: keys,
            ..Settings::default()
        };
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::with_settings(provider, &settings, &secrets, None)
    }

    fn rsa(v: &Verifier, signature: &str, body: &[u8]) -> Result<usize, VerifyError> {
        let h = headers(&[("x-webhook-signature", signature)]);
        v.verify(&h, body, 0).map(|p| p.secret_index())
    }

    #[test]
    fn woovis_published_rsa_example_verifies_and_a_changed_byte_does_not() {
        let v = verifier("woovi", Some(PRODUCTION), &[]).unwrap();
        assert_eq!(PAYLOAD.len(), 1902);
        assert_eq!(rsa(&v, SIGNATURE, PAYLOAD), Ok(0));
        let mut changed = PAYLOAD.to_vec();
        changed[100] ^= 1;
        assert_eq!(rsa(&v, SIGNATURE, &changed), Err(VerifyError::Mismatch));
        // The same bytes re-serialised (what Woovi warns against) are another message.
        let reserialised = serde_json::from_slice::<serde_json::Value>(PAYLOAD)
            .unwrap()
            .to_string();
        assert_eq!(
            rsa(&v, SIGNATURE, reserialised.as_bytes()),
            Err(VerifyError::Mismatch)
        );
        // Another key's signature; a signature that is not base64; none.
        assert_eq!(rsa(&v, NEW_SIGNATURE, NEW_BODY), Err(VerifyError::Mismatch));
        assert!(matches!(
            rsa(&v, "not base64!", PAYLOAD),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(
            v.verify(&headers(&[("x-openpix-signature", HMAC)]), PAYLOAD, 0)
                .unwrap_err(),
            VerifyError::MissingHeader("x-webhook-signature".to_string())
        );
        // Only Woovi can sign this form.
        assert_eq!(v.sign_request(PAYLOAD, 0, ""), None);
        assert_eq!(v.provider(), "woovi");
        assert!(v.event_type_signed());
    }

    #[test]
    fn every_listed_key_verifies_during_a_rotation() {
        let both = format!("{NEW_KEY}{PRODUCTION}");
        let v = verifier("openpix", Some(&both), &[]).unwrap();
        assert_eq!(rsa(&v, NEW_SIGNATURE, NEW_BODY), Ok(0));
        assert_eq!(rsa(&v, SIGNATURE, PAYLOAD), Ok(1));
        // The public-keys endpoint's answer, saved as is.
        let listed = json!({"public_keys": [
            {"key_identifier": "new", "is_current": true, "key": NEW_KEY},
            {"key_identifier": "9dce6187", "is_current": false, "key": PRODUCTION},
        ]})
        .to_string();
        let v = verifier("woovi", Some(&listed), &[]).unwrap();
        assert_eq!(rsa(&v, SIGNATURE, PAYLOAD), Ok(1));
        assert_eq!(rsa(&v, NEW_SIGNATURE, NEW_BODY), Ok(0));
        for (bad, why) in [
            ("{\"public_keys\": []}", "no `public_keys[].key`"),
            ("{", "not JSON"),
            ("hello", "no `-----BEGIN PUBLIC KEY-----` block"),
        ] {
            let err = verifier("woovi", Some(bad), &[]).unwrap_err();
            assert!(
                err.starts_with("public_key_file: ") && err.contains(why),
                "{err}"
            );
        }
    }

    #[test]
    fn woovis_hmac_example_verifies_with_its_secret_and_rotates() {
        let v = verifier("woovi", None, &["old-secret", HMAC_SECRET]).unwrap();
        let h = |value: &str| headers(&[("X-OpenPix-Signature", value)]);
        assert_eq!(
            v.verify(&h(HMAC), HMAC_BODY, 0).map(|p| p.secret_index()),
            Ok(1)
        );
        let mut changed = HMAC_BODY.to_vec();
        changed[3] ^= 1;
        assert_eq!(
            v.verify(&h(HMAC), &changed, 0).unwrap_err(),
            VerifyError::Mismatch
        );
        let wrong = verifier("woovi", None, &["hmac-secret-kez"]).unwrap();
        assert_eq!(
            wrong.verify(&h(HMAC), HMAC_BODY, 0).unwrap_err(),
            VerifyError::Mismatch
        );
        // Woovi's doc at HEAD adds an `event` member to the body but keeps the value: that
        // body's HMAC is another (computed with Python's hmac and `openssl dgst`).
        let three = br#"{"data_criacao":"2021-08-10T20:32:14.429Z","evento":"teste_webhook","event":"OPENPIX:CHARGE_COMPLETED"}"#;
        assert!(v.verify(&h(HMAC), three, 0).is_err());
        assert!(
            v.verify(&h("/ea7YAJjvmfnRfuV+Xzl/HE8QDw="), three, 0)
                .is_ok()
        );
        // `portaria send` signs this form as Woovi does.
        let signed = verifier("woovi", None, &[HMAC_SECRET])
            .unwrap()
            .sign(HMAC_BODY, 0, "");
        assert_eq!(
            signed,
            [("x-openpix-signature".to_string(), HMAC.to_string())]
        );
    }

    #[test]
    fn with_both_forms_either_passes_and_without_either_it_does_not_load() {
        let v = verifier("woovi", Some(PRODUCTION), &[HMAC_SECRET]).unwrap();
        assert_eq!(rsa(&v, SIGNATURE, PAYLOAD), Ok(0));
        let hmac = headers(&[("x-openpix-signature", HMAC)]);
        assert!(v.verify(&hmac, HMAC_BODY, 0).is_ok());
        // A failing RSA signature is not rescued by a missing HMAC, and the reverse.
        assert_eq!(rsa(&v, SIGNATURE, HMAC_BODY), Err(VerifyError::Mismatch));
        let err = v.verify(&headers(&[("x", "y")]), PAYLOAD, 0).unwrap_err();
        assert_eq!(
            err,
            VerifyError::MissingHeader("x-webhook-signature".to_string())
        );
        let err = verifier("woovi", None, &[]).unwrap_err();
        assert!(
            err.starts_with("provider `woovi` needs `public_key_file`"),
            "{err}"
        );
        let err = verifier("github", Some(PRODUCTION), &["s"]).unwrap_err();
        assert_eq!(
            err,
            "`public_key_file` is only for provider `woovi`, not `github`"
        );
    }

    #[test]
    fn dedup_is_the_event_and_the_signed_ids() {
        let v = verifier("woovi", Some(PRODUCTION), &[]).unwrap();
        let key = |body: &[u8]| {
            v.default_dedup()
                .extract(&http::HeaderMap::new(), body)
                .unwrap()
        };
        assert_eq!(key(NEW_BODY), "OPENPIX:CHARGE_COMPLETED:c-1:E1");
        let created = br#"{"event":"OPENPIX:CHARGE_CREATED","charge":{"correlationID":"c-1"}}"#;
        assert_eq!(key(created), "OPENPIX:CHARGE_CREATED:c-1:");
        let static_qr = br#"{"event":"OPENPIX:TRANSACTION_RECEIVED","pix":{"endToEndId":"E9"}}"#;
        assert_eq!(key(static_qr), "OPENPIX:TRANSACTION_RECEIVED::E9");
        // Woovi's test call, and the published example (which has no `event`): the body.
        assert_eq!(key(HMAC_BODY).len(), 64);
        assert_eq!(key(PAYLOAD).len(), 64);
        assert_eq!(v.event_type_field().unwrap().to_string(), "json:/event");
        assert_eq!(
            v.object_id_field().unwrap().to_string(),
            "json:/charge/correlationID"
        );
        let patience = v.patience();
        assert_eq!(patience.gateway, "Woovi");
        let span = super::Duration::from_secs(2550);
        assert_eq!(
            patience.rule,
            super::Rule::Span {
                span,
                attempts: Some(8)
            }
        );
    }
}
