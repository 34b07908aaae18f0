//! The rejected requests kept (issue 27, "Keep what was rejected"; `store/quarantine.rs`):
//! `/rejected` lists them newest first, of every endpoint or one (`?endpoint=`), a page at a
//! time (`before`: the last id shown; `limit`), with why each was refused and how much of its
//! body was kept; `/rejected/ID` shows one: why, its headers as stored (credentials were
//! stored `[redacted]`), its body (text escaped by maud, a body that is not UTF-8 as hex), and
//! the command that explains it, `portaria verify --rejected ID`. `/api/rejected` and
//! `/api/rejected/ID` are the same as JSON (`store::rejected_json`, what `events rejected
//! --json` prints), behind the same login as the rest of the page.
//!
//! There is no replay button, and none may be added: a rejected request failed verification
//! (or was too large, or had no dedup key), so it is never forwarded; once the cause is put
//! right, the gateway's own retries bring it again. The list reads no body
//! (`Store::rejected_page`); only one request's page reads one.

use std::fmt::Write as _;
use std::future::Future;

use http::StatusCode;
use maud::{Markup, html};
use serde_json::json;

use super::pages::{Chrome, excerpt, frame};
use super::text::when;
use super::{Answer, MAX_PAGE, PAGE, STORE_DEADLINE, StatusPage, api, html as page_answer};
use crate::store::{
    Quarantined, RejectedSummary, StoreError, header_lines, rejected_detail_json, rejected_json,
};
use crate::time::now_ms;

/// How much of a body that is not UTF-8 the page shows, in hex.
pub const SHOWN_HEX: usize = 4 * 1024;

/// What the list asks for: `endpoint`, `before`, `limit` (an empty or unreadable value is no
/// filter; the limit is 1 to [`MAX_PAGE`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub endpoint: Option<String>,
    pub before: Option<i64>,
    pub limit: usize,
}

pub fn query(q: &str) -> Query {
    let mut asked = Query {
        limit: PAGE,
        ..Query::default()
    };
    for (key, value) in form_urlencoded::parse(q.as_bytes()) {
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        match key.as_ref() {
            "endpoint" => asked.endpoint = Some(value.to_string()),
            "before" => asked.before = value.parse().ok(),
            "limit" => asked.limit = value.parse().unwrap_or(PAGE).clamp(1, MAX_PAGE),
            _ => {}
        }
    }
    asked
}

/// A store read within [`STORE_DEADLINE`].
async fn bounded<T>(read: impl Future<Output = Result<T, StoreError>>) -> Result<T, String> {
    match tokio::time::timeout(STORE_DEADLINE, read).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("the database did not answer within 5 s".into()),
    }
}

/// The id of the next page's first row, when this page is full.
fn next_before(rows: &[RejectedSummary], limit: usize) -> Option<i64> {
    (rows.len() == limit).then(|| rows.last().map(|r| r.id))?
}

impl StatusPage {
    async fn rejected_rows(&self, q: &Query) -> Result<Vec<RejectedSummary>, String> {
        let read = self
            .store
            .rejected_page(q.endpoint.as_deref(), q.before, q.limit);
        bounded(read).await
    }

    /// `GET /rejected`.
    pub(super) async fn rejected_list(&self, chrome: Chrome, query_text: &str) -> Answer {
        let q = query(query_text);
        match self.rejected_rows(&q).await {
            Ok(rows) => {
                let t = chrome.lang;
                let markup = list(&chrome, &self.endpoints, &q, &rows, now_ms());
                page_answer(StatusCode::OK, markup, t)
            }
            Err(e) => super::unavailable(&e),
        }
    }

    /// `GET /rejected/ID`.
    pub(super) async fn rejected_one(&self, chrome: Chrome, id: i64) -> Answer {
        let t = chrome.lang;
        match bounded(self.store.rejected_get(id)).await {
            Ok(Some(r)) => page_answer(StatusCode::OK, one(&chrome, &r, now_ms()), t),
            Ok(None) => page_answer(StatusCode::NOT_FOUND, not_found(&chrome), t),
            Err(e) => super::unavailable(&e),
        }
    }

