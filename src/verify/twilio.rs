//! Twilio: `X-Twilio-Signature: <base64>`, the HMAC-SHA1 (keyed by the account's Auth Token as
//! UTF-8) of the URL Twilio called followed by the form parameters, sorted by name then value,
//! each pair written as name then value with nothing between (`twilio`'s
//! `RequestValidator.compute_signature`). For a JSON body Twilio adds `bodySHA256=<hex SHA-256
//! of the body>` to the URL and signs the URL alone; the hash must match the body. Twilio's SDKs
//! accept the URL with and without the port (`:443`, `:80`, or the one given), since Twilio
//! signs either; so does portaria. With a SharedKey, `X-Twilio-Webhooks-Signature-Settings:
//! key=..,algorithm=HMAC_SHA256` switches to HMAC-SHA256.
//!
//! The URL is `public_url` (required: behind a tunnel the local host is not what Twilio signed)
//! followed by `?<query>` as the request carried it (see `public_url.rs`). No timestamp is
//! signed. Twilio signs decoded form parameters, not raw bytes: two spellings of one form
//! (`%41` for `A`, a repeated pair) verify alike; the stored body is the bytes that arrived.
//!
//! Dedup ([`DEDUP`], [`signed_key`]): the SHA-256 of what the MAC covers past the configured
//! URL: `?<query>` as it arrived, then each sorted, distinct parameter's name and value (for a
//! JSON body none: the query holds `bodySHA256`, which binds the body). Every spelling of a form
//! that verifies alike (pairs reordered, re-encoded or doubled, even a value's bytes moved into
//! its name, which Twilio's concatenation cannot tell apart) has the one key; a retry resends
//! the same parameters. `I-Twilio-Idempotency-Token`, else the raw body's SHA-256, was the key
//! before: the token is not signed and the raw bytes are not what is signed, so a captured
//! request re-sent with a new token, or re-spelled, was a new event, forever.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use subtle::ConstantTimeEq;

use super::hmac_scheme::{Algorithm, Encoding};
use super::preset::{Coverage, Preset, Scheme, Signed};
use super::public_url::{self, PublicUrl};
use super::{Checked, Request, Secret, Settings, VerifyError, find_secret, header};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-twilio-signature";
pub const SIGNATURE_SETTINGS: &str = "x-twilio-webhooks-signature-settings";
pub const IDEMPOTENCY_TOKEN: &str = "i-twilio-idempotency-token";
const BODY_HASH: &str = "bodySHA256";

pub(super) fn preset(settings: &Settings<'_>) -> Result<Preset, String> {
    let url = public_url::required(settings.public_url, "twilio", "the URL it calls")?;
    Ok(Preset::new("twilio", Twilio { url }, DEDUP).signs_public_url())
}

#[derive(Debug)]
struct Twilio {
    url: PublicUrl,
}

/// Form parameters, decoded, sorted by name then value, each pair once.
fn sorted_params(body: &[u8]) -> Vec<(String, String)> {
    let mut params: Vec<(String, String)> = form_urlencoded::parse(body)
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    params.sort_unstable();
    params.dedup();
    params
}

/// The dedup rule: [`signed_key`], through `Verified::signed_key`.
pub const DEDUP: DedupRule = DedupRule::Signed("twilio-signed-params");

/// The hex SHA-256 of the signed message past the configured URL (see the module doc).
fn signed_key(query: Option<&str>, params: &[(String, String)]) -> String {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + 2 * params.len());
    if let Some(query) = query {
        parts.extend([&b"?"[..], query.as_bytes()]);
    }
    for (name, value) in params {
        parts.extend([name.as_bytes(), value.as_bytes()]);
    }
    hex::encode(crate::digest::sha256(&parts))
}

fn mac(algorithm: Algorithm, key: &Secret, url: &str, params: &[(String, String)]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + 2 * params.len());
    parts.push(url.as_bytes());
    for (name, value) in params {
        parts.push(name.as_bytes());
        parts.push(value.as_bytes());
    }
    key.mac(algorithm, &parts)
}

/// The algorithm the settings header names; none means the Auth Token's HMAC-SHA1.
fn algorithm(request: &Request<'_>) -> Result<Algorithm, VerifyError> {
    if !request.headers.contains_key(SIGNATURE_SETTINGS) {
        return Ok(Algorithm::Sha1);
    }
    let settings = header(request.headers, SIGNATURE_SETTINGS)?;
    let named = settings.split(',').find_map(|part| {
        let (name, value) = part.split_once('=')?;
        (name.trim() == "algorithm").then(|| value.trim())
    });
    match named {
        None | Some("HMAC_SHA1") => Ok(Algorithm::Sha1),
        Some("HMAC_SHA256") => Ok(Algorithm::Sha256),
        Some(other) => Err(VerifyError::Malformed(format!(
            "header `{SIGNATURE_SETTINGS}` names algorithm `{other}` (known: HMAC_SHA1, \
             HMAC_SHA256)"
        ))),
    }
}

