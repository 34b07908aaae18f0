//! Paddle Billing: first the account's notification destinations (`GET
//! /notification-settings`) whose URL is this endpoint's path, then the notifications to them
//! that Paddle gave up on, `GET /notifications?status=failed&notification_setting_id=...&from=
//! ...&per_page=200`, page after page with the `after` cursor of `meta.pagination.next` while
//! `has_more`; then each event portaria never stored, by the dedup key a real delivery has
//! (the notification's `payload` is the body Paddle posts: `event_id` by default), is replayed,
//! `POST /notifications/{id}/replay`: a new notification of the same event arrives signed,
//! through intake. Paddle replays only an original (`origin: event`), never a replay, so a
//! failed replay whose original is outside the window is named, not replayed. Bearer key with
//! `notification.read` and `notification.write`. Sources: docs/reconcile.md.

use http::HeaderMap;
use serde_json::Value;

use super::Report;
use super::api::Api;
use crate::config::Endpoint;
use crate::store::Store;

/// Notifications asked for per page (Paddle's most).
const PAGE_SIZE: usize = 200;
/// The most pages a run reads (20,000 notifications): a run is bounded.
const MAX_PAGES: usize = 100;

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    report: &mut Report,
) -> Result<(), String> {
    let destinations = destinations(api, endpoint).await?;
    let since_ms = crate::time::now_ms().saturating_sub(report.since.as_millis() as i64);
    let since = crate::time::rfc3339(since_ms);
    let mut originals = Vec::new();
    let mut replays = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query = format!(
            "/notifications?status=failed&notification_setting_id={}&from={since}\
             &per_page={PAGE_SIZE}",
            destinations.join(",")
        );
        if let Some(cursor) = &after {
            query.push_str(&format!("&after={cursor}"));
        }
        let answer = api.get(&query).await.map_err(|e| e.to_string())?;
        let page: Value = answer
            .json()
            .map_err(|e| format!("Paddle's notifications: {e}"))?;
        let Some(listed) = page["data"].as_array() else {
            return Err("Paddle's notifications: no `data` list".into());
        };
        for notification in listed {
            report.checked += 1;
            report.failed_at_gateway += 1;
            let Some(id) = notification["id"].as_str().filter(|id| super::plain_id(id)) else {
                report
                    .errors
                    .push("a notification without a usable `id`".into());
                continue;
            };
            let body = notification["payload"].to_string();
            let key = match endpoint.dedup.extract(&HeaderMap::new(), body.as_bytes()) {
                Ok(key) => key,
                Err(e) => {
                    report.errors.push(format!("{id}: no dedup key ({e})"));
                    continue;
                }
            };
            match notification["origin"].as_str() {
                Some("event") => originals.push((id.to_string(), key)),
                _ => replays.push((id.to_string(), key)),
            }
        }
        let pagination = &page["meta"]["pagination"];
        after = pagination["next"]
            .as_str()
            .and_then(|next| super::query_value(next, "after"))
            .filter(|cursor| super::plain_id(cursor))
            .map(str::to_string);
        if pagination["has_more"] != true || after.is_none() {
            break;
        }
    }
    // A failed replay of an event whose original failed too is that original's to replay.
    replays.retain(|(_, key)| !originals.iter().any(|(_, k)| k == key));
    let replay_ids: Vec<String> = replays.iter().map(|(id, _)| id.clone()).collect();
    let candidates = originals.into_iter().chain(replays).collect();
    let never = super::never_stored(store, &endpoint.name, candidates).await?;
    let (orphans, missing): (Vec<String>, Vec<String>) =
        never.into_iter().partition(|id| replay_ids.contains(id));
    for id in &orphans {
        report.errors.push(format!(
            "{id}: a failed replay whose original is outside the window; Paddle replays only \
             originals: replay it from Paddle's dashboard"
        ));
    }
    report.missing = missing.iter().chain(&orphans).cloned().collect();
    if report.dry_run {
        return Ok(());
    }
    let path = |id: &str| format!("/notifications/{id}/replay");
    super::ask_again(api, endpoint, missing, path, report).await;
    Ok(())
}

/// The ids of the account's notification destinations that point at this endpoint's path.
async fn destinations(api: &Api, endpoint: &Endpoint) -> Result<Vec<String>, String> {
    let answer = api
        .get("/notification-settings")
        .await
        .map_err(|e| e.to_string())?;
    let listed: Value = answer
        .json()
        .map_err(|e| format!("Paddle's notification settings: {e}"))?;
    let Some(settings) = listed["data"].as_array() else {
        return Err("Paddle's notification settings: no `data` list".into());
    };
    let paths = endpoint.paths();
    let ours: Vec<String> = settings
        .iter()
        .filter(|s| {
            let url = s["destination"].as_str().unwrap_or("");
            paths.iter().any(|p| super::url_path(url) == p)
        })
        .filter_map(|s| s["id"].as_str().filter(|id| super::plain_id(id)))
        .map(str::to_string)
        .collect();
    if ours.is_empty() {
        return Err(format!(
            "no Paddle notification destination sends to {} (Developer tools, Notifications)",
            paths.join(" or ")
        ));
    }
    Ok(ours)
}
