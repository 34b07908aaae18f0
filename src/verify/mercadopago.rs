//! Mercado Pago: `x-signature: ts=<ts>,v1=<hex>` and `x-request-id`. `v1` is the hex
//! HMAC-SHA256, keyed by the application's "secret signature" as UTF-8, of the manifest
//! `id:<data.id>;request-id:<x-request-id>;ts:<ts>;`, where `data.id` is the QUERY-STRING
//! parameter of the notification URL (not the body) and a part whose value is absent is left
//! out (signature-schemes.md §2.5; mercadopago/devsite-docs; the SDKs' `WebhookSignatureValidator`).
//!
//! - Header parsing as the SDKs: split on `,`, each item on its first `=`, keys trimmed and
//!   lowercased; `ts` and `v1` are kept, other versions ignored. A second `ts` or `v1` is
//!   refused (which one was meant would be a guess).
//! - `data.id`: the `data.id` query parameter, else `id` (what some integrations send). The id
//!   is used exactly as received, then, if that fails and lowercasing changes it (the Orders
//!   API's `ORD01...`), lowercased: MP's docs and SDK history disagree on the case, and both
//!   attempts are authenticated by the HMAC, so the retry costs no security.
//! - `ts` is unix seconds (the docs' example, the Python SDK's arithmetic, the Node SDK's fix
//!   99857f3), or milliseconds when it has 13 digits or more (the docs' text); it is signed as
//!   received either way.
//! - Window: the SDKs check none by default; portaria applies the usual ±300 s, because a
//!   signed timestamp with no window is no replay defence. MP retries every 15 minutes, and
//!   whether a retry is signed again is undocumented: if retries after an outage show up as
//!   `stale_timestamp`, raise `tolerance_secs`.
//! - The BODY IS NOT SIGNED (MP's design): only the id, the request id and the time are. Treat
//!   the body as a hint and fetch the resource by `data.id` from MP's API before acting on it:
//!   portaria hands targets the signed id (`Verified::signed_id`). A body whose `data.id` is
//!   not the signed one, or that spells `data` or `data.id` twice (a reader taking the first
//!   would see another id than one taking the last), is refused (`Contradicts`, a 400) after
//!   the MAC matched: what is stored and forwarded is never a body that names another object
//!   than the signature. A query without `data.id` (MP's manifest then leaves `id:` out) signs
//!   no id: no body check, no signed id.
//! - Dedup ([`signed_key`]): only signed material, never the body: the manifest without its
//!   timestamp, `id:<data.id>;request-id:<x-request-id>;`, or with it when there is no request
//!   id (`id:<data.id>;ts:<ts>;`). The body's notification `id` was the key before: unsigned,
//!   so one captured request let anyone claim the ids of notifications still to come. MP's docs
//!   and SDKs say nothing about what a retry keeps (the notification `id` is "stable", the body
//!   is unsigned; whether `x-request-id` is kept is undocumented; MP's own guidance is to make
//!   handlers idempotent on `data.id` and type): keyed this way, a retry with the same
//!   `x-request-id` is one event even when MP signs it again at a new `ts`, and a retry with a
//!   new one is a second event. The choice is a second delivery of a notification over a lost
//!   one: keying on the signed `data.id` alone would make `payment.updated` a duplicate of
//!   `payment.created`, and a target that fetches the payment by id handles a second delivery.
//!   Without `x-request-id`, two notifications of one object signed in the same `ts` are one
//!   event (nothing signed tells them apart); MP sends the header with every signed webhook.
//! - QR-code and legacy IPN (`topic`/`resource`) notifications are not signed, and fail here.

use http::HeaderMap;
use serde::Deserialize;

use super::hmac_scheme::Algorithm;
use super::preset::{Carried, Coverage, Preset, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, check_window, find_secret, header};
use crate::dedup::DedupRule;

pub const SIGNATURE: &str = "x-signature";
pub const REQUEST_ID: &str = "x-request-id";

/// The manifest MP signs, parts with no value left out.
fn manifest(data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    let mut text = String::new();
    if let Some(id) = data_id {
        text.push_str(&format!("id:{id};"));
    }
    if let Some(request_id) = request_id {
        text.push_str(&format!("request-id:{request_id};"));
    }
    text.push_str(&format!("ts:{ts};"));
    text
}

