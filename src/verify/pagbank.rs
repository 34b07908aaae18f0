//! PagBank (PagSeguro): `x-authenticity-token: <hex>`, the hex SHA-256 of
//! `<token>-<raw body>`: a plain digest of the account token, a dash and the body, NOT an HMAC
//! (developer.pagbank.com.br "Confirmar autenticidade da notificação", as quoted by
//! integrators; signature-schemes.md §3 ◐). Either hex case is accepted. The header is often
//! absent in the sandbox. The Recurring Payments `X-Payload-Signature` is another, undocumented
//! scheme, not handled here.
//!
//! A plain SHA-256 is open to length extension: from the digest of `<token>-<body>` and the
//! token's length alone, anyone can compute the digest of `<token>-<body><padding><more>`, so
//! a captured notification could be sent again with `&notificationCode=...` appended. The
//! padding starts with the byte 0x80, which can never follow a complete UTF-8 character, and
//! PagBank's bodies (form-encoded or JSON) are UTF-8: a body that is not UTF-8 is refused
//! (`Malformed`, 401) before its digest is computed.
//!
//! No delivery id is documented: dedup on the body's SHA-256 (all of it is signed).

use http::HeaderMap;

use super::preset::{Preset, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, find_secret, header};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-authenticity-token";

fn digest(token: &[u8], body: &[u8]) -> Vec<u8> {
    crate::digest::sha256(&[token, b"-", body]).to_vec()
}

fn verify(keys: &[Secret], headers: &HeaderMap, body: &[u8]) -> Result<usize, VerifyError> {
    let value = header(headers, SIGNATURE)?;
    if std::str::from_utf8(body).is_err() {
        return Err(VerifyError::Malformed(
            "the body is not UTF-8: no PagBank notification is, and a length-extended forgery \
             always is not"
                .to_string(),
        ));
    }
    let received = hex::decode(value)
        .ok()
        .filter(|bytes| bytes.len() == 32)
        .ok_or_else(|| {
            VerifyError::Malformed(format!("header `{SIGNATURE}` is not 64 hex digits"))
        })?;
    find_secret(keys, &[received], |token| digest(token.expose(), body))
}

pub(super) fn preset() -> Preset {
    Preset::new("pagbank", PagBank, DedupRule::BodySha256)
}

#[derive(Debug)]
struct PagBank;

impl Scheme for PagBank {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body).map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], _now: i64, _delivery_id: &str) -> Option<Signed> {
        let token = hex::encode(digest(key.expose(), body));
        Some(vec![(SIGNATURE.to_string(), token)].into())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    // Computed vector (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    const TOKEN: &str = "TOKEN_DE_TESTE";
    const BODY: &str = r#"{"id":"ORDE_1","charges":[{"status":"PAID"}]}"#;
    const DIGEST: &str = "6a0a7e809fd31adf199c39468aae21acb0b2e5eff6c3b432b6ec562cda8bf82e";

    fn verify(token: &str, value: &str, body: &str) -> Result<usize, VerifyError> {
        let v = Verifier::new("pagbank", None, &[token.to_string()], None).unwrap();
        let h = headers(&[("x-authenticity-token", value)]);
        v.verify(&h, body.as_bytes(), 0).map(|p| p.secret_index())
    }

    #[test]
    fn verifies_the_computed_vector() {
        assert_eq!(verify(TOKEN, DIGEST, BODY), Ok(0));
        assert_eq!(verify(TOKEN, &DIGEST.to_uppercase(), BODY), Ok(0));
        assert_eq!(
            verify("OUTRO_TOKEN", DIGEST, BODY),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(TOKEN, DIGEST, &BODY.replace("PAID", "paid")),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn is_a_plain_digest_not_an_hmac() {
        // HMAC-SHA256(TOKEN, BODY) and HMAC-SHA256(TOKEN, "TOKEN-BODY"), Python's hmac.
        for hmac in [
            "0e59a482f6d79b6684f9f4407638d036f87854816da920a325aa76b2e8d2c916",
            "8c3ae8c05b7cb4a769a5061c735d695567487cd1ad33c33e18b9215e6789820b",
        ] {
            assert_eq!(verify(TOKEN, hmac, BODY), Err(VerifyError::Mismatch));
        }
        for bad in ["6a0a7e", "zz", "sha256=6a0a"] {
            assert!(
                matches!(verify(TOKEN, bad, BODY), Err(VerifyError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn signs_like_pagbank() {
        let v = Verifier::new("pagbank", None, &[TOKEN.to_string()], None).unwrap();
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, ""),
            [("x-authenticity-token".to_string(), DIGEST.to_string())]
        );
        assert_eq!(v.default_dedup().to_string(), "body-sha256");
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused_before_its_digest() {
        let v = Verifier::new("pagbank", None, &[TOKEN.to_string()], None).unwrap();
        // Signed with the token, so only the UTF-8 rule can refuse it.
        let body = b"notificationCode=1\x80\x00\x00";
        let h = headers(&v.sign(body, 0, ""));
        assert!(matches!(
            v.verify(&h, body, 0),
            Err(VerifyError::Malformed(m)) if m.contains("not UTF-8")
        ));
        let utf8 = "notificationCode=1&nome=João".as_bytes();
        let h = headers(&v.sign(utf8, 0, ""));
        assert!(v.verify(&h, utf8, 0).is_ok());
    }
}