    /// `GET /api/rejected?endpoint=&before=&limit=`.
    pub(super) async fn api_rejected_list(&self, query_text: &str) -> Answer {
        let q = query(query_text);
        match self.rejected_rows(&q).await {
            Ok(rows) => api::ok(json!({
                "rejected": rows.iter().map(rejected_json).collect::<Vec<_>>(),
                "next_before": next_before(&rows, q.limit),
            })),
            Err(e) => super::unavailable(&e),
        }
    }

    /// `GET /api/rejected/ID`.
    pub(super) async fn api_rejected_one(&self, id: i64) -> Answer {
        match bounded(self.store.rejected_get(id)).await {
            Ok(Some(r)) => api::ok(rejected_detail_json(&r)),
            Ok(None) => api::error(StatusCode::NOT_FOUND, "no such rejected request"),
            Err(e) => super::unavailable(&e),
        }
    }
}

/// The store's word for why (the log line's outcome) in the visitor's language; a word this
/// page does not know as it is.
fn reason(code: &str) -> Markup {
    let said = match code {
        "bad_signature" => "bad signature",
        "stale_timestamp" => "stale timestamp",
        "too_large" => "too large",
        "bad_request" => "bad request",
        other => return html! { (other) },
    };
    html! { t { (said) } }
}

