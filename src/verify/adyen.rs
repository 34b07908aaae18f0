//! Adyen, keyed by the HMAC key from the Customer Area, which is hex (`KeyFormat::Hex`: the
//! decoded 32 bytes are the key). Two variants (signature-schemes.md §2.6; Adyen's Python
//! library `Adyen/util.py`):
//!
//! - Standard notifications (payments): the body is `{"live":..,"notificationItems":
//!   [{"NotificationRequestItem":{..}}, ..]}` and each item carries
//!   `additionalData.hmacSignature` = base64 HMAC-SHA256 of
//!   `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`,
//!   a missing field as the empty string, `value` the integer minor units (`amount.value`),
//!   `success` as sent (`true`/`false`). EVERY item must verify, with one key: a batch with
//!   one bad item is refused whole. This is the one scheme here that reads fields, so the body
//!   is parsed to verify it; a body that does not parse is `Malformed`.
//! - Other webhooks (Balance Platform, Management API): header `HmacSignature` = base64
//!   HMAC-SHA256 of the raw body. When that header is present, it is what is verified, and
//!   the body is not read.
//!
//! Adyen expects `[accepted]` as the answer. Its optional Basic auth on the endpoint is
//! independent of this (and `Authorization` is never stored).
//!
//! Dedup ([`DEDUP`]): each item's `pspReference:eventCode:success` (signed fields; Adyen
//! resends an item with the same three), sorted and joined with `,`, so a batch is one key
//! whatever the order of its items; a batch that names one item twice is refused (400), as
//! Adyen never sends one and its key would hide that the item is in it twice. A body with no
//! items (the header variant) is keyed by its SHA-256. Each item is signed on its own, so
//! items of several captured notifications can be put together in one batch (`[A]` cut out
//! of `[A, B]`, `[A, B]` made of `[A]` and `[B]`): the batch also names each item's own key
//! ([`CustomKey::items`], the key of a batch of that item alone), and the store takes a batch
//! whose items are all known within the endpoint's window for a duplicate
//! (`store/intake.rs`). Adyen sends one item per notification, so its genuine notifications
//! are keyed item by item.

use super::secret::STANDARD_PAD_INDIFFERENT;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use serde_json::{Map, Value};
use subtle::{Choice, ConstantTimeEq};

use super::hmac_scheme::Algorithm;
use super::preset::{Coverage, KeyFormat, Preset, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, find_secret, header};
use crate::dedup::{CustomKey, DedupError, DedupRule};

pub const SIGNATURE: &str = "hmacsignature";
pub const ACK: &str = "[accepted]";

/// The signed fields of an item, in order; `value` and `currency` are read from `amount`.
const FIELDS: [&str; 8] = [
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "value",
    "currency",
    "eventCode",
    "success",
];

/// The default dedup key of an Adyen endpoint.
pub const DEDUP: CustomKey = CustomKey {
    name: "adyen-items",
    key: dedup_key,
    items: Some(items_of),
};

/// A field as signed: strings as they are, numbers as their JSON text, absent as empty.
fn text(item: &Map<String, Value>, name: &str) -> Option<String> {
    let value = match name {
        "value" | "currency" => item.get("amount").and_then(|amount| amount.get(name)),
        _ => item.get(name),
    };
    match value {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        Some(Value::Bool(flag)) => Some(flag.to_string()),
        Some(_) => None,
    }
}

fn signing_string(item: &Map<String, Value>, n: usize) -> Result<String, VerifyError> {
    let mut parts = Vec::with_capacity(FIELDS.len());
    for field in FIELDS {
        parts.push(text(item, field).ok_or_else(|| {
            VerifyError::Malformed(format!("notification item {n}: `{field}` is not a value"))
        })?);
    }
    Ok(parts.join(":"))
}

/// The `NotificationRequestItem`s of a standard notification, or None when it is not one.
fn items(document: &Value) -> Option<Vec<Option<&Map<String, Value>>>> {
    let list = document.get("notificationItems")?.as_array()?;
    Some(
        list.iter()
            .map(|entry| entry.get("NotificationRequestItem")?.as_object())
            .collect(),
    )
}

/// A base64 HMAC-SHA256, decoded.
fn decode_mac(text: &str, what: &str) -> Result<Vec<u8>, VerifyError> {
    STANDARD_PAD_INDIFFERENT
        .decode(text.trim())
        .ok()
        .filter(|mac| mac.len() == 32)
        .ok_or_else(|| VerifyError::Malformed(format!("{what} is not base64 of 32 bytes")))
}

