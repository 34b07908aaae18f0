//! Verify by fetching (`fetch = true` in `[endpoint.reconcile]`, docs/reconcile.md): before an
//! event of such an endpoint goes to a target, the object it names is fetched from the
//! gateway's API with the reconcile table's key, over the outbound client (`api_base`, the
//! system's roots and `ca_file`). Mercado Pago signs only the payment's id, Asaas only sends
//! a static token: the API's answer, over TLS with the account's key, is what the target can
//! trust.
//!
//! - Mercado Pago: a `payment` notification, `GET /v1/payments/{id}` (`Authorization:
//!   Bearer`), the id the signature covers (`data.id` of the query; one signed without it is
//!   rejected, never fetched by the unsigned body's id).
//! - Asaas: a `PAYMENT_...` event, `GET /v3/payments/{payment.id}` (`access_token` header).
//! - Cielo: every notification, `GET /1/sales/{PaymentId}` on the query host (`MerchantId` and
//!   `MerchantKey` headers); the body is nothing but that pointer, vouched for by the static
//!   headers, as Asaas's by its token.
//!
//! Other events (Mercado Pago's orders, Asaas's transfers) go out as they are. What the API
//! answered decides the attempt: 200, the object is kept with the event
//! ([`Store::keep_fetched`](crate::store::Store::keep_fetched): once; another route, a retry
//! or a replay reads it instead of asking again) and the target gets it beside the body
//! (command: `PORTARIA_FETCHED_FILE`; URL: [`envelope`]; pipe: the line's `fetched`). 404 (or
//! an id no payment has), the event is `rejected_by_fetch`: its delivery is dead with that
//! reason, never forwarded (a replay asks again). Anything else (the network, a 5xx, a 429,
//! a refused key, no answer within the route's `timeout_secs`) fails the attempt, retried on
//! the route's schedule. The key is in one header of one request (marked sensitive); no
//! error, log line or stored row holds it.

use http::header::ACCEPT;
use http::{HeaderName, HeaderValue, StatusCode, Uri};
use serde_json::Value;

use super::{Delivery, LaneShared, Outcome};
use crate::config::Reconcile;
use crate::outbound::{Client, KeyAuth, Limits, Request, Roots};
use crate::store::Fetched;

/// Where a gateway keeps the payments its notifications name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gateway {
    MercadoPago,
    Asaas,
    Cielo,
}

/// One endpoint's fetching, for a lane.
pub(super) struct Fetcher {
    gateway: Gateway,
    base: String,
    /// The client and the headers (the key's, Cielo's `MerchantId`); Err: why no request
    /// can be made (every attempt fails with it: nothing goes out unfetched).
    ready: Result<(Client, Vec<(HeaderName, HeaderValue)>), String>,
}

impl Fetcher {
    /// The fetching of an endpoint of `provider` with `reconcile`, if it fetches.
    pub(super) fn new(provider: &str, reconcile: Option<&Reconcile>) -> Option<Fetcher> {
        let r = reconcile.filter(|r| r.fetch)?;
        let gateway = match provider {
            "mercadopago" => Gateway::MercadoPago,
            "asaas" => Gateway::Asaas,
            "cielo" => Gateway::Cielo,
            _ => return None,
        };
        let ready = (|| -> Result<_, String> {
            let roots = Roots::system().with(&r.extra_roots);
            let client = Client::new(&roots, Limits::default()).map_err(|e| e.to_string())?;
            let scheme = match gateway {
                Gateway::MercadoPago => KeyAuth::Bearer,
                Gateway::Asaas => KeyAuth::AccessToken,
                Gateway::Cielo => KeyAuth::MerchantKey,
            };
            let headers = scheme
                .headers(r.api_key.expose(), r.merchant_id.as_deref())
                .ok_or("the API key cannot be sent in a header")?;
            Ok((client, headers))
        })();
        Some(Fetcher {
            gateway,
            base: r.api_base.clone(),
            ready,
        })
    }

    /// The API path of the payment `d` names ([`payment_path`]).
    fn path(&self, d: &Delivery) -> Option<Result<String, String>> {
        let kind = d.event_type.as_deref().unwrap_or("");
        payment_path(self.gateway, kind, d.signed_id.as_deref(), &d.body)
    }

