//! One event as JSON: the one shape that `portaria events list --json` and `events show
//! --json` print and the status page's `/api/events` and `/api/events/ID` answer
//! (docs/status-page.md lists the fields); and a kept rejected request's, which `events
//! rejected --json` prints and `/api/rejected` answers. Times are RFC 3339 text with unix milliseconds
//! beside them (`*_ms`). Here, beside the row types, so the command line and the status page
//! serialize an event through the same code whatever engine read it.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    Attempt, EventDetail, EventSummary, Fetched, Quarantined, RejectedSummary, RouteState,
};
use crate::time::rfc3339;

/// An event as listed; with `routes` (its delivery to each route it matched), a `routes`
/// array too: `events list --json` reads them, the status page's list does not.
pub fn summary_json(e: &EventSummary, routes: Option<&[RouteState]>) -> Value {
    let mut v = json!({
        "id": e.id,
        "endpoint": e.endpoint,
        "dedup_key": e.dedup_key,
        "object_id": e.object_id,
        "event_type": e.event_type,
        "received_at": rfc3339(e.received_at_ms),
        "received_at_ms": e.received_at_ms,
        "status": e.status.as_str(),
        "attempts": e.attempts,
        "next_attempt_at": e.next_attempt_at_ms.map(rfc3339),
        "next_attempt_at_ms": e.next_attempt_at_ms,
        "last_error": e.last_error,
        "origin": e.origin.as_str(),
    });
    if let Some(routes) = routes {
        v["routes"] = routes.iter().map(route_json).collect();
    }
    v
}