fn verify_items(keys: &[Secret], body: &[u8]) -> Result<usize, VerifyError> {
    let document: Value = serde_json::from_slice(body).map_err(|_| {
        VerifyError::Malformed("no `HmacSignature` header, and the body is not JSON".into())
    })?;
    let items = items(&document)
        .filter(|items| !items.is_empty())
        .ok_or_else(|| {
            VerifyError::Malformed(
                "no `HmacSignature` header, and the body has no `notificationItems`".into(),
            )
        })?;
    let mut signed = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let n = i + 1;
        let item = item.ok_or_else(|| {
            VerifyError::Malformed(format!(
                "notification item {n} has no `NotificationRequestItem` object"
            ))
        })?;
        let signature = item
            .get("additionalData")
            .and_then(|data| data.get("hmacSignature"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                VerifyError::Malformed(format!(
                    "notification item {n} has no `additionalData.hmacSignature`"
                ))
            })?;
        let mac = decode_mac(
            signature,
            &format!("notification item {n}'s `hmacSignature`"),
        )?;
        signed.push((signing_string(item, n)?, mac));
    }
    // One key must verify every item. Every key and item is computed, with no early exit.
    let mut found = None;
    for (index, key) in keys.iter().enumerate() {
        let mut all = Choice::from(1);
        for (message, mac) in &signed {
            all &= key.mac(Algorithm::Sha256, &[message.as_bytes()]).ct_eq(mac);
        }
        if bool::from(all) && found.is_none() {
            found = Some(index);
        }
    }
    found.ok_or(VerifyError::Mismatch)
}

fn verify(keys: &[Secret], headers: &HeaderMap, body: &[u8]) -> Result<usize, VerifyError> {
    if headers.contains_key(SIGNATURE) {
        let mac = decode_mac(header(headers, SIGNATURE)?, "header `HmacSignature`")?;
        return find_secret(keys, &[mac], |key| key.mac(Algorithm::Sha256, &[body]));
    }
    verify_items(keys, body)
}

/// Each item's `pspReference:eventCode:success`, sorted and joined with `,`; the body's
/// SHA-256 when it is not a standard notification (no non-empty list of items with those
/// fields: the header variant's bodies). Either way a function of the signed content alone,
/// whatever the order of the items. Runs on a verified request only.
fn dedup_key(_headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
    let Some(mut keys) = item_keys(body) else {
        return Ok(hex::encode(crate::digest::sha256(&[body])));
    };
    // Positions kept for the message: which item repeats which.
    keys.sort_unstable();
    if let Some(pair) = keys.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        let (first, again) = (pair[0].1.min(pair[1].1), pair[0].1.max(pair[1].1));
        return Err(DedupError::Custom(format!(
            "notification item {again} repeats item {first} (the same pspReference, eventCode \
             and success)"
        )));
    }
    let keys: Vec<String> = keys.into_iter().map(|(key, _)| key).collect();
    Ok(keys.join(","))
}

/// Each item's own key, sorted, for a request [`dedup_key`] accepted (so no two are the
/// same); none for a body that is not a standard notification (keyed by its SHA-256).
fn items_of(_headers: &HeaderMap, body: &[u8]) -> Vec<String> {
    let mut keys: Vec<String> = item_keys(body)
        .unwrap_or_default()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    keys.sort_unstable();
    keys
}

/// Each item's key with its position (from 1), in the body's order.
fn item_keys(body: &[u8]) -> Option<Vec<(String, usize)>> {
    let document: Value = serde_json::from_slice(body).ok()?;
    let mut keys = Vec::new();
    for (i, item) in items(&document)?.into_iter().enumerate() {
        let [psp, event, success] =
            ["pspReference", "eventCode", "success"].map(|f| text(item?, f));
        keys.push((format!("{}:{}:{}", psp?, event?, success?), i + 1));
    }
    (!keys.is_empty()).then_some(keys)
}

pub(super) fn preset() -> Preset {
    Preset::new("adyen", Adyen, DedupRule::Custom(DEDUP))
        .key(KeyFormat::Hex)
        .ack(ACK)
}

#[derive(Debug)]
struct Adyen;

