//! The routes panel of the overview: each configured route, whether it is paused (since when,
//! until when, why), and a Pause or Resume button, what `portaria route pause/resume` do
//! (issue 27). The buttons are forms like replay's (the form token, the browser's word on
//! where the POST came from); a pause taken here holds until it is resumed and says it was
//! taken on the status page. Only a configured route can be paused: a form naming another is
//! refused with 400 and changes nothing.

use std::sync::Arc;

use http::StatusCode;
use maud::{Markup, html};
use tokio::sync::Notify;

use super::pages::{Chrome, csrf_field};
use super::text::{Lang, when};
use super::{Answer, api, redirect, unavailable};
use crate::store::{RoutePause, Store};
use crate::time::now_ms;

/// The reason a pause taken on the status page carries.
pub const PAUSED_HERE: &str = "paused on the status page";

/// What a pause or resume form asks, checked against the configured routes.
#[derive(Debug, PartialEq, Eq)]
pub struct Asked {
    pub endpoint: String,
    pub route: String,
}

/// The form's endpoint and route, if they name a configured route; else the answer's status
/// and text.
pub fn asked(
    routes: &[(String, String)],
    endpoint: Option<String>,
    route: Option<String>,
) -> Result<Asked, (StatusCode, &'static str)> {
    let (Some(endpoint), Some(route)) = (endpoint, route) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "which route? (the form's endpoint and route fields)",
        ));
    };
    if !routes.iter().any(|(e, r)| *e == endpoint && *r == route) {
        return Err((
            StatusCode::BAD_REQUEST,
            "no such route in the configuration",
        ));
    }
    Ok(Asked { endpoint, route })
}

/// The Pause and Resume buttons' POST: a pause holds until resumed; a resume wakes the
/// worker, whose waiting deliveries go out in order.
pub async fn pause_or_resume(
    store: &Store,
    worker: &Arc<Notify>,
    pause: bool,
    asked: Result<Asked, (StatusCode, &'static str)>,
) -> Answer {
    let asked = match asked {
        Ok(asked) => asked,
        Err((status, why)) => return api::error(status, why),
    };
    let now = now_ms();
    let done = if pause {
        let pause = RoutePause {
            endpoint: asked.endpoint.clone(),
            route: asked.route.clone(),
            paused_at_ms: now,
            until_ms: None,
            reason: Some(PAUSED_HERE.to_string()),
        };
        store.pause_route(pause).await
    } else {
        let resumed = store.resume_route(&asked.endpoint, &asked.route, now).await;
        worker.notify_one();
        resumed.map(|_| ())
    };
    match done {
        Ok(()) => {
            let (endpoint, route) = (&asked.endpoint, &asked.route);
            let what = if pause { "paused" } else { "resumed" };
            tracing::info!(endpoint, route, "status page: route {what}");
            redirect("/")
        }
        Err(e) => unavailable(&e.to_string()),
    }
}

/// The panel: one row per configured route, the paused ones first.
pub fn panel(
    chrome: &Chrome,
    routes: &[(String, String)],
    pauses: &[RoutePause],
    now: i64,
) -> Markup {
    let t = chrome.lang;
    let pause_of = |e: &str, r: &str| pauses.iter().find(|p| p.endpoint == e && p.route == r);
    // The paused first, each part in the config's order (a partition, not a stable sort:
    // one sort's code less in the binary).
    let (mut rows, running): (Vec<&(String, String)>, Vec<_>) =
        routes.iter().partition(|(e, r)| pause_of(e, r).is_some());
    rows.extend(running);
    html! {
        @if !routes.is_empty() {
            h2 { t { "Routes" } }
            table.routes {
                @for (endpoint, route) in rows {
                    tr {
                        td { (name(routes, endpoint, route)) }
                        @match pause_of(endpoint, route) {
                            Some(p) => {
                                td.paused { (paused(p, now, t)) }
                                td { (button(chrome, "/routes/resume", endpoint, route, true)) }
                            }
                            None => {
                                td { t { "delivering" } }
                                td { (button(chrome, "/routes/pause", endpoint, route, false)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `pagarme` for an endpoint's only route, `pagarme/erp` where it has several.
fn name(routes: &[(String, String)], endpoint: &str, route: &str) -> String {
    if routes.iter().filter(|(e, _)| e == endpoint).count() == 1 {
        endpoint.to_string()
    } else {
        format!("{endpoint}/{route}")
    }
}

fn paused(p: &RoutePause, now: i64, t: Lang) -> Markup {
    html! {
        strong { t { "paused" } } " " t { "since" } " " (when(p.paused_at_ms, now, t))
        @if let Some(until) = p.until_ms { ", " t { "until" } " " (when(until, now, t)) }
        @if let Some(reason) = &p.reason { " (" (reason) ")" }
        " " t { "— its deliveries wait." }
    }
}

fn button(chrome: &Chrome, action: &str, endpoint: &str, route: &str, resume: bool) -> Markup {
    html! {
        form method="post" action=(action) {
            (csrf_field(chrome))
            input type="hidden" name="endpoint" value=(endpoint);
            input type="hidden" name="route" value=(route);
            button type="submit" {
                @if resume { t { "Resume" } } @else { t { "Pause" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Vec<(String, String)> {
        vec![
            ("pagarme".into(), "default".into()),
            ("stripe".into(), "erp".into()),
        ]
    }

    #[test]
    fn only_a_configured_route_is_asked_for() {
        let ok = asked(&routes(), Some("stripe".into()), Some("erp".into()));
        assert_eq!(
            ok,
            Ok(Asked {
                endpoint: "stripe".into(),
                route: "erp".into()
            })
        );
        let other = asked(&routes(), Some("stripe".into()), Some("crm".into()));
        assert_eq!(other.unwrap_err().0, StatusCode::BAD_REQUEST);
        let missing = asked(&routes(), Some("stripe".into()), None);
        assert_eq!(missing.unwrap_err().0, StatusCode::BAD_REQUEST);
    }
}
