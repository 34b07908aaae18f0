//! The status page's data as JSON, for scripts (documented in `docs/status-page.md`):
//! `/api/stats` (the overview and the chart's hours), `/api/events` (the list, with the same
//! filters and cursor as the page) and `/api/events/ID` (one event with its routes and
//! attempts; `/api/rejected` is `rejected.rs`'s), each event in the store's one JSON shape
//! (`store::summary_json`, `store::detail_json`, which `portaria events` prints too). Times are unix milliseconds
//! (`*_ms`) and RFC 3339 text beside them.

use http::StatusCode;
use serde_json::{Value, json};

use super::public::PublicView;
use super::{Answer, StatusPage, respond};
use crate::store::{Overview, detail_json, summary_json};
use crate::time::{now_ms, rfc3339};

/// What turns the page's banner red: any dead event, a pending one waiting too long, or the
/// canary's probes failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alert {
    pub dead: u64,
    pub oldest_pending_age_ms: Option<i64>,
    pub unreachable: bool,
}

impl Alert {
    pub fn of(overview: &Overview, now_ms: i64) -> Alert {
        Alert {
            dead: overview.endpoints.iter().map(|e| e.dead).sum(),
            oldest_pending_age_ms: overview
                .endpoints
                .iter()
                .filter_map(|e| e.oldest_pending_ms)
                .min()
                .map(|t| (now_ms - t).max(0)),
            unreachable: false,
        }
    }

    /// The same, with the public path's state when the canary runs.
    pub fn with(mut self, public: Option<&PublicView>) -> Alert {
        self.unreachable = public.is_some_and(|p| p.failing().is_some());
        self
    }

    pub fn pending_too_long(&self) -> bool {
        self.oldest_pending_age_ms
            .is_some_and(|age| age > super::PENDING_ALERT_MS)
    }

    pub fn is_red(&self) -> bool {
        self.dead > 0 || self.pending_too_long() || self.unreachable
    }
}

pub async fn stats(page: &StatusPage) -> Answer {
    let now = now_ms();
    let asked = async {
        let overview = page
            .store
            .overview(page.endpoints.clone(), super::CHART_HOURS, now)
            .await?;
        Ok::<_, crate::store::StoreError>((overview, page.store.rejected_kept().await?))
    };
    let (overview, kept) = match tokio::time::timeout(super::STORE_DEADLINE, asked).await {
        Ok(Ok(asked)) => asked,
        Ok(Err(e)) => return super::unavailable(&e.to_string()),
        Err(_) => return super::unavailable("the database did not answer within 5 s"),
    };
    let alert = Alert::of(&overview, now).with(page.public.as_ref());
    let hours: Vec<Value> = overview
        .hours
        .iter()
        .map(|h| {
            let mut v = json!(h);
            v["hour"] = json!(rfc3339(h.hour_ms));
            v
        })
        .collect();
    let endpoints: Vec<Value> = overview
        .endpoints
        .iter()
        .map(|e| {
            let mut v = json!(e);
            v["rejected_last_day"]["total"] = json!(e.rejected_last_day.total());
            let kept = kept.iter().find(|(name, _)| *name == e.endpoint);
            v["rejected_kept"] = json!(kept.map_or(0, |(_, n)| *n));
            v["oldest_pending_at"] = json!(e.oldest_pending_ms.map(rfc3339));
            v["last_received_at"] = json!(e.last_received_ms.map(rfc3339));
            v
        })
        .collect();
    ok(json!({
        "generated_at": rfc3339(now),
        "generated_at_ms": now,
        "alert": {
            "red": alert.is_red(),
            "dead": alert.dead,
            "oldest_pending_age_ms": alert.oldest_pending_age_ms,
            "pending_alert_after_ms": super::PENDING_ALERT_MS,
            "unreachable": alert.unreachable,
        },
        "public_path": page.public.as_ref().map(|p| p.json(now)),
        "endpoints": endpoints,
        "hours": hours,
    }))
}

pub async fn events(page: &StatusPage, query: &str) -> Answer {
    let filter = super::filters::filter(form_urlencoded::parse(query.as_bytes()));
    let limit = filter.limit;
    match page.list(filter).await {
        Ok(events) => {
            let next = (events.len() == limit)
                .then(|| events.last().map(|e| e.id))
                .flatten();
            ok(json!({
                "events": events.iter().map(|e| summary_json(e, None)).collect::<Vec<_>>(),
                "next_before": next,
            }))
        }
        Err(e) => super::unavailable(&e),
    }
}

pub async fn event(page: &StatusPage, id: i64) -> Answer {
    match page.detail(id).await {
        Ok(Some(detail)) => {
            // Only for an event flagged: otherwise the very object `events show --json` prints.
            let mut value = detail_json(&detail);
            let missing = page.missing(&detail);
            if !missing.is_empty() {
                value["missing_fields"] = json!(missing);
            }
            ok(value)
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such event"),
        Err(e) => super::unavailable(&e),
    }
}

pub(super) fn ok(value: Value) -> Answer {
    respond(StatusCode::OK, "application/json", format!("{value:#}\n"))
}

/// `{"error": "..."}` with `status`: every refusal of the page, HTML forms included (a
/// browser shows it as text).
pub fn error(status: StatusCode, message: &str) -> Answer {
    respond(
        status,
        "application/json",
        format!("{}\n", json!({ "error": message })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EndpointNow;

    fn with(dead: u64, oldest_pending_ms: Option<i64>) -> Overview {
        Overview {
            endpoints: vec![
                EndpointNow {
                    endpoint: "a".into(),
                    dead,
                    oldest_pending_ms,
                    ..EndpointNow::default()
                },
                EndpointNow::default(),
            ],
            hours: Vec::new(),
        }
    }

    #[test]
    fn the_banner_is_red_when_anything_is_dead_or_waited_over_15_minutes() {
        let now = 100 * 60_000;
        assert!(!Alert::of(&with(0, None), now).is_red());
        assert!(!Alert::of(&with(0, Some(now - 15 * 60_000)), now).is_red());
        let late = Alert::of(&with(0, Some(now - 15 * 60_000 - 1)), now);
        assert!(late.is_red() && late.pending_too_long());
        let dead = Alert::of(&with(2, None), now);
        assert!(dead.is_red() && !dead.pending_too_long());
        assert_eq!(dead.dead, 2);
    }
}
