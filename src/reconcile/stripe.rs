//! Stripe: the events whose delivery has not succeeded (`delivery_success=false`: still being
//! retried, or given up on for at least one of the account's endpoints) created in the window,
//! `GET /v1/events?delivery_success=false&created[gte]=...&limit=100`, page after page with
//! `starting_after` (the last id of a page) while `has_more`; then those portaria never stored,
//! by the dedup key a real delivery has, read from the event as the API gives it (Stripe posts
//! the event object itself). Stripe has no API call that resends an event: storing the event
//! from the API's answer (`origin = reconcile`) is not built yet, so a run names them, for
//! the Dashboard's resend. Sources: docs/reconcile.md.

use http::HeaderMap;
use serde_json::Value;

use super::Report;
use super::api::Api;
use crate::config::Endpoint;
use crate::store::Store;

/// Events asked for per page (Stripe's most).
const PAGE_SIZE: usize = 100;
/// The most pages a run reads (10,000 events): a run is bounded.
const MAX_PAGES: usize = 100;

/// What a run says of the events it found missing.
pub(super) const NOTE: &str = "Stripe has no API call to resend an event, and storing it from \
     the API is not built yet: resend these from the Stripe Dashboard (Workbench, Events)";

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    report: &mut Report,
) -> Result<(), String> {
    let now = crate::time::now_ms() / 1000;
    let since = now.saturating_sub(report.since.as_secs() as i64);
    let mut candidates = Vec::new();
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
            match endpoint
                .dedup
                .extract(&HeaderMap::new(), event.to_string().as_bytes())
            {
                Ok(key) => candidates.push((id.to_string(), key)),
                Err(e) => report.errors.push(format!("{id}: no dedup key ({e})")),
            }
        }
        if page["has_more"] != true || after.is_none() {
            break;
        }
    }
    report.missing = super::never_stored(store, &endpoint.name, candidates).await?;
    if !report.missing.is_empty() {
        report.note = Some(NOTE);
    }
    Ok(())
}