/// The dedup key of a verified request (see the module doc): the manifest as signed, without
/// `ts:` when a request id tells notifications apart.
fn signed_key(data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    match request_id {
        Some(_) => {
            let mut key = manifest(data_id, request_id, ts);
            key.truncate(key.len() - "ts:;".len() - ts.len());
            key
        }
        None => manifest(data_id, None, ts),
    }
}

/// What of the body is checked against the signature: `data.id`. serde's derived readers
/// refuse a field given twice, so a body cannot carry one id for a reader that takes the first
/// and another for one that takes the last; every other member is ignored.
#[derive(Deserialize)]
struct Notification {
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    id: Option<serde_json::Value>,
}

/// Refuses a body that names another object than the signed `id` (`lowered`: the signature
/// matched the lowercased query id, so the body's is compared lowercased). A body that is not
/// JSON, or has no `data.id`, names none.
fn check_body(body: &[u8], signed_id: &str, lowered: bool) -> Result<(), VerifyError> {
    let contradicts = |why: &str| Err(VerifyError::Contradicts(why.to_string()));
    let notification: Notification = match serde_json::from_slice(body) {
        Ok(notification) => notification,
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return contradicts("it spells `data` or `data.id` twice, or not as an object and id");
        }
        Err(_) => return Ok(()),
    };
    let body_id = match notification.data.and_then(|data| data.id) {
        None | Some(serde_json::Value::Null) => return Ok(()),
        Some(serde_json::Value::String(text)) => text,
        Some(serde_json::Value::Number(number)) => number.to_string(),
        Some(_) => return contradicts("its `data.id` is not a string or number"),
    };
    let same = if lowered {
        body_id.to_lowercase() == signed_id
    } else {
        body_id == signed_id
    };
    if same {
        Ok(())
    } else {
        contradicts("its `data.id` is not the query's `data.id`, which the signature covers")
    }
}

/// A header that may be absent (None, like a blank one); given twice it is refused.
fn optional_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, VerifyError> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) if value.as_bytes().trim_ascii().is_empty() => Ok(None),
        _ => header(headers, name).map(Some),
    }
}