impl Scheme for Twilio {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let value = header(request.headers, SIGNATURE)?;
        let received = Encoding::Base64.read(SIGNATURE, value)?;
        let algorithm = algorithm(request)?;
        algorithm.expect_len(SIGNATURE, &received)?;
        let hashes = request.query_values(BODY_HASH);
        let params = match hashes.len() {
            0 => sorted_params(request.body),
            1 => Vec::new(),
            _ => {
                return Err(VerifyError::Malformed(format!(
                    "the query has `{BODY_HASH}` more than once"
                )));
            }
        };
        let received = [received];
        let index = self
            .url
            .port_variants(request.query)
            .iter()
            .find_map(|url| {
                find_secret(keys, &received, |key| mac(algorithm, key, url, &params)).ok()
            })
            .ok_or(VerifyError::Mismatch)?;
        // The URL, and so the hash in it, is signed: a body that does not hash to it was changed.
        if let Some(hash) = hashes.first() {
            let actual = hex::encode(crate::digest::sha256(&[request.body]));
            if !bool::from(
                actual
                    .as_bytes()
                    .ct_eq(hash.to_ascii_lowercase().as_bytes()),
            ) {
                return Err(VerifyError::Mismatch);
            }
        }
        Ok(Checked {
            index,
            signed_key: Some(signed_key(request.query, &params)),
            ..Checked::default()
        })
    }

    /// A JSON body is signed the JSON way (`bodySHA256` in the query the sender appends);
    /// anything else as a form.
    fn sign(&self, key: &Secret, body: &[u8], _now: i64, delivery_id: &str) -> Option<Signed> {
        let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
        let (query, params) = if is_json {
            let hash = hex::encode(crate::digest::sha256(&[body]));
            (Some(format!("{BODY_HASH}={hash}")), Vec::new())
        } else {
            (None, sorted_params(body))
        };
        let url = self.url.with_query(query.as_deref());
        let signature = STANDARD.encode(mac(Algorithm::Sha1, key, &url, &params));
        Some(Signed {
            headers: vec![
                (SIGNATURE.to_string(), signature),
                (IDEMPOTENCY_TOKEN.to_string(), delivery_id.to_string()),
            ],
            query,
        })
    }

    /// The decoded parameters, not the body's bytes, which can be spelled anew.
    fn coverage(&self) -> Coverage {
        Coverage::Signed {
            headers: Vec::new(),
            body: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Request, Settings, Verifier, VerifyError};

    // Official vectors: twilio-python `tests/unit/test_request_validator.py`
    // (signature-schemes.md §7.1).
    const TOKEN: &str = "12345";
    const PARAMS: &str = "CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";
    const QUERY: &str = "foo=1&bar=2";

    fn twilio(public_url: &str) -> Verifier {
        let settings = Settings {
            public_url: Some(public_url),
            ..Settings::default()
        };
        Verifier::with_settings("twilio", &settings, &[TOKEN.to_string()], None).unwrap()
    }

    fn verify(
        v: &Verifier,
        sig: &str,
        query: Option<&str>,
        body: &str,
    ) -> Result<usize, VerifyError> {
        let h = headers(&[("X-Twilio-Signature", sig)]);
        let request = Request::new(&h, body.as_bytes()).with_query(query);
        v.verify_request(&request, 0).map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_form_vectors_with_and_without_the_port() {
        let plain = twilio("https://mycompany.com/myapp.php");
        let with_443 = twilio("https://mycompany.com:443/myapp.php");
        for v in [&plain, &with_443] {
            // Twilio signed the URL without the port, and with it: both verify either way.
            assert_eq!(
                verify(v, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", Some(QUERY), PARAMS),
                Ok(0)
            );
            assert_eq!(
                verify(v, "kvajT1Ptam85bY51eRf/AJRuM3w=", Some(QUERY), PARAMS),
                Ok(0)
            );
        }
        let http = twilio("http://mycompany.com/myapp.php");
        assert_eq!(
            verify(&http, "0ZXoZLH/DfblKGATFgpif+LLRf4=", Some(QUERY), PARAMS),
            Ok(0)
        );
        // Order of the form does not matter; its content and the query do.
        let shuffled = "To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&From=%2B14158675309&Caller=%2B14158675309";
        assert_eq!(
            verify(
                &plain,
                "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
                Some(QUERY),
                shuffled
            ),
            Ok(0)
        );
        let changed = PARAMS.replace("Digits=1234", "Digits=1235");
        assert_eq!(
            verify(
                &plain,
                "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
                Some(QUERY),
                &changed
            ),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(
                &plain,
                "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
                Some("foo=1&bar=3"),
                PARAMS
            ),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&plain, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", None, PARAMS),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn verifies_the_duplicate_keys_vector() {
        let v = twilio("https://mycompany.com/myapp.php");
        let body = "Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234";
        assert_eq!(
            verify(&v, "IK+Dwps556ElfBT0I3Rgjkr1wJU=", Some(QUERY), body),
            Ok(0)
        );
        // A pair given twice is signed once (the SDK's `sorted(set(values))`).
        let repeated = format!("{body}&Digits=1234");
        assert_eq!(
            verify(&v, "IK+Dwps556ElfBT0I3Rgjkr1wJU=", Some(QUERY), &repeated),
            Ok(0)
        );
    }

    #[test]
    fn verifies_the_json_vector_and_its_body_hash() {
        let v = twilio("https://mycompany.com/myapp.php");
        let body = r#"{"property": "value", "boolean": true}"#;
        let hash = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
        let query = format!("{QUERY}&bodySHA256={hash}");
        let sig = "a9nBmqA0ju/hNViExpshrM61xv4=";
        assert_eq!(verify(&v, sig, Some(&query), body), Ok(0));
        let other = r#"{"property": "value", "boolean": false}"#;
        assert_eq!(
            verify(&v, sig, Some(&query), other),
            Err(VerifyError::Mismatch)
        );
        let twice = format!("{query}&bodySHA256={hash}");
        assert!(matches!(
            verify(&v, sig, Some(&twice), body),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn signs_what_it_verifies_form_and_json() {
        let v = twilio("https://example.trycloudflare.com/webhooks/twilio");
        let form = v.sign_request(PARAMS.as_bytes(), 0, "idem-1").unwrap();
        assert_eq!(form.query, None);
        assert_eq!(
            form.headers[1],
            (
                "i-twilio-idempotency-token".to_string(),
                "idem-1".to_string()
            )
        );
        let h = headers(&form.headers);
        assert!(
            v.verify_request(&Request::new(&h, PARAMS.as_bytes()), 0)
                .is_ok()
        );
        let body = br#"{"a":1}"#;
        let json = v.sign_request(body, 0, "idem-2").unwrap();
        let query = json.query.as_deref().unwrap();
        assert!(query.starts_with("bodySHA256="), "{query}");
        let h = headers(&json.headers);
        let request = Request::new(&h, body).with_query(Some(query));
        assert!(v.verify_request(&request, 0).is_ok());
        assert_eq!(v.default_dedup().to_string(), "twilio-signed-params");
        assert!(v.signs_public_url());
    }

    #[test]
    fn every_spelling_of_a_signed_form_has_one_key() {
        let v = twilio("https://mycompany.com/myapp.php");
        let sig = "IK+Dwps556ElfBT0I3Rgjkr1wJU=";
        let key = |query: Option<&str>, body: &str| {
            let h = headers(&[
                ("X-Twilio-Signature", sig),
                ("I-Twilio-Idempotency-Token", body),
            ]);
            let request = Request::new(&h, body.as_bytes()).with_query(query);
            let proof = v.verify_request(&request, 0);
            proof.map(|p| p.signed_key().map(str::to_string))
        };
        let body = "Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234";
        let first = key(Some(QUERY), body).unwrap();
        for spelling in [
            "Digits=1234&Digits=5678&SidAccount=AC123&Sid=CA123",
            "Sid=C%41123&SidAccount=AC123&Digits=5678&Digits=1234&Digits=1234",
            // Twilio's concatenation cannot tell `SidAccount=AC123` from `SidA=ccountAC123`.
            "Sid=CA123&SidA=ccountAC123&Digits=5678&Digits=1234",
        ] {
            assert_eq!(key(Some(QUERY), spelling).unwrap(), first, "{spelling}");
        }
        assert_eq!(first.as_ref().map(String::len), Some(64));
        // Another parameter is another signature; another query, too.
        assert_eq!(
            key(
                Some(QUERY),
                "Sid=CA124&SidAccount=AC123&Digits=5678&Digits=1234"
            ),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_shared_key_may_sign_with_sha256() {
        let v = twilio("https://mycompany.com/myapp.php");
        let url = format!("https://mycompany.com/myapp.php?{QUERY}");
        let mac = super::mac(
            super::Algorithm::Sha256,
            &super::Secret::new(TOKEN.as_bytes().to_vec()),
            &url,
            &super::sorted_params(PARAMS.as_bytes()),
        );
        let sig = base64::Engine::encode(&super::STANDARD, mac);
        let h = headers(&[
            ("X-Twilio-Signature", sig.as_str()),
            (
                "X-Twilio-Webhooks-Signature-Settings",
                "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256",
            ),
        ]);
        let request = Request::new(&h, PARAMS.as_bytes()).with_query(Some(QUERY));
        assert!(v.verify_request(&request, 0).is_ok());
        let h = headers(&[
            ("X-Twilio-Signature", sig.as_str()),
            ("X-Twilio-Webhooks-Signature-Settings", "algorithm=HMAC_MD5"),
        ]);
        let request = Request::new(&h, PARAMS.as_bytes()).with_query(Some(QUERY));
        assert!(matches!(
            v.verify_request(&request, 0),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn refuses_to_start_without_a_public_url() {
        let err = Verifier::new("twilio", None, &[TOKEN.to_string()], None).unwrap_err();
        assert!(err.contains("needs `public_url"), "{err}");
        let settings = Settings {
            public_url: Some("https://example.com/x?y=1"),
            ..Settings::default()
        };
        let err =
            Verifier::with_settings("twilio", &settings, &[TOKEN.to_string()], None).unwrap_err();
        assert!(err.contains("must not have a query string"), "{err}");
    }
}
