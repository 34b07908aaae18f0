//! GitHub: a hook's deliveries (`GET /repos/OWNER/REPO/hooks/ID/deliveries?per_page=100`, or
//! the organization's, newest first, page after page by the `cursor` of the `Link` header's
//! `rel="next"`, until one older than the window), grouped by `guid` (the `X-GitHub-Delivery`
//! every delivery and redelivery of one event shares). An event none of whose deliveries is
//! `OK` is one GitHub never got through; its newest delivery is redelivered (`POST
//! .../deliveries/{id}/attempts`), signed, through intake. GitHub never retries on its own.
//!
//! The list names an event by its GUID and not by what portaria keys on (the body's SHA-256
//! by default, which the list does not carry), so a run cannot ask the store: an event portaria
//! stored while GitHub lost the answer is redelivered too, and is a duplicate there (the same
//! body; answered 200, not stored again). The redelivery is `OK`, so the next run asks nothing.
//! Bearer token with the repository's "Webhooks" read and write. Sources: docs/reconcile.md.

use std::collections::HashMap;

use serde_json::Value;

use super::Report;
use super::api::Api;
use crate::config::{Endpoint, Reconcile};

/// Deliveries asked for per page (GitHub's most).
const PAGE_SIZE: usize = 100;
/// The most pages a run reads (5,000 deliveries): a run is bounded.
const MAX_PAGES: usize = 50;

/// One event (GUID) as its deliveries tell it.
struct Event {
    /// Its newest delivery's id: the one to redeliver.
    newest: u64,
    delivered: bool,
}

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    reconcile: &Reconcile,
    report: &mut Report,
) -> Result<(), String> {
    let Some(hook) = reconcile.hook.as_deref() else {
        return Err("no hook: set hook = \"repos/OWNER/REPO/hooks/ID\"".into());
    };
    let since_ms = crate::time::now_ms().saturating_sub(report.since.as_millis() as i64);
    // In the order first seen: newest first.
    let mut order: Vec<String> = Vec::new();
    let mut events: HashMap<String, Event> = HashMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query = format!("/{hook}/deliveries?per_page={PAGE_SIZE}");
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        let answer = api.get(&query).await.map_err(|e| e.to_string())?;
        let page: Value = answer
            .json()
            .map_err(|e| format!("GitHub's deliveries: {e}"))?;
        let Some(deliveries) = page.as_array() else {
            return Err("GitHub's deliveries: not a list".into());
        };
        let mut older = false;
        for d in deliveries {
            let at = d["delivered_at"]
                .as_str()
                .and_then(crate::time::parse_rfc3339);
            if at.is_some_and(|at| at < since_ms) {
                older = true;
                continue;
            }
            let (Some(id), Some(guid)) = (d["id"].as_u64(), d["guid"].as_str()) else {
                report
                    .errors
                    .push("a delivery without an `id` or `guid`".into());
                continue;
            };
            let ok = d["status"] == "OK";
            let event = events.entry(guid.to_string()).or_insert_with(|| {
                order.push(guid.to_string());
                Event {
                    newest: id,
                    delivered: false,
                }
            });
            event.delivered |= ok;
        }
        cursor = answer
            .headers
            .get_all(http::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(next_link)
            .and_then(|url| super::query_value(url, "cursor"))
            .filter(|c| super::plain_id(c))
            .map(str::to_string);
        if older || cursor.is_none() {
            break;
        }
    }
    report.checked = order.len();
    let failed: Vec<u64> = order
        .iter()
        .filter_map(|guid| events.get(guid))
        .filter(|e| !e.delivered)
        .map(|e| e.newest)
        .collect();
    report.failed_at_gateway = failed.len();
    report.missing = failed.iter().map(u64::to_string).collect();
    if report.dry_run {
        return Ok(());
    }
    let ids = report.missing.clone();
    let path = |id: &str| format!("/{hook}/deliveries/{id}/attempts");
    super::ask_again(api, endpoint, ids, path, report).await;
    Ok(())
}

/// The URL of a `Link` header's `rel="next"`: `<https://...&cursor=v1_1>; rel="next", <...>;
/// rel="prev"` gives `https://...&cursor=v1_1`.
fn next_link(header: &str) -> Option<&str> {
    header.split(',').find_map(|link| {
        let (url, params) = link.split_once(';')?;
        let next = params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"" || p.trim() == "rel=next");
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        next.then_some(url)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_read_from_github_s_link_header() {
        let header = "<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_9>; \
                      rel=\"next\", <https://api.github.com/x?cursor=v1_1>; rel=\"prev\"";
        assert_eq!(
            next_link(header),
            Some("https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_9")
        );
        assert_eq!(next_link("<https://x/?cursor=a>; rel=\"prev\""), None);
        assert_eq!(next_link("garbage"), None);
    }
}