impl Scheme for Adyen {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request.headers, request.body).map(Checked::from)
    }

    /// The header variant: a sender cannot add a field to the body.
    fn sign(&self, key: &Secret, body: &[u8], _now: i64, _delivery_id: &str) -> Option<Signed> {
        let mac = STANDARD.encode(Algorithm::Sha256.mac(key.expose(), &[body]));
        Some(vec![(SIGNATURE.to_string(), mac)].into())
    }

    /// Each item's signed fields, not the body's bytes (nor, for a config, the header variant's:
    /// which variant a request uses is the request's choice).
    fn coverage(&self) -> Coverage {
        Coverage::Signed {
            headers: Vec::new(),
            body: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};
    use super::Algorithm;

    // Official vectors: Adyen/adyen-python-api-library `test/test_util.py`
    // (signature-schemes.md §7.1).
    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    const ITEM_SIG: &str = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=";
    const PAYLOAD: &str = "{\n    \"type\": \"merchant.created\",\n    \"environment\": \"test\",\n    \"createdAt\": \"01-01-2024\",\n    \"data\": {\n        \"capabilities\": {\n            \"sendToTransferInstrument\": {\n                \"requested\": true,\n                \"requestedLevel\": \"notApplicable\"\n            }\n        },\n        \"companyId\": \"YOUR_COMPANY_ID\",\n        \"merchantId\": \"YOUR_MERCHANT_ACCOUNT\",\n        \"status\": \"PreActive\"\n    }\n}";
    const PAYLOAD_SIG: &str = "NiqA5vsdV5etZMOaR27+GBSG4i6JeP6j1wkCM6t53vA=";

    /// The official item (no `originalReference`), with `signature` and changes.
    fn item(signature: &str, psp: &str, value: i64) -> serde_json::Value {
        json!({"NotificationRequestItem": {
            "additionalData": {"hmacSignature": signature},
            "amount": {"currency": "EUR", "value": value},
            "eventCode": "AUTHORISATION",
            "eventDate": "2014-08-06T13:39:03+02:00",
            "merchantAccountCode": "TestMerchant",
            "merchantReference": "TestPayment-1407325143704",
            "paymentMethod": "visa",
            "pspReference": psp,
            "reason": "",
            "success": "true"
        }})
    }

    fn body(items: &[serde_json::Value]) -> Vec<u8> {
        json!({"live": "false", "notificationItems": items})
            .to_string()
            .into_bytes()
    }

    fn official() -> serde_json::Value {
        item(ITEM_SIG, "7914073381342284", 1130)
    }

    /// The item signature of `psp`/`value`, computed with this file's HMAC.
    fn signed(psp: &str, value: i64) -> serde_json::Value {
        let key = hex::decode(KEY).unwrap();
        let message =
            format!("{psp}::TestMerchant:TestPayment-1407325143704:{value}:EUR:AUTHORISATION:true");
        let mac = STANDARD.encode(Algorithm::Sha256.mac(&key, &[message.as_bytes()]));
        item(&mac, psp, value)
    }

    fn verifier(keys: &[&str]) -> Verifier {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        Verifier::new("adyen", None, &keys, None).unwrap()
    }

    fn check(body: &[u8], pairs: &[(&str, &str)]) -> Result<usize, VerifyError> {
        verifier(&[KEY])
            .verify(&headers(pairs), body, 0)
            .map(|p| p.secret_index())
    }

    #[test]
    fn verifies_the_official_item() {
        assert_eq!(check(&body(&[official()]), &[]), Ok(0));
        // The lowercase spelling of the key is the same key.
        let lower = verifier(&[&KEY.to_lowercase()]);
        assert!(
            lower
                .verify(&http::HeaderMap::new(), &body(&[official()]), 0)
                .is_ok()
        );
        // Each signed field counts: amount, reference, a field that was absent.
        let mut changed = official();
        changed["NotificationRequestItem"]["amount"]["value"] = json!(1131);
        assert_eq!(check(&body(&[changed]), &[]), Err(VerifyError::Mismatch));
        let mut changed = official();
        changed["NotificationRequestItem"]["success"] = json!("false");
        assert_eq!(check(&body(&[changed]), &[]), Err(VerifyError::Mismatch));
        let mut changed = official();
        changed["NotificationRequestItem"]["originalReference"] = json!("X");
        assert_eq!(check(&body(&[changed]), &[]), Err(VerifyError::Mismatch));
        // An unsigned field does not.
        let mut changed = official();
        changed["NotificationRequestItem"]["reason"] = json!("anything");
        assert_eq!(check(&body(&[changed]), &[]), Ok(0));
    }

    #[test]
    fn verifies_the_official_header_variant_on_the_raw_body() {
        let payload = PAYLOAD.as_bytes();
        assert_eq!(check(payload, &[("HmacSignature", PAYLOAD_SIG)]), Ok(0));
        let respaced = PAYLOAD.replace("    ", "  ");
        assert_eq!(
            check(respaced.as_bytes(), &[("HmacSignature", PAYLOAD_SIG)]),
            Err(VerifyError::Mismatch)
        );
        // With the header present, the header is what counts, even over good items.
        let good = body(&[official()]);
        assert_eq!(
            check(&good, &[("hmacsignature", PAYLOAD_SIG)]),
            Err(VerifyError::Mismatch)
        );
        assert!(matches!(
            check(payload, &[("HmacSignature", "not base64!")]),
            Err(VerifyError::Malformed(_))
        ));
        let v = verifier(&[KEY]);
        assert_eq!(
            v.sign(payload, 0, ""),
            [("hmacsignature".to_string(), PAYLOAD_SIG.to_string())]
        );
    }

    #[test]
    fn every_item_of_a_batch_must_verify() {
        let two = body(&[official(), signed("8815407325143704", 2500)]);
        assert_eq!(check(&two, &[]), Ok(0));
        let mut bad = signed("8815407325143704", 2500);
        bad["NotificationRequestItem"]["amount"]["value"] = json!(2501);
        for items in [[official(), bad.clone()], [bad, official()]] {
            assert_eq!(check(&body(&items), &[]), Err(VerifyError::Mismatch));
        }
        // One item without a signature spoils the batch too.
        let mut unsigned = signed("8815407325143704", 2500);
        unsigned["NotificationRequestItem"]["additionalData"] = json!({});
        assert!(matches!(
            check(&body(&[official(), unsigned]), &[]),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn rotation_needs_one_key_for_the_whole_batch() {
        let other = "00".repeat(32);
        let v = verifier(&[&other, KEY]);
        let good = body(&[official(), signed("8815407325143704", 2500)]);
        assert_eq!(
            v.verify(&http::HeaderMap::new(), &good, 0)
                .map(|p| p.secret_index()),
            Ok(1)
        );
        assert_eq!(
            Verifier::new("adyen", None, &["not hex".to_string()], None).unwrap_err(),
            "this provider's key is hex (0-9, a-f), and this is not"
        );
    }

    #[test]
    fn what_is_not_a_signed_notification_is_malformed() {
        for bad in [
            b"[accepted]".to_vec(),
            br#"{"live":"false"}"#.to_vec(),
            br#"{"live":"false","notificationItems":[]}"#.to_vec(),
            br#"{"notificationItems":[{"Other":{}}]}"#.to_vec(),
            body(&[item("c29tZQ==", "1", 1)]),
        ] {
            let err = check(&bad, &[]).unwrap_err();
            assert!(matches!(err, VerifyError::Malformed(_)), "{err:?}");
        }
        let mut nested = official();
        nested["NotificationRequestItem"]["pspReference"] = json!({"a": 1});
        assert!(matches!(
            check(&body(&[nested]), &[]),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn answers_accepted_and_dedups_on_the_items() {
        let v = verifier(&[KEY]);
        assert_eq!(v.ack(), Some("[accepted]"));
        assert_eq!(v.default_dedup().to_string(), "adyen-items");
        let none = http::HeaderMap::new();
        let two = body(&[official(), signed("8815407325143704", 2500)]);
        let pair = "7914073381342284:AUTHORISATION:true,8815407325143704:AUTHORISATION:true";
        assert_eq!(v.default_dedup().extract(&none, &two).as_deref(), Ok(pair));
        // The same items in the other order: the same key.
        let swapped = body(&[signed("8815407325143704", 2500), official()]);
        assert_eq!(
            v.default_dedup().extract(&none, &swapped).as_deref(),
            Ok(pair)
        );
        // An item twice: refused, saying which.
        let twice = body(&[official(), signed("8815407325143704", 2500), official()]);
        assert_eq!(
            v.default_dedup()
                .extract(&none, &twice)
                .unwrap_err()
                .to_string(),
            "notification item 3 repeats item 1 (the same pspReference, eventCode and success)"
        );
        // Each item's own key: what a batch of that item alone is keyed by.
        let rule = v.default_dedup();
        assert_eq!(
            rule.item_keys(&none, &swapped),
            pair.split(',').collect::<Vec<_>>()
        );
        let one = body(&[official()]);
        assert_eq!(
            rule.item_keys(&none, &one),
            [rule.extract(&none, &one).unwrap()]
        );
        assert!(rule.item_keys(&none, PAYLOAD.as_bytes()).is_empty());
        let key = v
            .default_dedup()
            .extract(&none, PAYLOAD.as_bytes())
            .unwrap();
        assert_eq!(
            key.len(),
            64,
            "the header variant is keyed by its body's SHA-256"
        );
    }
}