    /// GETs `path`: Some(the object, compact JSON) on 2xx, None on 404, Err otherwise.
    async fn get(&self, path: &str) -> Result<Option<String>, String> {
        let (client, headers) = self.ready.as_ref().map_err(Clone::clone)?;
        let url: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|_| format!("cannot make a URL of {path}"))?;
        let mut request =
            Request::get(url).header(ACCEPT, HeaderValue::from_static("application/json"));
        for (name, value) in headers {
            request = request.header(name.clone(), value.clone());
        }
        let answer = client.send(request).await.map_err(|e| e.to_string())?;
        match answer.status {
            s if s.is_success() => match answer.json::<Value>() {
                Ok(object) if object.is_object() => Ok(Some(object.to_string())),
                _ => Err(format!("GET {path}: the answer is not a JSON object")),
            },
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::UNAUTHORIZED => Err("the API key was refused (HTTP 401)".into()),
            s => Err(format!("GET {path}: HTTP {}", s.as_u16())),
        }
    }
}

/// One attempt of `d` on a lane that fetches: the object fetched (or kept from before) goes to
/// the target with the event; a rejected event is dead; a failed fetch, retried.
pub(super) async fn deliver(lane: &LaneShared, fetcher: &Fetcher, d: &Delivery) -> Outcome {
    match fetched(lane, fetcher, d).await {
        Ok(None) => lane.runner.deliver(d).await,
        Ok(Some(object)) => {
            let mut with = d.clone();
            with.fetched = Some(object);
            lane.runner.deliver(&with).await
        }
        Err(outcome) => outcome,
    }
}

/// The object `d` names, from the store or the API; None: it names none.
async fn fetched(
    lane: &LaneShared,
    fetcher: &Fetcher,
    d: &Delivery,
) -> Result<Option<String>, Outcome> {
    let failed = |what: &str, why: String| Outcome::Failed(format!("fetch: {what}{why}"));
    match lane.store.fetched(d.event_id).await {
        Ok(Some(Fetched::Object(object))) => return Ok(Some(object)),
        // Rejected before: asked again (a replay after the owner fixed api_base).
        Ok(_) => {}
        Err(e) => return Err(failed("cannot read the store: ", e.to_string())),
    }
    let got = match fetcher.path(d) {
        None => return Ok(None),
        Some(Err(why)) => Fetched::Rejected(why),
        Some(Ok(path)) => match tokio::time::timeout(lane.timeout, fetcher.get(&path)).await {
            Ok(Ok(Some(object))) => Fetched::Object(object),
            Ok(Ok(None)) => Fetched::Rejected(format!(
                "the gateway has no such payment (GET {path}: HTTP 404)"
            )),
            Ok(Err(why)) => return Err(failed("", why)),
            Err(_) => {
                let secs = lane.timeout.as_secs_f64();
                let why = format!("GET {path}: no answer within the route's {secs}s timeout");
                return Err(failed("", why));
            }
        },
    };
    match lane.store.keep_fetched(d.event_id, got).await {
        Ok(Fetched::Object(object)) => Ok(Some(object)),
        Ok(Fetched::Rejected(why)) => Err(Outcome::Permanent(format!("rejected_by_fetch: {why}"))),
        Err(e) => Err(failed("cannot keep the answer: ", e.to_string())),
    }
}

/// The API path of the payment an event of `kind` names; None for an event that names none;
/// Err when it should and has no id a payment could have. Mercado Pago's is the id its
/// signature covers (`data.id` of the URL), never the unsigned body's: a notification signed
/// without one is rejected, not fetched by what anyone could have written. Asaas and Cielo
/// sign nothing: their static credential vouches for the whole request, the id included.
fn payment_path(
    gateway: Gateway,
    kind: &str,
    signed_id: Option<&str>,
    body: &[u8],
) -> Option<Result<String, String>> {
    let (id, path) = match gateway {
        Gateway::MercadoPago if kind == "payment" => match signed_id {
            Some(id) => (Some(id.to_string()), "/v1/payments/"),
            None => {
                let why =
                    "the notification's signature covers no payment id (`data.id` of its URL)";
                return Some(Err(why.to_string()));
            }
        },
        Gateway::Asaas if kind.starts_with("PAYMENT_") => {
            (pointer(body, "/payment/id"), "/v3/payments/")
        }
        // Every notification of Cielo's is `{"PaymentId", "ChangeType"}`: look the sale up.
        Gateway::Cielo => (pointer(body, "/PaymentId"), "/1/sales/"),
        _ => return None,
    };
    Some(match id {
        Some(id) if plain(&id) => Ok(format!("{path}{id}")),
        _ => Err("the event names no payment id the gateway could have".to_string()),
    })
}

