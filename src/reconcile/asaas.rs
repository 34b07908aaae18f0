//! Asaas: it sends one webhook's events in a queue and, after 15 failures in a row, pauses
//! the queue (`interrupted: true`), keeping what it holds for 14 days, then deleting it. A run
//! reads the account's webhooks (`GET /v3/webhooks?offset=N&limit=100`, page after page while
//! `hasMore`), keeps those whose URL is this endpoint's path, and for each paused one: names
//! it (the events it holds never reached portaria), and with `reactivate = true` resumes it
//! (`PUT /v3/webhooks/{id}` with `{"interrupted": false}`), so Asaas sends what it held, in
//! order, signed with the endpoint's token, through intake. A queue penalized but not paused
//! (`penalizedRequestsCount` above 0: Asaas waits longer before each try) gets its penalty
//! dropped (`POST /v3/webhooks/{id}/removeBackoff`) under `reactivate`. The key goes in Asaas's
//! `access_token` header. A queue a run leaves paused keeps, run after run, when it was first
//! seen paused (`Report::paused_since_ms`): the alert's deadline. Sources: docs/reconcile.md.

use serde_json::{Value, json};

use super::Report;
use super::api::Api;
use crate::config::{Endpoint, Reconcile};

/// Webhooks asked for per page (Asaas's most).
const PAGE_SIZE: usize = 100;
/// The most pages a run reads: an account has a handful of webhooks.
const MAX_PAGES: usize = 10;

/// What a run says of a paused queue it did not resume.
pub(super) const NOTE: &str = "Asaas paused this webhook's queue after 15 failures in a row and \
     deletes the events it holds 14 days after the pause: fix what failed (the tunnel, the \
     token), then set reactivate = true under [endpoint.reconcile] or resume the queue in \
     Asaas's web app (the webhook's settings)";

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    reconcile: &Reconcile,
    paused_before: Option<i64>,
    report: &mut Report,
) -> Result<(), String> {
    let paths = endpoint.paths();
    let mut ours = Vec::new();
    // By what came back, not by what was asked: an API may give fewer than `limit`.
    let mut offset = 0;
    for _ in 0..MAX_PAGES {
        let answer = api
            .get(&format!("/v3/webhooks?offset={offset}&limit={PAGE_SIZE}"))
            .await
            .map_err(|e| e.to_string())?;
        let mut listed: Value = answer
            .json()
            .map_err(|e| format!("Asaas's webhooks: {e}"))?;
        let Value::Array(webhooks) = listed["data"].take() else {
            return Err("Asaas's webhooks: no `data` list".into());
        };
        offset += webhooks.len();
        let more = listed["hasMore"] == true && !webhooks.is_empty();
        ours.extend(webhooks.into_iter().filter(|w| {
            let url = w["url"].as_str().unwrap_or("");
            paths.iter().any(|p| super::url_path(url) == p)
        }));
        if !more {
            break;
        }
    }
    if ours.is_empty() {
        return Err(format!(
            "no Asaas webhook of this account sends to {}",
            paths.join(" or ")
        ));
    }
    for webhook in ours {
        report.checked += 1;
        let Some(id) = webhook["id"].as_str().filter(|id| super::plain_id(id)) else {
            report.errors.push("a webhook without a usable `id`".into());
            continue;
        };
        let penalized = webhook["penalizedRequestsCount"].as_u64().unwrap_or(0) > 0;
        if webhook["interrupted"] != true {
            if penalized && reconcile.reactivate && !report.dry_run {
                drop_penalty(api, endpoint, id, report).await;
            }
            continue;
        }
        report.failed_at_gateway += 1;
        report.missing.push(id.to_string());
        if report.dry_run {
            continue;
        }
        if !reconcile.reactivate {
            report.note = Some(NOTE);
            continue;
        }
        let resume = json!({"interrupted": false});
        match api.put_json(&format!("/v3/webhooks/{id}"), &resume).await {
            Ok(_) => {
                let name = &endpoint.name;
                tracing::info!(endpoint = %name, webhook = %id, "reconcile: Asaas queue resumed");
                report.recovered.push(id.to_string());
                if penalized {
                    drop_penalty(api, endpoint, id, report).await;
                }
            }
            Err(e) => report.errors.push(format!("{id}: {e}")),
        }
    }
    // A queue left paused: its deadline runs from when runs first saw it paused.
    if report.recovered.len() < report.missing.len() {
        report.paused_since_ms = Some(paused_before.unwrap_or(report.at_ms));
    }
    Ok(())
}

/// Asks Asaas to stop waiting longer before each try of webhook `id`.
async fn drop_penalty(api: &Api, endpoint: &Endpoint, id: &str, report: &mut Report) {
    match api.post(&format!("/v3/webhooks/{id}/removeBackoff")).await {
        Ok(_) => {
            let name = &endpoint.name;
            tracing::info!(endpoint = %name, webhook = %id, "reconcile: Asaas penalty dropped");
        }
        Err(e) => report.errors.push(format!("{id}: removeBackoff: {e}")),
    }
}
