//! The Standard Webhooks scheme (also Svix's): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>` over `<id>.<timestamp>.<raw body>`, keyed by the
//! base64-decoded part of a `whsec_...` secret.
//!
//! portaria uses it in both directions: to verify incoming webhooks from providers that follow
//! the spec, and to sign the requests it forwards to a local program.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Decodes a `whsec_<base64>` secret into its key bytes. Padding is optional, as in the
/// reference Python library.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix("whsec_")
        .ok_or_else(|| "a Standard Webhooks secret starts with `whsec_`".to_string())?;
    let trimmed = encoded.trim_end_matches('=');
    let key = STANDARD_NO_PAD
        .decode(trimmed)
        .map_err(|_| "the part after `whsec_` is not valid base64".to_string())?;
    if key.is_empty() {
        return Err("the secret after `whsec_` is empty".to_string());
    }
    Ok(key)
}

/// The raw MAC over `<id>.<timestamp>.<body>`.
pub fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The `webhook-signature` header value for one key: `v1,<base64 of the MAC>`.
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(key, id, timestamp, body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Published vector: standard-webhooks `libraries/python/tests/test_webhooks.py::test_sign_function`.
    #[test]
    fn signs_the_spec_example() {
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    // Published vector: standard-webhooks `libraries/rust/src/lib.rs::test_sign`.
    #[test]
    fn signs_the_rust_library_example() {
        let key = decode_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let sig = signature(&key, "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body);
        assert_eq!(sig, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    #[test]
    fn accepts_unpadded_secrets_and_rejects_bad_ones() {
        assert!(decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS").is_ok());
        assert!(decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr").is_ok());
        assert!(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(decode_secret("whsec_not base64!").is_err());
        assert!(decode_secret("whsec_").is_err());
    }
}