/// One event in full: its summary and routes, what the signature covered, the request as
/// stored (headers as `[name, value]` pairs, the body as text when it is UTF-8 and always in
/// base64), and every delivery attempt.
pub fn detail_json(d: &EventDetail) -> Value {
    let headers: Vec<Value> = header_lines(&d.headers)
        .map(|(name, value)| json!([name, value]))
        .collect();
    let mut v = summary_json(&d.summary, Some(&d.routes));
    v["signed_id"] = json!(d.signed_id);
    v["event_type_signed"] = json!(d.event_type_signed);
    v["content_type"] = json!(d.content_type);
    v["headers"] = json!(headers);
    v["body_bytes"] = json!(d.body.len());
    v["body_text"] = json!(std::str::from_utf8(&d.body).ok());
    v["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&d.body));
    v["delivery_attempts"] = d.attempts.iter().map(attempt_json).collect();
    // Verified by fetching: `fetched` or `rejected_by_fetch`, and the object or the reason.
    if let Some(f) = &d.fetched {
        v["fetch"] = json!(f.state());
        match f {
            Fetched::Object(text) => v["fetched"] = serde_json::from_str(text).unwrap_or_default(),
            Fetched::Rejected(why) => v["fetch_error"] = json!(why),
        }
    }
    v
}

/// A kept rejected request as listed (`events rejected --json`, `/api/rejected`): never an
/// event, so none of an event's fields but its endpoint and time.
pub fn rejected_json(r: &RejectedSummary) -> Value {
    json!({
        "id": r.id,
        "endpoint": r.endpoint,
        "received_at": rfc3339(r.received_at_ms),
        "received_at_ms": r.received_at_ms,
        "reason": r.reason,
        "detail": r.detail,
        "content_type": r.content_type,
        "body_bytes": r.body_bytes,
        "truncated": r.truncated,
    })
}

/// One kept rejected request whole (`/api/rejected/ID`): as listed, with its headers as
/// stored (credentials `[redacted]`), its body as an event's is given, and the command that
/// explains it.
pub fn rejected_detail_json(r: &Quarantined) -> Value {
    let headers: Vec<Value> = header_lines(&r.headers)
        .map(|(name, value)| json!([name, value]))
        .collect();
    let mut v = rejected_json(&RejectedSummary::from(r));
    v["headers"] = json!(headers);
    v["body_text"] = json!(std::str::from_utf8(&r.body).ok());
    v["body_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&r.body));
    v["explain"] = json!(format!("portaria verify --rejected {}", r.id));
    v
}

fn route_json(r: &RouteState) -> Value {
    json!({
        "route": r.route,
        "status": r.status.as_str(),
        "attempts": r.attempts,
        "next_attempt_at": r.next_attempt_at_ms.map(rfc3339),
        "next_attempt_at_ms": r.next_attempt_at_ms,
        "last_error": r.last_error,
        "finished_at": r.finished_at_ms.map(rfc3339),
        "finished_at_ms": r.finished_at_ms,
        "order_key": r.order_key,
    })
}

fn attempt_json(a: &Attempt) -> Value {
    json!({
        "attempt": a.attempt,
        "route": a.route,
        "started_at": rfc3339(a.started_at_ms),
        "started_at_ms": a.started_at_ms,
        "duration_ms": a.duration_ms,
        "outcome": a.outcome,
        "error": a.error,
    })
}

/// The stored `name: value\r\n` lines, as (name, value).
pub fn header_lines(blob: &[u8]) -> impl Iterator<Item = (String, String)> + '_ {
    blob.split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
        .map(|line| {
            let text = String::from_utf8_lossy(line);
            match text.split_once(": ") {
                Some((name, value)) => (name.to_string(), value.to_string()),
                None => (text.to_string(), String::new()),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;

    #[test]
    fn header_lines_split_name_and_value() {
        let lines: Vec<_> = header_lines(b"a: 1\r\nauthorization: [redacted]\r\nodd\r\n").collect();
        assert_eq!(
            lines,
            [
                ("a".into(), "1".into()),
                ("authorization".into(), "[redacted]".into()),
                ("odd".into(), String::new())
            ]
        );
    }

    fn detail() -> EventDetail {
        EventDetail {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id: 7,
                endpoint: "shop".into(),
                dedup_key: "k".into(),
                event_type: Some("charge.paid".into()),
                received_at_ms: 1_000,
                status: Status::Pending,
                attempts: 1,
                next_attempt_at_ms: Some(61_000),
                last_error: Some("HTTP 500".into()),
                object_id: Some("ch_1".into()),
            },
            content_type: Some("application/json".into()),
            headers: b"x-sig: [redacted]\r\n".to_vec(),
            body: b"{}".to_vec(),
            routes: vec![RouteState {
                route: "erp".into(),
                status: Status::Pending,
                attempts: 1,
                next_attempt_at_ms: Some(61_000),
                last_error: Some("HTTP 500".into()),
                finished_at_ms: None,
                order_key: Some("ch_1".into()),
            }],
            attempts: vec![Attempt {
                attempt: 1,
                started_at_ms: 2_000,
                duration_ms: 5,
                outcome: "failed".into(),
                error: Some("HTTP 500".into()),
                route: "erp".into(),
            }],
            signed_id: None,
            event_type_signed: Some(true),
            fetched: None,
        }
    }

    #[test]
    fn the_detail_is_the_summary_with_its_routes_and_the_request() {
        let d = detail();
        let v = detail_json(&d);
        // Every field of the listed shape is there, with the same value.
        let listed = summary_json(&d.summary, Some(&d.routes));
        for (key, value) in listed.as_object().unwrap() {
            assert_eq!(&v[key], value, "{key}");
        }
        assert_eq!(v["received_at"], "1970-01-01T00:00:01.000Z");
        assert_eq!(v["next_attempt_at_ms"], 61_000);
        assert_eq!(v["routes"][0]["order_key"], "ch_1");
        assert_eq!(
            v["routes"][0]["next_attempt_at"],
            "1970-01-01T00:01:01.000Z"
        );
        assert_eq!(v["headers"], json!([["x-sig", "[redacted]"]]));
        assert_eq!(v["body_text"], "{}");
        assert_eq!(v["body_base64"], "e30=");
        assert_eq!(v["delivery_attempts"][0]["route"], "erp");
        assert_eq!(v["delivery_attempts"][0]["started_at_ms"], 2_000);
        // Listed without its routes (the status page's list), the rest is unchanged.
        let bare = summary_json(&d.summary, None);
        assert!(bare.get("routes").is_none());
        assert_eq!(bare["last_error"], "HTTP 500");
    }
}