/// The `data.id` query parameter, else `id`; None when neither has a value.
fn data_id(request: &Request<'_>) -> Result<Option<String>, VerifyError> {
    for name in ["data.id", "id"] {
        let mut values = request.query_values(name);
        if values.len() > 1 {
            return Err(VerifyError::Malformed(format!(
                "query parameter `{name}` appears more than once"
            )));
        }
        if let Some(value) = values.pop().map(|v| v.trim().to_string())
            && !value.is_empty()
        {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// `ts` and the `v1` MAC of an `x-signature` value.
fn parse_signature(value: &str) -> Result<(&str, Vec<u8>), VerifyError> {
    let malformed = |why: &str| VerifyError::Malformed(format!("header `{SIGNATURE}` {why}"));
    let (mut ts, mut v1) = (None, None);
    for item in value.split(',') {
        let Some((key, value)) = item.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if value.is_empty() {
            continue;
        }
        let slot = match key.as_str() {
            "ts" => &mut ts,
            "v1" => &mut v1,
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(malformed(&format!("has more than one `{key}=`")));
        }
    }
    let ts = ts.ok_or_else(|| malformed("has no `ts=`"))?;
    if !ts.bytes().all(|b| b.is_ascii_digit()) || ts.len() > 16 {
        return Err(malformed("has a `ts=` that is not a unix timestamp"));
    }
    let v1 = v1.ok_or_else(|| malformed("has no `v1=` signature"))?;
    let mac = hex::decode(v1)
        .ok()
        .filter(|mac| mac.len() == 32)
        .ok_or_else(|| malformed("has a `v1=` that is not 64 hex digits"))?;
    Ok((ts, mac))
}

/// The MAC of `manifest` under a key, for [`find_secret`].
fn mac(manifest: &str) -> impl Fn(&Secret) -> Vec<u8> + '_ {
    move |key| key.mac(Algorithm::Sha256, &[manifest.as_bytes()])
}

/// `ts` in seconds: milliseconds when it has 13 digits or more.
fn seconds(ts: &str) -> i64 {
    // `parse_signature` allows at most 16 digits, which fit.
    let value: i64 = ts.parse().unwrap_or(i64::MAX);
    if ts.len() >= 13 { value / 1000 } else { value }
}

fn verify(
    keys: &[Secret],
    request: &Request<'_>,
    now: i64,
    tolerance_secs: u64,
) -> Result<Checked, VerifyError> {
    let (ts, received) = parse_signature(header(request.headers, SIGNATURE)?)?;
    let request_id = optional_header(request.headers, REQUEST_ID)?;
    let id = data_id(request)?;
    let received = [received];
    let exact = manifest(id.as_deref(), request_id, ts);
    // The id as signed: as received, or lowercased when only that form matched.
    let (index, signed_id, lowered) = match find_secret(keys, &received, mac(&exact)) {
        Ok(index) => (index, id, false),
        Err(mismatch) => match id.as_deref().map(str::to_lowercase) {
            Some(lower) if Some(lower.as_str()) != id.as_deref() => {
                let lowered = manifest(Some(&lower), request_id, ts);
                (
                    find_secret(keys, &received, mac(&lowered))?,
                    Some(lower),
                    true,
                )
            }
            _ => return Err(mismatch),
        },
    };
    check_window(seconds(ts), now, tolerance_secs)?;
    if let Some(signed_id) = &signed_id {
        check_body(request.body, signed_id, lowered)?;
    }
    Ok(Checked {
        index,
        signed_key: Some(signed_key(signed_id.as_deref(), request_id, ts)),
        signed_id,
    })
}

/// The id a sender puts in the query string: the body's `data.id`, when the body is JSON.
fn body_data_id(body: &[u8]) -> Option<String> {
    let document: serde_json::Value = serde_json::from_slice(body).ok()?;
    match document.pointer("/data/id")? {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn sign(key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Signed {
    let id = body_data_id(body);
    let request_id = Some(delivery_id).filter(|id| !id.is_empty());
    let ts = now.to_string();
    let mac = Algorithm::Sha256.mac(
        key.expose(),
        &[manifest(id.as_deref(), request_id, &ts).as_bytes()],
    );
    let mut headers = vec![(
        SIGNATURE.to_string(),
        format!("ts={ts},v1={}", hex::encode(mac)),
    )];
    if let Some(request_id) = request_id {
        headers.push((REQUEST_ID.to_string(), request_id.to_string()));
    }
    let query = id.map(|id| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("data.id", &id)
            .finish()
    });
    Signed { headers, query }
}

/// The dedup rule: [`signed_key`], through `Verified::signed_key`.
pub const DEDUP: DedupRule = DedupRule::Signed("mercadopago-manifest");

/// Every notification names its resource in `data.id` (payments, orders, subscriptions: MP's
/// "Webhooks" page): one without it is `drift`.
pub const CARRIES: &[Carried] = &[Carried {
    pointer: "/data/id",
    name: "data.id",
    types: None,
    except: &[],
}];

pub(super) fn preset() -> Preset {
    Preset::new("mercadopago", MercadoPago, DEDUP).carries(CARRIES)
}

#[derive(Debug)]
struct MercadoPago;

impl Scheme for MercadoPago {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        verify(keys, request, now, tolerance_secs)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Some(sign(key, body, now, delivery_id))
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    /// The request id; the query's `data.id` and the signature's `ts`; not the body.
    fn coverage(&self) -> Coverage {
        Coverage::Signed {
            headers: vec![http::HeaderName::from_static(REQUEST_ID)],
            body: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::super::tests::headers;
    use super::super::{Request, Verified, Verifier, VerifyError};

    // Computed vectors (Python stdlib, signature-schemes.md §7.2), not provider-issued; the
    // ones marked "here" were computed the same way for this file.
    const SECRET: &str = "your_secret_key_here";
    const ORDER_REQUEST: &str = "2066ca19-c6f1-498a-be75-1923005edd06";
    const ORDER_TS: i64 = 1742505638;
    const ORDER_EXACT: &str = "4dcce5f5d301499c25d72ae2cf39f645b3aa6e533d875064e0d6a42f4e18b0ac";
    const ORDER_LOWER: &str = "54a399823d9c854195a604762dca8c672bb975eb0c8bb5c2486283eee2fa88e4";
    const PAY_REQUEST: &str = "bb56a2f1-6aae-46ac-982e-9dcd3581d08e";
    const PAY_TS: i64 = 1704908010;
    const PAY_WITH_ID: &str = "c0412036a1c8b6a874049f5931f01bc6c12308647ba4d17136aacbd61207ea0f";
    const PAY_NO_ID: &str = "1e14733af285d181f3a4518f56aeaab5e8057184b4f937cab41d186aaa0f634a";
    // Here: `id:999999999;ts:1704908010;` (no x-request-id).
    const PAY_NO_REQUEST: &str = "cd51d20ff8341874f2354acb6970d0e0bfdf33ce250cfa01982ac4fade40a6c8";
    // Here: `id:999999999;request-id:bb56...;ts:1704908010123;` (ts in milliseconds).
    const PAY_MS: &str = "e103c7a387596b9505b0e3164f40c5bc90e708dd5420eebd515c852467c5c24d";

    const BODY: &[u8] =
        br#"{"action":"payment.updated","data":{"id":"999999999"},"id":12345,"type":"payment"}"#;

    /// The body MP would send with `query`: its `data.id` is the query's.
    fn body_for(query: Option<&str>) -> Vec<u8> {
        let none = HeaderMap::new();
        let request = Request::new(&none, b"").with_query(query);
        let ids = [request.query_values("data.id"), request.query_values("id")].concat();
        match ids.first() {
            Some(id) => {
                format!(r#"{{"action":"payment.updated","data":{{"id":"{id}"}},"id":12345}}"#)
                    .into_bytes()
            }
            None => BODY.to_vec(),
        }
    }

    fn verified(
        signature: &str,
        request_id: Option<&str>,
        query: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, VerifyError> {
        let v = Verifier::new("mercadopago", None, &[SECRET.to_string()], None).unwrap();
        let mut pairs = vec![("x-signature", signature)];
        pairs.extend(request_id.map(|id| ("x-request-id", id)));
        let h = headers(&pairs);
        v.verify_request(&Request::new(&h, body).with_query(query), now)
    }

    fn check(
        signature: &str,
        request_id: Option<&str>,
        query: Option<&str>,
        now: i64,
    ) -> Result<usize, VerifyError> {
        verified(signature, request_id, query, &body_for(query), now).map(|p| p.secret_index())
    }

    #[test]
    fn verifies_the_vectors_with_and_without_data_id() {
        let with_id = format!("ts={PAY_TS},v1={PAY_WITH_ID}");
        let query = Some("data.id=999999999&type=payment");
        assert_eq!(check(&with_id, Some(PAY_REQUEST), query, PAY_TS), Ok(0));
        // `id` when there is no `data.id`.
        assert_eq!(
            check(&with_id, Some(PAY_REQUEST), Some("id=999999999"), PAY_TS),
            Ok(0)
        );
        let no_id = format!("ts={PAY_TS},v1={PAY_NO_ID}");
        assert_eq!(check(&no_id, Some(PAY_REQUEST), None, PAY_TS), Ok(0));
        assert_eq!(
            check(&no_id, Some(PAY_REQUEST), Some("type=payment"), PAY_TS),
            Ok(0)
        );
        let no_request = format!("ts={PAY_TS},v1={PAY_NO_REQUEST}");
        assert_eq!(check(&no_request, None, query, PAY_TS), Ok(0));
        // Each part is signed: another id, request id, or a missing id does not verify.
        for (request_id, query) in [
            (Some(PAY_REQUEST), Some("data.id=999999998")),
            (Some(ORDER_REQUEST), query),
            (Some(PAY_REQUEST), None),
            (None, query),
        ] {
            assert_eq!(
                check(&with_id, request_id, query, PAY_TS),
                Err(VerifyError::Mismatch),
                "{request_id:?} {query:?}"
            );
        }
    }

    #[test]
    fn an_alphanumeric_id_is_tried_as_received_then_lowercased() {
        let query = Some("data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3");
        let exact = format!("ts={ORDER_TS},v1={ORDER_EXACT}");
        let lower = format!("ts={ORDER_TS},v1={ORDER_LOWER}");
        assert_eq!(check(&exact, Some(ORDER_REQUEST), query, ORDER_TS), Ok(0));
        assert_eq!(check(&lower, Some(ORDER_REQUEST), query, ORDER_TS), Ok(0));
        // Never the other way round: a lowercase id is not uppercased.
        let query = Some("data.id=ord01jq4s4ky8hwq6na5pxb65b3d3");
        assert_eq!(check(&lower, Some(ORDER_REQUEST), query, ORDER_TS), Ok(0));
        assert_eq!(
            check(&exact, Some(ORDER_REQUEST), query, ORDER_TS),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn parses_the_header_as_the_sdk_does() {
        let query = Some("data.id=999999999");
        for header in [
            format!("ts={PAY_TS},v1={PAY_WITH_ID}"),
            format!(" TS = {PAY_TS} , V1 = {PAY_WITH_ID} "),
            format!("v1={PAY_WITH_ID},ts={PAY_TS},v2=ffff,junk"),
            format!("ts={PAY_TS},v1={}", PAY_WITH_ID.to_uppercase()),
        ] {
            assert_eq!(
                check(&header, Some(PAY_REQUEST), query, PAY_TS),
                Ok(0),
                "{header}"
            );
        }
        for bad in [
            format!("v1={PAY_WITH_ID}"),
            format!("ts={PAY_TS}"),
            format!("ts={PAY_TS},v2={PAY_WITH_ID}"),
            format!("ts=-1,v1={PAY_WITH_ID}"),
            format!("ts=soon,v1={PAY_WITH_ID}"),
            format!("ts={PAY_TS},v1=abc"),
            format!("ts={PAY_TS},ts={PAY_TS},v1={PAY_WITH_ID}"),
            format!("ts={PAY_TS},v1={PAY_WITH_ID},v1={PAY_WITH_ID}"),
        ] {
            assert!(
                matches!(
                    check(&bad, Some(PAY_REQUEST), query, PAY_TS),
                    Err(VerifyError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            check(
                "ts=1,v1=00",
                Some(PAY_REQUEST),
                Some("data.id=1&data.id=2"),
                1
            ),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn the_window_takes_seconds_or_milliseconds() {
        let query = Some("data.id=999999999");
        let secs = format!("ts={PAY_TS},v1={PAY_WITH_ID}");
        assert_eq!(check(&secs, Some(PAY_REQUEST), query, PAY_TS + 300), Ok(0));
        assert_eq!(
            check(&secs, Some(PAY_REQUEST), query, PAY_TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            check(&secs, Some(PAY_REQUEST), query, PAY_TS - 301),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        let ms = format!("ts={PAY_TS}123,v1={PAY_MS}");
        assert_eq!(check(&ms, Some(PAY_REQUEST), query, PAY_TS + 300), Ok(0));
        assert_eq!(
            check(&ms, Some(PAY_REQUEST), query, PAY_TS + 301),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        // A forgery with an old timestamp learns nothing about the window.
        let forged = format!("ts={PAY_TS},v1={PAY_NO_ID}");
        assert_eq!(
            check(&forged, Some(PAY_REQUEST), query, PAY_TS + 301),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn signs_with_the_body_data_id_in_the_query() {
        let v = Verifier::new("mercadopago", None, &[SECRET.to_string()], None).unwrap();
        let signed = v.sign_request(BODY, PAY_TS, PAY_REQUEST).unwrap();
        assert_eq!(signed.query.as_deref(), Some("data.id=999999999"));
        let expected = [
            (
                "x-signature".to_string(),
                format!("ts={PAY_TS},v1={PAY_WITH_ID}"),
            ),
            ("x-request-id".to_string(), PAY_REQUEST.to_string()),
        ];
        assert_eq!(signed.headers, expected);
        // A numeric `data.id` too; a body that is not JSON signs without an id.
        let numeric = br#"{"data":{"id":999999999}}"#;
        let signed = v.sign_request(numeric, PAY_TS, PAY_REQUEST).unwrap();
        assert_eq!(signed.query.as_deref(), Some("data.id=999999999"));
        let signed = v.sign_request(b"id=1", PAY_TS, PAY_REQUEST).unwrap();
        assert_eq!(signed.query, None);
        assert_eq!(signed.headers[0].1, format!("ts={PAY_TS},v1={PAY_NO_ID}"));
        assert!(v.signs_timestamp());
        assert_eq!(v.default_dedup().to_string(), "mercadopago-manifest");
    }

    #[test]
    fn a_body_naming_another_object_than_the_signature_is_refused() {
        let with_id = format!("ts={PAY_TS},v1={PAY_WITH_ID}");
        let query = Some("data.id=999999999&type=payment");
        let refused = |body: &[u8]| {
            matches!(
                verified(&with_id, Some(PAY_REQUEST), query, body, PAY_TS),
                Err(VerifyError::Contradicts(_))
            )
        };
        assert!(refused(br#"{"data":{"id":"123"},"id":1}"#));
        assert!(refused(br#"{"data":{"id":123},"id":1}"#));
        assert!(refused(br#"{"data":{"id":["999999999"]}}"#));
        // Twice, whichever copy a reader takes.
        assert!(refused(
            br#"{"data":{"id":"123"},"data":{"id":"999999999"}}"#
        ));
        assert!(refused(br#"{"data":{"id":"123","id":"999999999"}}"#));
        // The same id, as a string or a number; no `data.id`, or no JSON: nothing contradicts.
        for body in [
            &br#"{"data":{"id":"999999999"},"id":1}"#[..],
            br#"{"data":{"id":999999999},"id":1}"#,
            br#"{"data":{},"id":1}"#,
            br#"{"type":"payment"}"#,
            b"not json",
        ] {
            let proof = verified(&with_id, Some(PAY_REQUEST), query, body, PAY_TS);
            assert_eq!(
                proof.as_ref().map(|p| p.signed_id()),
                Ok(Some("999999999")),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // A forgery is told `Mismatch` before its body is read.
        let forged = format!("ts={PAY_TS},v1={PAY_NO_ID}");
        assert_eq!(
            verified(&forged, Some(PAY_REQUEST), query, b"{\"data\":1}", PAY_TS).unwrap_err(),
            VerifyError::Mismatch
        );
    }

    #[test]
    fn a_lowercased_signature_compares_the_body_id_lowercased() {
        let query = Some("data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3");
        let lower = format!("ts={ORDER_TS},v1={ORDER_LOWER}");
        let body = br#"{"data":{"id":"ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"}}"#;
        let proof = verified(&lower, Some(ORDER_REQUEST), query, body, ORDER_TS).unwrap();
        assert_eq!(proof.signed_id(), Some("ord01jq4s4ky8hwq6na5pxb65b3d3"));
        let other = br#"{"data":{"id":"ORD01JQ4S4KY8HWQ6NA5PXB65B3D4"}}"#;
        assert!(matches!(
            verified(&lower, Some(ORDER_REQUEST), query, other, ORDER_TS),
            Err(VerifyError::Contradicts(_))
        ));
        // Signed as received: compared exactly.
        let exact = format!("ts={ORDER_TS},v1={ORDER_EXACT}");
        let proof = verified(&exact, Some(ORDER_REQUEST), query, body, ORDER_TS).unwrap();
        assert_eq!(proof.signed_id(), Some("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"));
        let lowered = br#"{"data":{"id":"ord01jq4s4ky8hwq6na5pxb65b3d3"}}"#;
        assert!(matches!(
            verified(&exact, Some(ORDER_REQUEST), query, lowered, ORDER_TS),
            Err(VerifyError::Contradicts(_))
        ));
    }

    #[test]
    fn the_dedup_key_is_the_signed_manifest() {
        let key = |signature: &str, request_id, query, now| {
            let proof = verified(signature, request_id, query, b"{}", now).unwrap();
            proof.signed_key().map(str::to_string)
        };
        let query = Some("data.id=999999999");
        let with_id = format!("ts={PAY_TS},v1={PAY_WITH_ID}");
        let expected = format!("id:999999999;request-id:{PAY_REQUEST};");
        assert_eq!(
            key(&with_id, Some(PAY_REQUEST), query, PAY_TS),
            Some(expected)
        );
        // No request id: the timestamp is all that tells two notifications apart.
        let no_request = format!("ts={PAY_TS},v1={PAY_NO_REQUEST}");
        assert_eq!(
            key(&no_request, None, query, PAY_TS),
            Some(format!("id:999999999;ts:{PAY_TS};"))
        );
        // No `data.id` in the query: no signed id, and the key has no `id:`.
        let no_id = format!("ts={PAY_TS},v1={PAY_NO_ID}");
        let proof = verified(
            &no_id,
            Some(PAY_REQUEST),
            None,
            br#"{"data":{"id":"7"}}"#,
            PAY_TS,
        );
        let proof = proof.unwrap();
        assert_eq!(proof.signed_id(), None);
        assert_eq!(
            proof.signed_key(),
            Some(format!("request-id:{PAY_REQUEST};").as_str())
        );
        // Lowercased: the key holds the id as signed.
        let lower = format!("ts={ORDER_TS},v1={ORDER_LOWER}");
        let upper = Some("data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3");
        assert_eq!(
            key(&lower, Some(ORDER_REQUEST), upper, ORDER_TS),
            Some(format!(
                "id:ord01jq4s4ky8hwq6na5pxb65b3d3;request-id:{ORDER_REQUEST};"
            ))
        );
    }
}
