//! The Standard Webhooks scheme (also Svix's): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>` over `<id>.<timestamp>.<raw body>`, keyed by the
//! base64-decoded part of a `whsec_...` secret.
//!
//! portaria uses it in both directions: to verify incoming webhooks from providers that follow
//! the spec, and to sign the requests it forwards to a local program.
//!
//! Verifying: `webhook-signature` is a space-separated list (one entry per active key while
//! rotating); entries other than `v1` are skipped. The timestamp must be within the tolerance
//! (300 s) either way. Svix's `svix-id`, `svix-timestamp` and `svix-signature` are read when
//! none of the `webhook-*` headers is present; the two families are never mixed.
//!
//! Dedup ([`DEDUP`]): the id of the family that verified, which the signature covers (a retry
//! keeps it, signed again at a new timestamp). The `svix` preset deduplicated on the `svix-id`
//! header whichever family verified: a captured delivery re-sent under the `webhook-*` names,
//! with any `svix-id` beside them, was a new event.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::hmac_scheme::Algorithm;
use super::preset::{Coverage, KeyFormat, Preset, Scheme, Signed};
pub use super::secret::decode_secret;
use super::{
    Checked, Request, Secret, VerifyError, check_window, find_secret, header, parse_timestamp,
};
use crate::dedup::DedupRule;

pub const ID: &str = "webhook-id";
pub const TIMESTAMP: &str = "webhook-timestamp";
pub const SIGNATURE: &str = "webhook-signature";
pub const SVIX_ID: &str = "svix-id";
pub const SVIX_TIMESTAMP: &str = "svix-timestamp";
pub const SVIX_SIGNATURE: &str = "svix-signature";

/// The raw MAC over `<id>.<timestamp>.<body>` (the key already decoded from `whsec_`).
pub fn mac(key: &Secret, id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let timestamp = timestamp.to_string();
    key.mac(
        Algorithm::Sha256,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    )
}

/// The `webhook-signature` header value for one key: `v1,<base64 of the MAC>`.
pub fn signature(key: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(key, id, timestamp, body)))
}

/// The (id, timestamp, signature) header names this request uses: the `webhook-*` family unless
/// only `svix-*` headers are present.
fn header_names(headers: &HeaderMap) -> [&'static str; 3] {
    let any = |names: [&str; 3]| names.iter().any(|name| headers.contains_key(*name));
    let svix = [SVIX_ID, SVIX_TIMESTAMP, SVIX_SIGNATURE];
    if !any([ID, TIMESTAMP, SIGNATURE]) && any(svix) {
        svix
    } else {
        [ID, TIMESTAMP, SIGNATURE]
    }
}

/// The dedup rule of both presets: the signed id, through `Verified::signed_key`.
pub const DEDUP: DedupRule = DedupRule::Signed("signed-webhook-id");

/// Returns the index of the first key with a matching `v1` entry, and the id it signed. See
/// the module `verify` for the error order.
pub(super) fn verify(
    keys: &[Secret],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance_secs: u64,
) -> Result<Checked, VerifyError> {
    let [id_name, timestamp_name, signature_name] = header_names(headers);
    let signatures = header(headers, signature_name)?;
    let id = header(headers, id_name)?;
    // The spec forbids `.` in the id: it would make the signed `<id>.<timestamp>.<body>`
    // ambiguous.
    if id.contains('.') {
        return Err(VerifyError::Malformed(format!(
            "header `{id_name}` contains a `.`"
        )));
    }
    let timestamp = parse_timestamp(header(headers, timestamp_name)?, timestamp_name)?;
    let mut v1_entries = 0;
    let mut received = Vec::new();
    for entry in signatures.split_ascii_whitespace() {
        let Some(("v1", encoded)) = entry.split_once(',') else {
            continue;
        };
        v1_entries += 1;
        // An entry that is not base64 can never match; another entry still may.
        if let Ok(mac) = STANDARD.decode(encoded) {
            received.push(mac);
        }
    }
    if v1_entries == 0 {
        return Err(VerifyError::Malformed(format!(
            "header `{signature_name}` has no `v1,` signature"
        )));
    }
    let index = find_secret(keys, &received, |key| mac(key, id, timestamp, body))?;
    check_window(timestamp, now, tolerance_secs)?;
    Ok(Checked {
        index,
        signed_key: Some(id.to_string()),
        ..Checked::default()
    })
}

