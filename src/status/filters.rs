//! The events list's filters on the status page, as `portaria events list` takes them
//! (endpoint, status, type glob, text, route, and a window: `since`/`until` as RFC 3339 or a
//! duration ago), read from a query string or a form and written back into links; and the
//! "Replay these N" button's POST, which replays what the filters pick (`replay_matching`),
//! the count shown beside the button (the same, changing nothing).

use crate::store::{ListFilter, Status};
use crate::time::{now_ms, parse_when, rfc3339};

use super::{Answer, MAX_PAGE, PAGE, STORE_DEADLINE, StatusPage, redirect, unavailable};

/// The list filter `pairs` (a query string's or a form's) ask for: `endpoint`, `status`,
/// `type`, `q`, `route`, `since`, `until`, `before`, `limit`; empty values are no filter, an
/// unknown status or unreadable time is ignored.
pub(super) fn filter<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl Iterator<Item = (K, V)>,
) -> ListFilter {
    let mut f = ListFilter {
        limit: PAGE,
        ..ListFilter::default()
    };
    let now = now_ms();
    for (key, value) in pairs {
        let value = value.as_ref().trim().to_string();
        if value.is_empty() {
            continue;
        }
        match key.as_ref() {
            "endpoint" => f.endpoint = Some(value),
            "status" => f.status = value.parse::<Status>().ok(),
            "type" => f.event_type = Some(value),
            "q" => f.text = Some(value),
            "route" => f.route = Some(value),
            "since" => f.since = parse_when(&value, now),
            "until" => f.until = parse_when(&value, now),
            "before" => f.before = value.parse().ok(),
            "limit" => f.limit = value.parse().unwrap_or(PAGE).clamp(1, MAX_PAGE),
            _ => {}
        }
    }
    f
}

/// `f`'s filters (not its cursor or limit) as (name, value) pairs, times as RFC 3339: for a
/// link to the next page, the button's form, and where the button leads back to.
pub(super) fn pairs(f: &ListFilter) -> Vec<(&'static str, String)> {
    let given = [
        ("endpoint", f.endpoint.clone()),
        ("status", f.status.map(|s| s.as_str().to_string())),
        ("type", f.event_type.clone()),
        ("q", f.text.clone()),
        ("route", f.route.clone()),
        ("since", f.since.map(rfc3339)),
        ("until", f.until.map(rfc3339)),
    ];
    given
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

/// Whether `f` narrows the events at all: only then does the page offer to replay them.
pub(super) fn narrows(f: &ListFilter) -> bool {
    !pairs(f).is_empty()
}

impl StatusPage {
    /// How many events the button would replay (0 without a filter or on a slow store).
    pub(super) async fn replayable(&self, f: &ListFilter) -> usize {
        if !narrows(f) {
            return 0;
        }
        let count = self.store.replay_matching(f.clone(), None);
        match tokio::time::timeout(STORE_DEADLINE, count).await {
            Ok(Ok(n)) => n,
            _ => 0,
        }
    }

    /// "Replay these N": what the form's filters pick pending again, then the list again.
    pub(super) async fn replay_matching(&self, form: &[(String, String)]) -> Answer {
        let f = filter(form.iter().map(|(k, v)| (k, v)));
        // The page offers the button only with a filter: a form without one replays nothing
        // (never every event), and goes back to the list.
        if !narrows(&f) {
            return redirect("/events");
        }
        let back: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs(&f))
            .finish();
        match self.store.replay_matching(f, Some(now_ms())).await {
            Ok(n) => {
                tracing::info!(events = n, filters = %back, "status page: events replayed");
                if n > 0 {
                    self.new_event.notify_one();
                }
                redirect(&format!("/events?{back}"))
            }
            Err(e) => unavailable(&e.to_string()),
        }
    }
}
