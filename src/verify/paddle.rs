//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`, the HMAC-SHA256 of
//! `<ts>:<raw body>` (a colon, not a dot) keyed by the whole notification-destination secret
//! (`pdl_ntfset_...`) as UTF-8, not decoded. Every `h1` may match; unknown keys are ignored
//! (as in Paddle's node SDK; the python SDK refuses them, which would break the day Paddle adds
//! a scheme).
//!
//! The window is Paddle's SDKs' 5 s: tight, so the receiving clock must be synced. Paddle's node
//! SDK and older python SDKs only refuse old timestamps; portaria, like `paddle-python-sdk`
//! 1.16, refuses future ones too.
//!
//! Dedup: the body's `event_id` (`evt_...`), the same on every redelivery.

use http::HeaderName;

use super::keyed_list::KeyedList;
use super::preset::{Preset, json_rule};

pub const SIGNATURE: &str = "paddle-signature";

/// The SDKs' `maximum_variance` / `MAX_VALID_TIME_DIFFERENCE`.
const TOLERANCE_SECS: u64 = 5;

pub(super) fn preset() -> Preset {
    let scheme = KeyedList::new(HeaderName::from_static(SIGNATURE), ';', "ts", "h1", ":");
    Preset::new("paddle", scheme, json_rule("/event_id")).tolerance_secs(TOLERANCE_SECS)
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    fn verify(secrets: &[&str], sig: &str, body: &str, now: i64) -> Result<usize, VerifyError> {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let v = Verifier::new("paddle", None, &secrets, None).unwrap();
        let h = headers(&[("Paddle-Signature", sig)]);
        v.verify(&h, body.as_bytes(), now).map(|v| v.secret_index())
    }

    // Official vector: paddle-python-sdk `tests/Unit/Notification/test_Verifier.py`
    // (signature-schemes.md §7.1): two secrets that fail, the third passes; an `h1=dummy` first.
    #[test]
    fn verifies_the_python_sdk_vector_with_rotation() {
        let sig = "ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02";
        let secrets = [
            "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",
            "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo",
            "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh",
        ];
        assert_eq!(verify(&secrets, sig, "hello-world", 1696195954), Ok(2));
        assert_eq!(
            verify(&secrets[..2], sig, "hello-world", 1696195954),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&secrets, sig, "hello-world!", 1696195954),
            Err(VerifyError::Mismatch)
        );
    }

    // Official vectors: paddle-node-sdk `webhooks-validator.node.test.ts` (fake clock
    // 2023-11-01T00:00:00Z), signature-schemes.md §7.1, with its negatives.
    #[test]
    fn verifies_the_node_sdk_vectors() {
        const NOW: i64 = 1698796800;
        let one =
            "ts=1698796800;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9";
        let body = r#"{"data": ["1", "2"]}"#;
        assert_eq!(verify(&["VALID_SECRET"], one, body, NOW), Ok(0));
        assert_eq!(
            verify(&["INVALID_VALID_SECRET"], one, body, NOW),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&["VALID_SECRET"], one, r#"{ "data": [ "1", "2" ]}"#, NOW),
            Err(VerifyError::Mismatch)
        );
        let moved = one.replace("ts=1698796800", "ts=9876");
        assert_eq!(
            verify(&["VALID_SECRET"], &moved, body, NOW),
            Err(VerifyError::Mismatch)
        );
        let h = "28981e941fae76e53db32f3d2a83cb69db41476595e84e1970a1b5d98f62b261";
        let many = format!("ts=1698796800;h1={h};h1={h};h2=RANDOM_HASH");
        assert_eq!(
            verify(&["VALID_SECRET"], &many, r#"{"data": "value"}"#, NOW),
            Ok(0)
        );
    }

    #[test]
    fn the_window_is_five_seconds_both_ways() {
        let v = Verifier::new("paddle", None, &["s".to_string()], None).unwrap();
        assert_eq!(v.tolerance_secs(), 5);
        let signed = headers(&v.sign(b"{}", 1000, ""));
        assert!(v.verify(&signed, b"{}", 1005).is_ok());
        assert!(v.verify(&signed, b"{}", 995).is_ok());
        assert_eq!(
            v.verify(&signed, b"{}", 1006).unwrap_err(),
            VerifyError::StaleTimestamp { skew_secs: 6 }
        );
        assert_eq!(
            v.verify(&signed, b"{}", 994).unwrap_err(),
            VerifyError::StaleTimestamp { skew_secs: -6 }
        );
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        let h = "a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9";
        for (sig, says) in [
            (format!("h1={h}"), "has no `ts=`"),
            ("ts=1698796800".to_string(), "has no `h1=` signature"),
            (format!("ts=1698796800;garbage;h1={h}"), "is not a list"),
            (format!("ts=1;ts=2;h1={h}"), "more than one `ts=`"),
            (format!("ts=soon;h1={h}"), "`ts` is not a unix timestamp"),
        ] {
            match verify(&["s"], &sig, "{}", 0) {
                Err(VerifyError::Malformed(m)) => assert!(m.contains(says), "{sig}: {m}"),
                other => panic!("{sig}: {other:?}"),
            }
        }
    }

    #[test]
    fn signs_like_paddle() {
        let v = Verifier::new("paddle", None, &["VALID_SECRET".to_string()], None).unwrap();
        let signed = v.sign(br#"{"data": ["1", "2"]}"#, 1698796800, "");
        let expected =
            "ts=1698796800;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9";
        assert_eq!(
            signed,
            [("paddle-signature".to_string(), expected.to_string())]
        );
        assert_eq!(v.default_dedup().to_string(), "json:/event_id");
    }
}
