//! Cielo (API E-commerce 3.0): its notification is only `{"PaymentId", "ChangeType"}`, it
//! tries three times and gives up, and its API lists nothing (no sales by date, no
//! notifications; research notes §7). What a run can do is what Cielo itself advises: ask
//! again for the sales still open. It reads the endpoint's events of the window: the state
//! of each sale, `Payment.Status`, from what verify-by-fetching got (so the table needs
//! `fetch = true`) or from the key of a state a run stored; a sale whose newest known state
//! is open (0 NotFinished, 1 Authorized, 12 Pending, 20 Scheduled) is asked for,
//! `GET /1/sales/{PaymentId}`. A state portaria never heard of is stored as an event of the
//! endpoint (`taken.rs`, origin `reconcile`): the notification Cielo would have sent, keyed
//! `cielo:sale:<PaymentId>:<Status>` (one state stored once whatever later runs find), its
//! sale fetched when it is forwarded as any other. This also recovers a change that the
//! endpoint's dedup window took for a repeat (two changes of one sale are byte-identical
//! notifications). A sale portaria never heard of at all stays unknown: there is no list.

use std::collections::HashSet;

use serde_json::Value;
use tokio::sync::Notify;

use super::Report;
use super::api::{Api, ApiError};
use super::taken::{Taken, store_missing};
use crate::config::Endpoint;
use crate::store::{Fetched, ListFilter, Origin, Store};
use crate::time::now_ms;

/// The most sales a run asks for: a run is bounded (Cielo publishes no quota); the report's
/// note says when some were left.
const MAX_SALES: usize = 500;

/// The statuses after which Cielo's sale still changes by itself.
const OPEN: &[i64] = &[0, 1, 12, 20];

