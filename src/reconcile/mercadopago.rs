//! Mercado Pago: its notifications name a payment and carry none of its state (`{"action":
//! "payment.updated", "data": {"id": "123"}}`, only `data.id` signed), and it cannot be asked
//! to send one again. So a run looks at the payments themselves: those updated in the window,
//! `GET /v1/payments/search?range=date_last_updated&begin_date=...&end_date=...&sort=
//! date_last_updated&criteria=asc&limit=50&offset=N`, page after page while the offset is below
//! `paging.total` (at most [`MAX_PAGES`]: Mercado Pago refuses deep offsets). A payment whose
//! last update portaria never heard of (no notification of it, by its signed `data.id`,
//! received at or after its `date_last_updated`) is stored as a state event of the endpoint
//! (`taken.rs`, origin `reconcile`): type `payment`, the payment id as its object and its
//! signed id (the API said it), keyed `mercadopago:payment:<id>:<status>`, so one state is
//! stored once whatever later runs find. Its body is a notification as Mercado Pago sends it
//! (`action`, `type`, `data.id`), so a handler that fetches the payment by its id works as it
//! is, with the payment as the API gave it under `payment`. Sources: docs/reconcile.md.

use std::collections::HashMap;

use serde_json::{Value, json};
use tokio::sync::Notify;

use super::Report;
use super::api::Api;
use super::taken::{Taken, store_missing};
use crate::config::Endpoint;
use crate::store::Store;
use crate::time::{now_ms, parse_rfc3339, rfc3339};

/// Payments asked for per page.
const PAGE_SIZE: usize = 50;
/// The most pages a run reads (1,000 payments): a run is bounded, and Mercado Pago answers an
/// error past an unpublished offset.
const MAX_PAGES: usize = 20;

/// A payment of the search, as a run needs it.
struct Payment {
    id: String,
    status: String,
    updated_ms: i64,
    object: Value,
}

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    wake: Option<&Notify>,
    report: &mut Report,
) -> Result<(), String> {
    let now = now_ms();
    let window = now.saturating_sub(report.since.as_millis() as i64);
    // From where the last run got to (less an overlap), within the window.
    let since = match report.resume_ms {
        Some(at) => window.max(at.saturating_sub(super::RESUME_OVERLAP.as_millis() as i64)),
        None => window,
    };
    let (payments, cursor) = search(api, since, now, report).await?;
    report.cursor_ms = Some(cursor);
    // When portaria last heard of each payment (a notification's signed `data.id`).
    let heard: HashMap<String, i64> = store
        .signed_ids_since(&endpoint.name, since)
        .await
        .map_err(|e| format!("cannot read the store: {e}"))?;
    let unheard: Vec<Payment> = payments
        .into_iter()
        .filter(|p| heard.get(&p.id).is_none_or(|at| *at < p.updated_ms))
        .collect();
    report.failed_at_gateway = unheard.len();
    let taken = unheard
        .into_iter()
        .map(|p| Taken {
            id: state_name(&p),
            dedup_key: state_key(&p),
            event_type: Some("payment".into()),
            object_id: Some(p.id.clone()),
            signed_id: Some(p.id.clone()),
            body: json!({
                "action": "payment.updated",
                "type": "payment",
                "data": {"id": p.id},
                "payment": p.object,
            })
            .to_string()
            .into_bytes(),
        })
        .collect();
    store_missing(store, endpoint, taken, wake, report).await
}

/// The payments updated between `since` and `now`, oldest update first, and where the next
/// run may resume: `now` when every page was read, else the last update read (the search is
/// in update order, so the next run goes on from there).
async fn search(
    api: &Api,
    since: i64,
    now: i64,
    report: &mut Report,
) -> Result<(Vec<Payment>, i64), String> {
    let mut payments = Vec::new();
    let mut offset = 0;
    for _ in 0..MAX_PAGES {
        let query = format!(
            "/v1/payments/search?range=date_last_updated&begin_date={}&end_date={}\
             &sort=date_last_updated&criteria=asc&limit={PAGE_SIZE}&offset={offset}",
            rfc3339(since),
            rfc3339(now)
        );
        let answer = api.get(&query).await.map_err(|e| e.to_string())?;
        let page: Value = answer
            .json()
            .map_err(|e| format!("Mercado Pago's payments: {e}"))?;
        let Some(results) = page["results"].as_array() else {
            return Err("Mercado Pago's payments: no `results` list".into());
        };
        for object in results {
            report.checked += 1;
            match payment(object) {
                Ok(p) => payments.push(p),
                Err(why) => report.errors.push(why),
            }
        }
        offset += results.len();
        let total = page["paging"]["total"].as_u64().unwrap_or(0) as usize;
        if results.is_empty() || offset >= total {
            return Ok((payments, now));
        }
    }
    let reached = payments.last().map_or(since, |p| p.updated_ms);
    Ok((payments, reached))
}

fn payment(object: &Value) -> Result<Payment, String> {
    // A number in the API; a string is taken as it is.
    let id = match &object["id"] {
        Value::Number(n) => n.as_u64().map(|n| n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
    .filter(|id| super::plain_id(id))
    .ok_or("a payment without a usable `id`")?;
    let status = object["status"]
        .as_str()
        .filter(|s| super::plain_id(s))
        .ok_or_else(|| format!("payment {id}: no usable `status`"))?;
    let updated_ms = object["date_last_updated"]
        .as_str()
        .and_then(parse_rfc3339)
        .ok_or_else(|| format!("payment {id}: no usable `date_last_updated`"))?;
    Ok(Payment {
        status: status.to_string(),
        id,
        updated_ms,
        object: object.clone(),
    })
}

/// How a run names a state: `<payment id> <status>`.
fn state_name(p: &Payment) -> String {
    format!("{} {}", p.id, p.status)
}

/// The state's dedup key: its own namespace, never a notification's (theirs are manifests).
fn state_key(p: &Payment) -> String {
    format!("mercadopago:payment:{}:{}", p.id, p.status)
}
