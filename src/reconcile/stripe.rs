//! Stripe: the events whose delivery has not succeeded (`delivery_success=false`: still being
//! retried, or given up on for at least one of the account's endpoints) created in the window,
//! `GET /v1/events?delivery_success=false&created[gte]=...&limit=100`, page after page with
//! `starting_after` (the last id of a page) while `has_more`; then those portaria never stored,
//! by the dedup key a real delivery has, read from the event as the API gives it (Stripe posts
//! the event object itself). Stripe has no API call that resends an event: each one missing
//! is stored from the API's answer (`taken.rs`: `origin = reconcile`), read over TLS with the
//! account's key. Sources: docs/reconcile.md.

use http::HeaderMap;
use serde_json::Value;

use tokio::sync::Notify;

use super::Report;
use super::api::Api;
use super::taken::{Taken, store_missing};
use crate::config::Endpoint;
use crate::store::Store;

/// Events asked for per page (Stripe's most).
const PAGE_SIZE: usize = 100;
/// The most pages a run reads (10,000 events): a run is bounded.
const MAX_PAGES: usize = 100;

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    wake: Option<&Notify>,
    report: &mut Report,
) -> Result<(), String> {
    let now = crate::time::now_ms() / 1000;
    let since = now.saturating_sub(report.since.as_secs() as i64);
    let mut events_of = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query =
            format!("/v1/events?delivery_success=false&created%5Bgte%5D={since}&limit={PAGE_SIZE}");
        if let Some(id) = &after {
            query.push_str(&format!("&starting_after={id}"));
        }
        let answer = api.get(&query).await.map_err(|e| e.to_string())?;
        // A `Value`, not a struct of its own: one JSON reader in the binary for every page.
        let page: Value = answer.json().map_err(|e| format!("Stripe's events: {e}"))?;
        let Some(events) = page["data"].as_array() else {
            return Err("Stripe's events: no `data` list".into());
        };
        after = None;
        for event in events {
            report.checked += 1;
            report.failed_at_gateway += 1;
            let Some(id) = event["id"].as_str().filter(|id| super::plain_id(id)) else {
                report.errors.push("an event without a usable `id`".into());
                continue;
            };
            after = Some(id.to_string());
            let body = event.to_string().into_bytes();
            match endpoint.dedup.extract(&HeaderMap::new(), &body) {
                Ok(key) => {
                    events_of.push(Taken {
                        id: id.to_string(),
                        dedup_key: key,
                        event_type: event["type"].as_str().map(str::to_string),
                        object_id: event["data"]["object"]["id"].as_str().map(str::to_string),
                        signed_id: None,
                        body,
                    });
                }
                Err(e) => report.errors.push(format!("{id}: no dedup key ({e})")),
            }
        }
        if page["has_more"] != true || after.is_none() {
            break;
        }
    }
    store_missing(store, endpoint, events_of, wake, report).await
}