/// The three `webhook-*` headers a sender adds, signed with `key` (already decoded).
/// The three headers, under Svix's `svix-*` names when `svix` is set (what Svix sends).
pub(super) fn sign_headers(
    key: &Secret,
    body: &[u8],
    now: i64,
    id: &str,
    svix: bool,
) -> Vec<(String, String)> {
    let [id_name, timestamp_name, signature_name] = if svix {
        [SVIX_ID, SVIX_TIMESTAMP, SVIX_SIGNATURE]
    } else {
        [ID, TIMESTAMP, SIGNATURE]
    };
    vec![
        (id_name.to_string(), id.to_string()),
        (timestamp_name.to_string(), now.to_string()),
        (signature_name.to_string(), signature(key, id, now, body)),
    ]
}

/// `svix`: the same scheme, signing under the `svix-*` header names Svix's deliveries carry.
pub(super) fn preset(svix: bool) -> Preset {
    let name = if svix { "svix" } else { "standard-webhooks" };
    Preset::new(name, StandardWebhooks { svix }, DEDUP).key(KeyFormat::StandardWebhooks)
}

#[derive(Debug)]
struct StandardWebhooks {
    /// Sign with the `svix-*` names (verification reads either family).
    svix: bool,
}

impl Scheme for StandardWebhooks {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body, now, tolerance_secs)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Some(sign_headers(key, body, now, delivery_id, self.svix).into())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    /// The `webhook-*` id and timestamp: signed whenever present (a request with any of them
    /// is verified over that family). `svix-*` ones are not, beside a `webhook-*` family.
    fn coverage(&self) -> Coverage {
        Coverage::body_and(&[ID, TIMESTAMP])
    }
}

#[cfg(test)]
mod tests {
    use super::super::Verifier;
    use super::super::tests::headers;
    use super::*;