/// The namespace of the states a run stores.
const KEY_PREFIX: &str = "cielo:sale:";

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    wake: Option<&Notify>,
    report: &mut Report,
) -> Result<(), String> {
    let since = now_ms().saturating_sub(report.since.as_millis() as i64);
    let mut open = open_sales(store, &endpoint.name, since).await?;
    at_most(&mut open, report);
    let mut changed = Vec::new();
    for (id, known) in open {
        report.checked += 1;
        let answer = match api.get(&format!("/1/sales/{id}")).await {
            Ok(answer) => answer,
            // A sale the API does not know is that sale's; anything else (the key, the
            // network, a 5xx or 429 after its tries) is every sale's: stop asking, and keep
            // what was found so far.
            Err(e @ (ApiError::NotFound(_) | ApiError::Shape(_))) => {
                report.errors.push(format!("{id}: {e}"));
                continue;
            }
            Err(e) => {
                report.errors.push(format!("{id}: {e}"));
                break;
            }
        };
        match answer.json::<Value>().ok().as_ref().and_then(status) {
            Some((_, now)) if now != known => changed.push((id, now)),
            Some(_) => {}
            None => report
                .errors
                .push(format!("{id}: no `Payment.Status` in the sale")),
        }
    }
    report.failed_at_gateway = changed.len();
    let taken = changed
        .into_iter()
        .map(|(id, status)| Taken {
            id: format!("{id} {status}"),
            dedup_key: format!("{KEY_PREFIX}{id}:{status}"),
            event_type: None,
            object_id: Some(id.clone()),
            signed_id: None,
            // Cielo's own field order (the id is plain: nothing to escape).
            body: format!(r#"{{"PaymentId":"{id}","ChangeType":1}}"#).into_bytes(),
        })
        .collect();
    store_missing(store, endpoint, taken, wake, report).await
}

/// The sales of `endpoint`'s events since `since` whose newest known state is open, with that
/// state, newest first. An event's state is the sale fetched for it (at least as recent as
/// anything else portaria knows of it), else, for an event a run stored and not fetched yet,
/// the state its key names.
async fn open_sales(
    store: &Store,
    endpoint: &str,
    since: i64,
) -> Result<Vec<(String, i64)>, String> {
    let cannot = |e: crate::store::StoreError| format!("cannot read the store: {e}");
    let filter = ListFilter {
        endpoint: Some(endpoint.to_string()),
        since: Some(since),
        ..ListFilter::default()
    };
    // Newest first: the first state found for a sale is its newest. Two reads for the
    // window, not one per event.
    let events = store.list_events(filter).await.map_err(cannot)?;
    let fetched = store.fetched_since(endpoint, since).await.map_err(cannot)?;
    let mut seen = HashSet::new();
    let mut open = Vec::new();
    for e in events {
        let state = match fetched.get(&e.id) {
            Some(Fetched::Object(sale)) => serde_json::from_str(sale).ok().and_then(|v| status(&v)),
            // Only a run's own key: a webhook's is whatever the request carried.
            _ if e.origin == Origin::Reconcile => stored_state(&e.dedup_key),
            _ => None,
        };
        if let Some((id, s)) = state
            && seen.insert(id.clone())
            && OPEN.contains(&s)
        {
            open.push((id, s));
        }
    }
    Ok(open)
}

/// Keeps the newest [`MAX_SALES`] of `open`; the report's note says when some were left.
fn at_most(open: &mut Vec<(String, i64)>, report: &mut Report) {
    if open.len() > MAX_SALES {
        open.truncate(MAX_SALES);
        report.note = Some(
            "more than 500 sales of the window are open: the oldest were not asked for \
             (a shorter window or --since reaches them)",
        );
    }
}

/// The sale and status a run's key `cielo:sale:<id>:<status>` names.
fn stored_state(key: &str) -> Option<(String, i64)> {
    let (id, status) = key.strip_prefix(KEY_PREFIX)?.rsplit_once(':')?;
    super::plain_id(id).then_some((id.to_string(), status.parse().ok()?))
}

/// A sale's `Payment.PaymentId` and `Payment.Status`, as Cielo's query answers it.
fn status(sale: &Value) -> Option<(String, i64)> {
    let payment = sale.get("Payment")?;
    let id = payment.get("PaymentId")?.as_str()?;
    let status = payment.get("Status")?.as_i64()?;
    super::plain_id(id).then(|| (id.to_string(), status))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_run_asks_for_the_newest_500_open_sales_and_says_when_it_left_some() {
        let mut open: Vec<(String, i64)> = (0..MAX_SALES).map(|n| (n.to_string(), 1)).collect();
        let mut report = Report::default();
        at_most(&mut open, &mut report);
        assert_eq!((open.len(), report.note), (MAX_SALES, None));
        open.push(("oldest".into(), 1));
        at_most(&mut open, &mut report);
        assert_eq!(open.len(), MAX_SALES);
        assert_eq!(open.last().map(|(id, _)| id.as_str()), Some("499"));
        assert!(
            report
                .note
                .is_some_and(|n| n.contains("the oldest were not asked for"))
        );
    }

    #[test]
    fn a_sale_s_state_is_its_payment_s_id_and_status() {
        let sale = json!({"MerchantOrderId": "o-1",
            "Payment": {"PaymentId": "24bc8366-fc31-4d6c-8555-17049a836a07", "Status": 1}});
        assert_eq!(
            status(&sale),
            Some(("24bc8366-fc31-4d6c-8555-17049a836a07".to_string(), 1))
        );
        assert_eq!(
            status(&json!({"Payment": {"PaymentId": "../x", "Status": 1}})),
            None
        );
        assert_eq!(
            status(&json!({"Payment": {"PaymentId": "p", "Status": "1"}})),
            None
        );
        assert_eq!(status(&json!({"PaymentId": "p"})), None);
        assert_eq!(
            stored_state("cielo:sale:p-1:12"),
            Some(("p-1".to_string(), 12))
        );
        for bad in [
            "cielo:sale:../x:1",
            "cielo:sale:p:x",
            "other:p:1",
            "cielo:sale:p",
        ] {
            assert_eq!(stored_state(bad), None, "{bad}");
        }
    }
}
