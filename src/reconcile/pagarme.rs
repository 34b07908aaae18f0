//! Pagar.me v5: the account's webhook deliveries ("hooks", one per event and URL) in the
//! window, `GET /core/v5/hooks?created_since=...&page=N&size=100`, page after page until one
//! comes back shorter than its size (Pagar.me's `paging.total` is not to be relied on); then
//! each delivery to this endpoint's path that Pagar.me marks `failed` and whose event portaria
//! never stored is resent, `POST /core/v5/hooks/{id}/retry`: the copy arrives signed, through
//! intake. The key a real delivery has is read from the body Pagar.me sends, rebuilt from the
//! listing (`id`, `type`, `created_at`, `account`, `data`). Sources: docs/reconcile.md.

use http::HeaderMap;
use serde_json::{Value, json};

use super::Report;
use super::api::Api;
use crate::config::Endpoint;
use crate::store::Store;

/// Deliveries asked for per page.
const PAGE_SIZE: usize = 100;
/// The most pages a run reads (10,000 deliveries): a run is bounded.
const MAX_PAGES: usize = 100;

pub(super) async fn run(
    api: &Api,
    endpoint: &Endpoint,
    store: &Store,
    report: &mut Report,
) -> Result<(), String> {
    let since_ms = crate::time::now_ms().saturating_sub(report.since.as_millis() as i64);
    let since = crate::time::rfc3339(since_ms);
    let paths = endpoint.paths();
    let mut candidates = Vec::new();
    for page in 1..=MAX_PAGES {
        let query = format!("/core/v5/hooks?created_since={since}&page={page}&size={PAGE_SIZE}");
        let answer = api.get(&query).await.map_err(|e| e.to_string())?;
        // A `Value`, not a struct of its own: one JSON reader in the binary for every page.
        let mut listed: Value = answer
            .json()
            .map_err(|e| format!("Pagar.me's hooks: {e}"))?;
        let Value::Array(hooks) = listed["data"].take() else {
            return Err("Pagar.me's hooks: no `data` list".into());
        };
        let count = hooks.len();
        for hook in hooks {
            // The account's other webhooks (another shop, another portaria) are not ours.
            let url = hook["url"].as_str().unwrap_or("");
            if !paths.iter().any(|p| super::url_path(url) == p) {
                continue;
            }
            report.checked += 1;
            if hook["status"] != "failed" {
                continue;
            }
            report.failed_at_gateway += 1;
            let Some(id) = hook["id"].as_str().filter(|id| super::plain_id(id)) else {
                report
                    .errors
                    .push("a failed delivery without a usable `id`".into());
                continue;
            };
            let body = json!({
                "id": id,
                "account": hook["account"],
                "type": hook["event"],
                "created_at": hook["created_at"],
                "data": hook["data"],
            });
            match endpoint
                .dedup
                .extract(&HeaderMap::new(), body.to_string().as_bytes())
            {
                Ok(key) => candidates.push((id.to_string(), key)),
                Err(e) => report.errors.push(format!("{id}: no dedup key ({e})")),
            }
        }
        if count < PAGE_SIZE {
            break;
        }
    }
    report.missing = super::never_stored(store, &endpoint.name, candidates).await?;
    if report.dry_run {
        return Ok(());
    }
    let missing = report.missing.clone();
    super::ask_again(
        api,
        endpoint,
        missing,
        |id| format!("/core/v5/hooks/{id}/retry"),
        report,
    )
    .await;
    Ok(())
}