    // Published vector: standard-webhooks `libraries/python/tests/test_webhooks.py::test_sign_function`.
    #[test]
    fn signs_the_spec_example() {
        let key = Secret::new(decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap());
        let sig = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    // Published vector: standard-webhooks `libraries/rust/src/lib.rs::test_sign`.
    #[test]
    fn signs_the_rust_library_example() {
        let key = Secret::new(decode_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap());
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

    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1614265330;
    const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
    const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn check(provider: &str, pairs: &[(&str, &str)], now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new(provider, None, &[SPEC_SECRET.to_string()], None).unwrap();
        v.verify(&headers(pairs), SPEC_BODY.as_bytes(), now)
            .map(|v| v.secret_index())
    }

    fn spec_headers(signature: &str) -> [(&'static str, String); 3] {
        [
            ("webhook-id", SPEC_ID.to_string()),
            ("webhook-timestamp", SPEC_TS.to_string()),
            ("webhook-signature", signature.to_string()),
        ]
    }

    fn check_sig(signature: &str, now: i64) -> Result<usize, VerifyError> {
        let v = Verifier::new("standard-webhooks", None, &[SPEC_SECRET.to_string()], None).unwrap();
        v.verify(
            &headers(&spec_headers(signature)),
            SPEC_BODY.as_bytes(),
            now,
        )
        .map(|v| v.secret_index())
    }

    // Published vector and its near-miss negative: standard-webhooks
    // `libraries/python/tests/test_webhooks.py`.
    #[test]
    fn verifies_the_spec_example_and_rejects_the_near_miss() {
        assert_eq!(check_sig(SPEC_SIG, SPEC_TS), Ok(0));
        let near_miss = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=";
        assert_eq!(check_sig(near_miss, SPEC_TS), Err(VerifyError::Mismatch));
    }

    // Published vector: standard-webhooks `libraries/rust/src/lib.rs::test_sign`.
    #[test]
    fn verifies_the_rust_library_example() {
        let secret = ["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_string()];
        let v = Verifier::new("standard-webhooks", None, &secret, None).unwrap();
        let h = headers(&[
            ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
            ("webhook-timestamp", "1649367553"),
            (
                "webhook-signature",
                "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            ),
        ]);
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(
            v.verify(&h, body, 1649367553).map(|v| v.secret_index()),
            Ok(0)
        );
    }

    #[test]
    fn any_v1_entry_may_match_and_others_are_skipped() {
        let bad = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        assert_eq!(check_sig(&format!("{bad} {SPEC_SIG}"), SPEC_TS), Ok(0));
        assert_eq!(
            check_sig(&format!("v1a,c2lnbmF0dXJl v2,x {SPEC_SIG}"), SPEC_TS),
            Ok(0)
        );
        assert_eq!(
            check_sig(&format!("v1,not-base64! {SPEC_SIG}"), SPEC_TS),
            Ok(0)
        );
        assert_eq!(check_sig(bad, SPEC_TS), Err(VerifyError::Mismatch));
        // The v1 MAC under another version label is not used.
        let relabelled = SPEC_SIG.replace("v1,", "v1a,");
        assert!(matches!(
            check_sig(&relabelled, SPEC_TS),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn the_window_applies_both_ways_after_the_mac() {
        assert_eq!(check_sig(SPEC_SIG, SPEC_TS + 300), Ok(0));
        assert_eq!(
            check_sig(SPEC_SIG, SPEC_TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            check_sig(SPEC_SIG, SPEC_TS - 301),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        let near_miss = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=";
        assert_eq!(
            check_sig(near_miss, SPEC_TS + 3600),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn svix_headers_are_read_when_webhook_ones_are_absent() {
        let svix = [
            ("svix-id", SPEC_ID),
            ("svix-timestamp", "1614265330"),
            ("svix-signature", SPEC_SIG),
        ];
        assert_eq!(check("svix", &svix, SPEC_TS), Ok(0));
        assert_eq!(check("standard-webhooks", &svix, SPEC_TS), Ok(0));
        // Families are not mixed: a lone webhook-id means the webhook-* family is in use.
        let mixed = [
            ("webhook-id", SPEC_ID),
            ("svix-timestamp", "1614265330"),
            ("svix-signature", SPEC_SIG),
        ];
        assert_eq!(
            check("svix", &mixed, SPEC_TS),
            Err(VerifyError::MissingHeader("webhook-signature".to_string()))
        );
    }

    #[test]
    fn the_key_is_the_id_of_the_family_that_verified() {
        let key = |provider: &str, pairs: &[(&str, &str)]| {
            let v = Verifier::new(provider, None, &[SPEC_SECRET.to_string()], None).unwrap();
            let proof = v.verify(&headers(pairs), SPEC_BODY.as_bytes(), SPEC_TS);
            proof.unwrap().signed_key().map(str::to_string)
        };
        let svix = [
            ("svix-id", SPEC_ID),
            ("svix-timestamp", "1614265330"),
            ("svix-signature", SPEC_SIG),
        ];
        assert_eq!(key("svix", &svix), Some(SPEC_ID.to_string()));
        // The same delivery under the `webhook-*` names, a made-up `svix-id` beside them: the
        // `webhook-*` family verifies, and its id is the key.
        let renamed = [
            ("webhook-id", SPEC_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", SPEC_SIG),
            ("svix-id", "msg_made_up"),
        ];
        for provider in ["svix", "standard-webhooks"] {
            assert_eq!(key(provider, &renamed), Some(SPEC_ID.to_string()));
            let v = Verifier::new(provider, None, &[SPEC_SECRET.to_string()], None).unwrap();
            assert_eq!(v.default_dedup().to_string(), "signed-webhook-id");
        }
    }

    #[test]
    fn malformed_headers() {
        let mut dotted = spec_headers(SPEC_SIG);
        dotted[0].1 = "msg.1".to_string();
        let mut bad_ts = spec_headers(SPEC_SIG);
        bad_ts[1].1 = "1614265330.5".to_string();
        for pairs in [
            dotted,
            bad_ts,
            spec_headers("g0hM9SsE"),
            spec_headers("v1a,abc"),
        ] {
            let v = Verifier::new("svix", None, &[SPEC_SECRET.to_string()], None).unwrap();
            let r = v.verify(&headers(&pairs), SPEC_BODY.as_bytes(), SPEC_TS);
            assert!(
                matches!(r, Err(VerifyError::Malformed(_))),
                "{pairs:?}: {r:?}"
            );
        }
        let missing_ts = [("webhook-id", SPEC_ID), ("webhook-signature", SPEC_SIG)];
        assert_eq!(
            check("standard-webhooks", &missing_ts, SPEC_TS),
            Err(VerifyError::MissingHeader("webhook-timestamp".to_string()))
        );
    }

    #[test]
    fn sign_headers_produce_the_spec_example() {
        let v = Verifier::new("standard-webhooks", None, &[SPEC_SECRET.to_string()], None).unwrap();
        let signed = v.sign(SPEC_BODY.as_bytes(), SPEC_TS, SPEC_ID);
        assert_eq!(
            signed,
            spec_headers(SPEC_SIG).map(|(n, v)| (n.to_string(), v))
        );
    }
}