/// The id at `at` in the JSON `body`, as text.
fn pointer(body: &[u8], at: &str) -> Option<String> {
    text(serde_json::from_slice::<Value>(body).ok()?.pointer(at)?)
}

/// An id as text: a string, or a number (Mercado Pago's `data.id` may be either).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An id that can go into a URL path as it is: what payment ids are made of.
fn plain(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a URL target is posted for an event with a fetched object: `{"event": <the body>,
/// "fetched": <the object>}`, the body as JSON when it is JSON, else as a string (invalid
/// UTF-8 replaced). One JSON document, so a target reads both with one parse, and the
/// Standard Webhooks signature covers both.
pub(super) fn envelope(body: &[u8], fetched: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + fetched.len() + 24);
    out.extend_from_slice(b"{\"event\":");
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
        out.extend_from_slice(body.trim_ascii());
    } else {
        let text = Value::String(String::from_utf8_lossy(body).into_owned());
        out.extend_from_slice(text.to_string().as_bytes());
    }
    out.extend_from_slice(b",\"fetched\":");
    out.extend_from_slice(fetched.as_bytes());
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_holds_a_json_body_as_it_is_and_any_other_as_a_string() {
        let fetched = r#"{"id":59,"status":"approved"}"#;
        let json = envelope(b" {\"data\": {\"id\": \"59\"}}\n", fetched);
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"event":{"data": {"id": "59"}},"fetched":{"id":59,"status":"approved"}}"#
        );
        let form: Value = serde_json::from_slice(&envelope(b"a=1&b=\"2\"", fetched)).unwrap();
        assert_eq!(form["event"], "a=1&b=\"2\"");
        assert_eq!(form["fetched"]["status"], "approved");
    }

    #[test]
    fn mercado_pago_fetches_only_the_signed_id_and_asaas_the_payment_it_names() {
        let body = br#"{"data":{"id":"666"},"payment":{"id":"pay_1"}}"#;
        let mp = |signed| payment_path(Gateway::MercadoPago, "payment", signed, body);
        assert_eq!(mp(Some("59")), Some(Ok("/v1/payments/59".to_string())));
        let unsigned = mp(None).unwrap().unwrap_err();
        assert!(
            unsigned.contains("signature covers no payment id"),
            "{unsigned}"
        );
        assert_eq!(
            payment_path(Gateway::MercadoPago, "merchant_order", None, body),
            None
        );
        let asaas = payment_path(Gateway::Asaas, "PAYMENT_RECEIVED", None, body);
        assert_eq!(asaas, Some(Ok("/v3/payments/pay_1".to_string())));
        assert_eq!(
            payment_path(Gateway::Asaas, "TRANSFER_DONE", None, body),
            None
        );
        let bad = payment_path(Gateway::Asaas, "PAYMENT_RECEIVED", None, b"{}");
        assert!(bad.unwrap().is_err());
        // Cielo: whatever the change, the sale its PaymentId names; none, rejected.
        let cielo = br#"{"PaymentId":"24bc8366-fc31-4d6c-8555-17049a836a07","ChangeType":3}"#;
        assert_eq!(
            payment_path(Gateway::Cielo, "", None, cielo),
            Some(Ok(
                "/1/sales/24bc8366-fc31-4d6c-8555-17049a836a07".to_string()
            ))
        );
        let none = payment_path(Gateway::Cielo, "", None, br#"{"ChangeType":1}"#);
        assert!(none.unwrap().is_err());
    }

    #[test]
    fn only_plain_ids_go_into_a_path() {
        assert!(plain("pay_080225913252") && plain("59"));
        for bad in ["", "../v1/x", "1?x=2", "1 2", &"9".repeat(65)] {
            assert!(!plain(bad), "{bad}");
        }
    }
}
