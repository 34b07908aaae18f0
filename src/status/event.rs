//! One event's page: what it is, whether it lacks a field its provider's events always carry
//! (`drift`: flagged, it was accepted all the same), its headers as stored (credential headers were stored as
//! `[redacted]` and stay so), its body (pretty-printed when it is JSON, cut at
//! [`SHOWN_BYTES`] with a download link for the whole), every delivery attempt, and its
//! replay button. Everything attacker-controlled is escaped by maud; the phrases in `t { }`
//! are said in the visitor's language (`text.rs`).

use http::{HeaderValue, StatusCode, header};
use maud::{Markup, html};

use super::pages::{Chrome, csrf_field, excerpt, frame, status_badge};
use super::text::{Lang, when};
use super::{Answer, respond};
use crate::store::{EventDetail, Fetched, Origin, Status, Store, header_lines};

/// How much of a body the page shows; the rest is a download.
pub const SHOWN_BYTES: usize = 64 * 1024;

pub fn page(chrome: &Chrome, d: &EventDetail, missing: &[&str], now: i64) -> Markup {
    let e = &d.summary;
    let replayable = !matches!(e.status, Status::Delivering | Status::Stored);
    let (shown, cut) = body_text(&d.body);
    let t = chrome.lang;
    let body = html! {
        h1 { t { "Event " } (e.id) }
        @if e.status == Status::Dead {
            div.banner.alert role="alert" {
                strong { t { "Dead: " } } t { "every attempt failed." }
                @if let Some(error) = &e.last_error { " " t { "Last error" } ": " code { (excerpt(error, 300)) } }
            }
        }
        @if !missing.is_empty() {
            p.note role="status" {
                strong { t { "Drift: " } }
                t { "this event lacks what its provider's events always carry: " }
                @for (n, name) in missing.iter().enumerate() { @if n > 0 { ", " } code { (name) } }
                t { ". It was accepted as usual; has the gateway changed its payload?" }
            }
        }
        dl.facts {
            dt { "Status" } dd { (status_badge(e.status)) }
            dt { "Endpoint" } dd { (e.endpoint) }
            dt { t { "Received" } } dd { (when(e.received_at_ms, now, t)) }
            dt { t { "Event type" } } dd {
                (e.event_type.as_deref().unwrap_or("—"))
                @if e.event_type.is_some() && e.origin == Origin::Reconcile {
                    span.small { t { " (from the gateway's API)" } }
                } @else if e.event_type.is_some() && d.event_type_signed != Some(true) {
                    span.small { t { " (not covered by the signature)" } }
                }
            }
            @if e.origin == Origin::Reconcile {
                dt { t { "Origin" } }
                dd { t { "reconcile: its webhook never arrived; taken from the gateway's API" } }
            }
            @if let Some(id) = &d.signed_id { dt { t { "Signed id" } } dd { code { (id) } } }
            @if let Some(f) = &d.fetched {
                dt { t { "Fetched" } }
                dd { code { (f.state()) } @if let Fetched::Rejected(why) = f { " " span.small { (why) } } }
            }
            dt { t { "Dedup key" } } dd { code { (e.dedup_key) } }
            @if let Some(object) = &e.object_id { dt { t { "Object" } } dd { code { (object) } } }
            dt { t { "Attempts" } } dd { (e.attempts) }
            @if let Some(next) = e.next_attempt_at_ms {
                @if e.status == Status::Pending { dt { t { "Next attempt" } } dd { (when(next, now, t)) } }
            }
            @if let Some(error) = &e.last_error { dt { t { "Last error" } } dd.error { (excerpt(error, 300)) } }
        }
        @if replayable {
            form method="post" action=(format!("/events/{}/replay", e.id)) {
                (csrf_field(chrome))
                button type="submit" { t { "Replay this event" } }
                span.small { t { " It goes back to pending and is delivered again from the first attempt." } }
            }
        }
        h2 { t { "Delivery attempts" } }
        @if d.attempts.is_empty() {
            p { t { "None yet." } }
        } @else {
            div.scroll {
                table {
                    thead { tr {
                        th scope="col" { "#" } th scope="col" { t { "Started" } } th scope="col" { t { "Took" } }
                        th scope="col" { t { "Outcome" } } th scope="col" { t { "Error" } }
                    } }
                    tbody {
                        @for a in &d.attempts {
                            tr {
                                td { (a.attempt) }
                                td { (when(a.started_at_ms, now, t)) }
                                td { (a.duration_ms) " ms" }
                                td { span class=(format!("badge {}", outcome_class(&a.outcome))) { t { (a.outcome) } } }
                                td.error { (excerpt(a.error.as_deref().unwrap_or(""), 300)) }
                            }
                        }
                    }
                }
            }
        }
        h2 { t { "Headers" } }
        div.scroll {
            table.headers {
                tbody {
                    @for (name, value) in header_lines(&d.headers) {
                        tr { th scope="row" { (name) } td { code { (value) } } }
                    }
                }
            }
        }
        h2 { t { "Body" } }
        p.small {
            (d.body.len()) " bytes"
            @if let Some(ct) = &d.content_type { ", " (ct) }
            ". " a href=(format!("/events/{}/body", e.id)) download { t { "Download the body as received" } }
        }
        pre.body { code { (shown) } }
        @if cut {
            p.small { t { "Cut at " } (SHOWN_BYTES / 1024) t { " KiB; download it for the rest." } }
        }
    };
    frame(chrome, html! { t { "Event " } (e.id) }, body)
}

fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "delivered" => "delivered",
        "failed" => "dead",
        _ => "pending",
    }
}

/// The body as text to show: pretty JSON if it parses as JSON, else the text itself (invalid
/// UTF-8 replaced); cut at [`SHOWN_BYTES`]. Says whether it was cut.
fn body_text(body: &[u8]) -> (String, bool) {
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => serde_json::to_string_pretty(&value)
            .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned()),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    if text.len() <= SHOWN_BYTES {
        return (text, false);
    }
    let mut end = SHOWN_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

/// `GET /events/ID/body`: the raw bytes, as a download (never rendered by the browser).
pub async fn download(store: &Store, id: i64, t: Lang) -> Answer {
    match store.event_detail(id).await {
        Ok(Some(d)) => {
            let mut r = respond(StatusCode::OK, "application/octet-stream", d.body);
            let name = format!("attachment; filename=\"event-{id}.body\"");
            if let Ok(value) = HeaderValue::from_str(&name) {
                r.headers_mut().insert(header::CONTENT_DISPOSITION, value);
            }
            r
        }
        Ok(None) => super::not_found(false, t),
        Err(e) => super::unavailable(&e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_pretty_printed_and_large_bodies_are_cut() {
        let (text, cut) = body_text(br#"{"a":[1,2]}"#);
        assert_eq!(text, "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
        assert!(!cut);
        let (text, cut) = body_text(b"not json <b>");
        assert_eq!((text.as_str(), cut), ("not json <b>", false));
        let big = "é".repeat(SHOWN_BYTES);
        let (text, cut) = body_text(big.as_bytes());
        assert!(cut && text.len() <= SHOWN_BYTES && text.len() > SHOWN_BYTES - 2);
    }
}