pub fn list(
    chrome: &Chrome,
    endpoints: &[String],
    q: &Query,
    rows: &[RejectedSummary],
    now: i64,
) -> Markup {
    let t = chrome.lang;
    let next = next_before(rows, q.limit).map(|before| {
        let mut link = form_urlencoded::Serializer::new(String::new());
        if let Some(endpoint) = &q.endpoint {
            link.append_pair("endpoint", endpoint);
        }
        link.append_pair("before", &before.to_string());
        format!("/rejected?{}", link.finish())
    });
    let body = html! {
        h1 { t { "Rejected requests" } }
        p.small { t { "Requests portaria refused (bad signature, stale timestamp, no dedup key, \
                       too large), kept to see why: the newest quarantine_keep of each endpoint, \
                       for quarantine_for. They are not events and are never forwarded." } }
        form.filters method="get" action="/rejected" role="search" {
            label {
                "Endpoint"
                select name="endpoint" {
                    option value="" { t { "any" } }
                    @for name in endpoints {
                        option value=(name) selected[q.endpoint.as_deref() == Some(name.as_str())] { (name) }
                    }
                }
            }
            button type="submit" { t { "Show" } }
        }
        @if rows.is_empty() {
            p { t { "No rejected requests kept." } }
        } @else {
            div.scroll {
                table {
                    caption.small { t { "Newest first" } }
                    thead { tr {
                        th scope="col" { "#" } th scope="col" { t { "Received" } } th scope="col" { "Endpoint" }
                        th scope="col" { t { "Reason" } } th scope="col" { t { "Detail" } } th scope="col" { t { "Body" } }
                    } }
                    tbody {
                        @for r in rows {
                            tr {
                                td { a href=(format!("/rejected/{}", r.id)) { (r.id) } }
                                td { (when(r.received_at_ms, now, t)) }
                                td { (r.endpoint) }
                                td { (reason(&r.reason)) }
                                td.error { (excerpt(&r.detail, 160)) }
                                td {
                                    (r.body_bytes) " B"
                                    @if r.truncated { " " span.badge.dead { t { "truncated" } } }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next {
            p { a href=(next) rel="next" { t { "Older rejected requests →" } } }
        }
    };
    frame(chrome, html! { t { "Rejected requests" } }, body)
}

pub fn one(chrome: &Chrome, r: &Quarantined, now: i64) -> Markup {
    let t = chrome.lang;
    let command = format!("portaria verify --rejected {}", r.id);
    let body = html! {
        h1 { t { "Rejected request " } (r.id) }
        dl.facts {
            dt { "Endpoint" } dd { (r.endpoint) }
            dt { t { "Received" } } dd { (when(r.received_at_ms, now, t)) }
            dt { t { "Reason" } } dd { (reason(&r.reason)) }
            dt { t { "Detail" } } dd.error { (excerpt(&r.detail, 2000)) }
        }
        h2 { t { "Why it was refused" } }
        p { t { "On the machine portaria runs on, this checks it again with the endpoint's \
                 current configuration and secrets, and says what does not match:" } }
        pre { code { (command) } }
        p.small { t { "A rejected request is never forwarded, so it has no replay button. Once \
                       the cause is put right (a rotated secret, a clock), the gateway's own \
                       retries bring it again." } }
        h2 { t { "Headers" } }
        div.scroll {
            table.headers {
                tbody {
                    @for (name, value) in header_lines(&r.headers) {
                        tr { th scope="row" { (name) } td { code { (value) } } }
                    }
                }
            }
        }
        h2 { t { "Body" } }
        (body_view(r))
    };
    frame(chrome, html! { t { "Rejected request " } (r.id) }, body)
}

/// The body: as text when it is UTF-8 (cut at the event page's 64 KiB), else its first
/// [`SHOWN_HEX`] bytes in hex; either way escaped by maud.
fn body_view(r: &Quarantined) -> Markup {
    let shown = super::event::SHOWN_BYTES;
    let text = std::str::from_utf8(&r.body).ok();
    html! {
        p.small {
            (r.body.len()) " bytes"
            @if let Some(ct) = &r.content_type { ", " (ct) }
            @if r.truncated {
                ". " t { "Larger than max_body_bytes: not kept whole." }
            }
        }
        @if r.body.is_empty() {
            p { t { "No body was kept." } }
        } @else if let Some(text) = text {
            pre.body { code { (cut(text, shown)) } }
            @if text.len() > shown {
                p.small { t { "Cut at " } (shown / 1024) " KiB." }
            }
        } @else {
            p.small { t { "Not UTF-8 text: shown as hex." } }
            pre.body { code { (hex(&r.body, SHOWN_HEX)) } }
            @if r.body.len() > SHOWN_HEX {
                p.small { t { "Cut at " } (SHOWN_HEX / 1024) " KiB." }
            }
        }
    }
}

/// `text`'s first `max` bytes, at a character's boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `bytes`' first `max` as a hex dump: the offset, 16 bytes, and those that are printable
/// ASCII (`.` for the rest).
fn hex(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for (n, line) in bytes[..max.min(bytes.len())].chunks(16).enumerate() {
        let _ = write!(out, "{:06x} ", n * 16);
        for i in 0..16 {
            match line.get(i) {
                Some(b) => {
                    let _ = write!(out, " {b:02x}");
                }
                None => out.push_str("   "),
            }
        }
        out.push_str("  ");
        out.extend(line.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    out
}

pub fn not_found(chrome: &Chrome) -> Markup {
    frame(
        chrome,
        html! { t { "Not found" } },
        html! {
            h1 { t { "Not found" } }
            p {
                t { "No such rejected request (it may have been pruned). " }
                a href="/rejected" { t { "All rejected requests" } }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_reads_endpoint_cursor_and_a_bounded_limit() {
        assert_eq!(
            query(""),
            Query {
                limit: PAGE,
                ..Query::default()
            }
        );
        let q = query("endpoint=pagarme&before=12&limit=5000&x=1");
        assert_eq!(q.endpoint.as_deref(), Some("pagarme"));
        assert_eq!((q.before, q.limit), (Some(12), MAX_PAGE));
        let q = query("endpoint=&before=nope&limit=0");
        assert_eq!((q.endpoint, q.before, q.limit), (None, None, 1));
    }

    #[test]
    fn a_body_that_is_not_text_is_a_hex_dump() {
        let dump = hex(b"ab\x00\xff<script>", 64);
        assert_eq!(
            dump,
            "000000  61 62 00 ff 3c 73 63 72 69 70 74 3e              ab..<script>\n"
        );
        // Cut at `max`, whole lines of 16.
        assert_eq!(hex(&[0u8; 40], 32).lines().count(), 2);
        assert_eq!(cut("aé", 2), "a");
    }
}
