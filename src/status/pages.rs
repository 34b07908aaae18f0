//! The status page's HTML frame and its pages but one event's (`event.rs`) and the rejected
//! requests' (`rejected.rs`): the overview ("Now" per endpoint, the banner, the chart, how many
//! rejected requests each endpoint keeps), the events list with its filters, the login form.
//! maud escapes every value put in; nothing here builds markup from strings. Each phrase
//! in `t { }` is said in the visitor's language (`text.rs`).

use std::net::SocketAddr;

use maud::{DOCTYPE, Markup, html};

use super::api::Alert;
use super::chart;
use super::public::PublicView;
use super::text::{Lang, ago, plural, when};
use crate::store::{EndpointNow, EventSummary, ListFilter, Overview, Status};

/// What the frame of every page shows.
pub struct Chrome {
    /// The visitor's form token; None without a session (a bearer token, or the login page).
    pub csrf: Option<String>,
    /// Open without a token: the loopback address it listens on.
    pub open_on: Option<SocketAddr>,
    /// A token is configured, so there is a session to end.
    pub logged_in: bool,
    /// The language the browser prefers.
    pub lang: Lang,
}

/// The frame: head, navigation, the open-on-loopback note, `main`.
pub fn frame(chrome: &Chrome, title: Markup, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang=(chrome.lang.tag()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · portaria" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                header {
                    nav aria-label=(chrome.lang.say("Main")) {
                        a.brand href="/" { "portaria" }
                        a href="/" { t { "Now" } }
                        a href="/events" { t { "Events" } }
                        a href="/events?status=dead" { t { "Dead" } }
                        a href="/rejected" { t { "Rejected" } }
                        @if chrome.logged_in {
                            form.inline method="post" action="/logout" {
                                (csrf_field(chrome))
                                button.link type="submit" { t { "Log out" } }
                            }
                        }
                    }
                }
                @if let Some(addr) = chrome.open_on {
                    p.note role="note" {
                        t { "This page asks for no password because it listens on loopback only (" }
                        (addr) t { "). To open it to your network, set an admin token ([status] token_file)." }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A form's hidden `csrf` field, when the visitor has a session to bind it to.
pub fn csrf_field(chrome: &Chrome) -> Markup {
    html! {
        @if let Some(csrf) = &chrome.csrf {
            input type="hidden" name="csrf" value=(csrf);
        }
    }
}

pub fn overview(
    chrome: &Chrome,
    o: &Overview,
    public: Option<&PublicView>,
    routes: Markup,
    kept: &[(String, u64)],
    now: i64,
) -> Markup {
    let alert = Alert::of(o, now).with(public);
    let t = chrome.lang;
    let body = html! {
        h1 { t { "Now" } }
        (banner(&alert, public, now, t))
        section aria-labelledby="chart-title" {
            h2 #chart-title { t { "The last 48 hours" } }
            (chart::svg(&o.hours))
        }
        h2 { "Endpoints" }
        @if o.endpoints.is_empty() {
            p { t { "No endpoint yet." } }
        }
        div.cards {
            @for e in &o.endpoints {
                @let kept = kept.iter().find(|(name, _)| *name == e.endpoint).map_or(0, |(_, n)| *n);
                (endpoint_card(chrome, e, kept, now))
            }
        }
        (routes)
        p.small { t { "Updated " } (when(now, now, t)) t { ". Received counts are exact; duplicates \
                    and rejected requests are counted per clock hour (the last 24)." } }
    };
    frame(chrome, html! { t { "Now" } }, body)
}

fn banner(alert: &Alert, public: Option<&PublicView>, now: i64, t: Lang) -> Markup {
    html! {
        @if alert.is_red() {
            div.banner.alert role="alert" {
                strong { t { "Needs you: " } }
                @if let Some(unreachable) = public.and_then(|p| p.banner(now, t)) {
                    (unreachable)
                }
                @if alert.dead > 0 {
                    a href="/events?status=dead" { (alert.dead) t { (plural(alert.dead, " dead event", " dead events")) } }
                    t { " (every retry failed; replay them once the target works). " }
                }
                @if alert.pending_too_long() {
                    @if let Some(age) = alert.oldest_pending_age_ms {
                        t { "The oldest pending event has waited " } (ago(age, t)) ". "
                        a href="/events?status=pending" { t { "See pending events" } }
                    }
                }
            }
        } @else {
            div.banner.ok role="status" {
                t { "Nothing needs you: no dead events, nothing waiting longer than 15 minutes." }
            }
        }
    }
}

/// `kept`: the rejected requests the endpoint keeps now (`/rejected?endpoint=`).
fn endpoint_card(chrome: &Chrome, e: &EndpointNow, kept: u64, now: i64) -> Markup {
    let t = chrome.lang;
    let r = &e.rejected_last_day;
    let events = |status: &str| {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("endpoint", &e.endpoint)
            .append_pair("status", status)
            .finish();
        format!("/events?{q}")
    };
    let oldest_late = e
        .oldest_pending_ms
        .is_some_and(|t| now - t > super::PENDING_ALERT_MS);
    html! {
        section.card.red[e.dead > 0 || oldest_late] aria-label=(format!("Endpoint {}", e.endpoint)) {
            h3 { a href=(format!("/events?{}", endpoint_query(&e.endpoint))) { (e.endpoint) } }
            dl {
                dt { t { "Received, last hour" } } dd { (e.received_last_hour) }
                dt { t { "Received, last 24 h" } } dd { (e.received_last_day) }
                dt { t { "Duplicates, 24 h" } } dd { (e.duplicates_last_day) }
                dt { t { "Rejected, 24 h" } }
                dd {
                    (r.total())
                    @let reasons = [
                        ("bad signature", r.bad_signature),
                        ("stale timestamp", r.stale_timestamp),
                        ("too large", r.too_large),
                        ("bad request", r.bad_request),
                        ("storage error", r.storage_error),
                    ];
                    @let mut given = reasons.iter().filter(|(_, n)| *n > 0).peekable();
                    @if given.peek().is_some() {
                        span.small {
                            " ("
                            @for (i, (why, n)) in given.enumerate() {
                                @if i > 0 { ", " }
                                t { (why) } " " (n)
                            }
                            ")"
                        }
                    }
                }
                dt { t { "Rejected, kept" } }
                dd { a href=(format!("/rejected?{}", endpoint_query(&e.endpoint))) { (kept) } }
                dt { t { "Pending" } } dd { a href=(events("pending")) { (e.pending) } }
                dt { t { "Dead" } } dd.bad[e.dead > 0] { a href=(events("dead")) { (e.dead) } }
                dt { t { "Oldest pending" } }
                dd.bad[oldest_late] {
                    @match e.oldest_pending_ms {
                        Some(at) => { t { "waiting " } (ago(now - at, t)) }
                        None => { t { "none" } }
                    }
                }
                dt { t { "Last event" } }
                dd {
                    @match e.last_received_ms {
                        Some(at) => { (when(at, now, t)) }
                        None => { t { "never" } }
                    }
                }
            }
            @if e.dead > 0 {
                form method="post" action="/replay-dead" {
                    (csrf_field(chrome))
                    input type="hidden" name="endpoint" value=(e.endpoint);
                    button type="submit" {
                        t { "Replay all " } (e.dead)
                        t { (plural(e.dead, " dead event of ", " dead events of ")) } (e.endpoint)
                    }
                }
            }
        }
    }
}

/// `endpoint=NAME`, for a link.
fn endpoint_query(endpoint: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("endpoint", endpoint)
        .finish()
}

pub fn events(
    chrome: &Chrome,
    endpoints: &[String],
    f: &ListFilter,
    events: &[EventSummary],
    replayable: usize,
    now: i64,
) -> Markup {
    let given = super::filters::pairs(f);
    let next = (events.len() == f.limit)
        .then(|| events.last().map(|e| e.id))
        .flatten()
        .map(|before| {
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.extend_pairs(&given)
                .append_pair("before", &before.to_string());
            format!("/events?{}", q.finish())
        });
    let value = |name: &str| {
        given
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let t = chrome.lang;
    let body = html! {
        h1 { t { "Events" } }
        form.filters method="get" action="/events" role="search" {
            label {
                "Endpoint"
                select name="endpoint" {
                    option value="" { t { "any" } }
                    @for name in endpoints {
                        option value=(name) selected[f.endpoint.as_deref() == Some(name.as_str())] { (name) }
                    }
                }
            }
            label {
                "Status"
                select name="status" {
                    option value="" { t { "any" } }
                    @for s in Status::ALL {
                        option value=(s.as_str()) selected[f.status == Some(s)] { t { (s.as_str()) } }
                    }
                }
            }
            label { t { "Event type" } input type="text" name="type" value=[f.event_type.as_deref()]; }
            label { t { "Key or id contains" } input type="search" name="q" value=[f.text.as_deref()]; }
            label { "Route" input type="text" name="route" value=[f.route.as_deref()]; }
            label { t { "Since" } input type="text" name="since" placeholder="2h" value=[value("since")]; }
            label { t { "Until" } input type="text" name="until" placeholder="2026-12-01T09:00:00Z" value=[value("until")]; }
            button type="submit" { t { "Show" } }
        }
        @if replayable > 0 && chrome.csrf.is_some() {
            form method="post" action="/replay-matching" {
                (csrf_field(chrome))
                @for (name, v) in &given {
                    input type="hidden" name=(name) value=(v);
                }
                button type="submit" {
                    t { "Replay these " } (replayable) t { (plural(replayable as u64, " event", " events")) }
                }
            }
        }
        @if events.is_empty() {
            p { t { "No events match." } }
        } @else {
            div.scroll {
                table {
                    caption.small { t { "Newest first" } }
                    thead { tr {
                        th scope="col" { "#" } th scope="col" { t { "Received" } } th scope="col" { "Endpoint" }
                        th scope="col" { t { "Type" } } th scope="col" { "Status" } th scope="col" { t { "Attempts" } }
                        th scope="col" { t { "Last error" } }
                    } }
                    tbody {
                        @for e in events {
                            tr {
                                td { a href=(format!("/events/{}", e.id)) { (e.id) } }
                                td { (when(e.received_at_ms, now, t)) }
                                td { (e.endpoint) }
                                td { (e.event_type.as_deref().unwrap_or("")) }
                                td { (status_badge(e.status)) }
                                td { (e.attempts) }
                                td.error { (excerpt(e.last_error.as_deref().unwrap_or(""), 160)) }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next {
            p { a href=(next) rel="next" { t { "Older events →" } } }
        }
    };
    frame(chrome, html! { t { "Events" } }, body)
}

/// The login form: no session yet, so no form token (auth.rs says why none is needed).
/// `error` is English, said in `lang`.
pub fn login(lang: Lang, error: Option<&str>) -> Markup {
    let chrome = Chrome {
        csrf: None,
        open_on: None,
        logged_in: false,
        lang,
    };
    let body = html! {
        h1 { t { "Log in" } }
        @if let Some(error) = error {
            p.banner.alert role="alert" { t { (error) } }
        }
        form.login method="post" action="/login" {
            label for="token" { t { "Admin token" } }
            input #token type="password" name="token" autocomplete="current-password" required;
            button type="submit" { t { "Log in" } }
        }
        p.small { t { "The token is the one in the file or variable that [status] token_file or \
                   token_env names in portaria's configuration." } }
    };
    frame(&chrome, html! { t { "Log in" } }, body)
}

pub fn not_found(chrome: &Chrome) -> Markup {
    frame(
        chrome,
        html! { t { "Not found" } },
        html! {
            h1 { t { "Not found" } }
            p { t { "No such event (it may have been pruned). " } a href="/events" { t { "All events" } } }
        },
    )
}

/// A status as a badge: its class is the store's word, its text the visitor's language's.
pub fn status_badge(status: Status) -> Markup {
    html! { span class=(format!("badge {}", status.as_str())) { t { (status.as_str()) } } }
}

/// The first `max` characters of `text`, with `…` if cut.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}
