//! The pipe protocol's two kinds of line: the event portaria writes to the handler's stdin,
//! and the answer the handler writes to its stdout. Both are one JSON object on one line.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::forward::{Delivery, Outcome};

/// How much of a handler's own error text an attempt's error keeps.
const ERROR_LIMIT: usize = 2000;

/// How much of a line that is not an answer the error quotes.
const GARBAGE_QUOTE: usize = 200;

/// One event, as the handler reads it.
#[derive(Serialize)]
struct EventLine<'a> {
    id: i64,
    endpoint: &'a str,
    route: &'a str,
    dedup_key: &'a str,
    event_type: Option<&'a str>,
    /// True only when there is an event type and the signature covers what it came from.
    event_type_signed: bool,
    /// The id the provider signed apart from the body, or null.
    signed_id: Option<&'a str>,
    /// `webhook`, or `reconcile` for an event taken from the gateway's API.
    origin: &'static str,
    received_at: String,
    attempt: u32,
    headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

/// The line for `d` on `route`, newline included. The body is `body` when it is UTF-8 text,
/// else `body_base64` (standard alphabet, padded); exactly one of them is present.
pub fn event_line(d: &Delivery, route: &str) -> Result<Vec<u8>, String> {
    let (body, body_base64) = match std::str::from_utf8(&d.body) {
        Ok(text) => (Some(text), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&d.body)),
        ),
    };
    let line = EventLine {
        id: d.event_id,
        endpoint: &d.endpoint,
        route,
        dedup_key: &d.dedup_key,
        event_type: d.event_type.as_deref(),
        event_type_signed: d.event_type_signed && d.event_type.is_some(),
        signed_id: d.signed_id.as_deref(),
        origin: d.origin.as_str(),
        received_at: crate::time::rfc3339(d.received_at_ms),
        attempt: d.attempt,
        headers: headers(&d.headers),
        body,
        body_base64,
    };
    // Strings, integers and a map with string keys: serde_json has no error for these, but
    // should it ever, the attempt fails with it rather than the handler reading a bad line.
    let mut out = serde_json::to_vec(&line)
        .map_err(|e| format!("cannot write the event as a JSON line: {e}"))?;
    // Verified by fetching: the object, compact JSON (one line), as the last field.
    if let Some(object) = &d.fetched {
        out.pop();
        out.extend_from_slice(b",\"fetched\":");
        out.extend_from_slice(object.as_bytes());
        out.push(b'}');
    }
    out.push(b'\n');
    Ok(out)
}

/// The stored headers (`name: value\r\n` each) as an object: names as stored (lower case),
/// values as text (invalid UTF-8 replaced), a repeated name's values joined with `, `.
fn headers(raw: &[u8]) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for line in raw.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = line.split_at(colon);
        let name = String::from_utf8_lossy(name).trim().to_string();
        let value = String::from_utf8_lossy(value.get(1..).unwrap_or_default())
            .trim()
            .to_string();
        if name.is_empty() {
            continue;
        }
        map.entry(name)
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

/// A line the handler wrote, read as an answer.
#[derive(Deserialize)]
struct AnswerLine {
    id: i64,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    /// With `ok: false`: retrying cannot help, the delivery is dead now.
    #[serde(default)]
    permanent: bool,
    /// With `ok: false`: try again no sooner than this many seconds from now. Read leniently
    /// (a value that is not a whole number of seconds is ignored, not a broken handler): the
    /// answer's `ok` is what matters.
    #[serde(default)]
    retry_after: Option<serde_json::Value>,
}

/// What one line of the handler's stdout says.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The answer for event `id`.
    For(i64, Outcome),
    /// Not an answer: the handler is broken. The text says why, for the attempt's error.
    Garbage(String),
}

/// Reads one line (without its newline). Fields other than `id`, `ok`, `error`, `permanent`
/// and `retry_after` are ignored; the last two only mean something with `ok: false`, and
/// `permanent` wins over `retry_after`.
pub fn answer(line: &[u8]) -> Answer {
    // serde reads a struct from an array too (`[7, true]`); an answer is an object.
    let object = line.trim_ascii_start().starts_with(b"{");
    let parsed = serde_json::from_slice::<AnswerLine>(line)
        .ok()
        .filter(|_| object);
    match parsed.ok_or(()) {
        Ok(AnswerLine { id, ok: true, .. }) => Answer::For(id, Outcome::Delivered),
        Ok(AnswerLine {
            id,
            ok: false,
            error,
            permanent,
            retry_after,
        }) => {
            let error = error.unwrap_or_default();
            let (text, cut) = crate::forward::command::excerpt(error.as_bytes(), ERROR_LIMIT);
            let text = match (text.is_empty(), cut) {
                (true, _) => "the handler answered ok: false".to_string(),
                (false, false) => format!("handler: {text}"),
                (false, true) => format!("handler: {text} …"),
            };
            let retry_after = retry_after.as_ref().and_then(serde_json::Value::as_u64);
            let outcome = match (permanent, retry_after) {
                (true, _) => Outcome::Permanent(format!("{text} (permanent: not retried)")),
                (false, Some(secs)) => Outcome::RetryAfter {
                    error: text,
                    wait: std::time::Duration::from_secs(secs),
                },
                (false, None) => Outcome::Failed(text),
            };
            Answer::For(id, outcome)
        }
        Err(_) => {
            let (text, cut) = crate::forward::command::excerpt(line, GARBAGE_QUOTE);
            let more = if cut { " …" } else { "" };
            Answer::Garbage(format!(
                "the handler wrote a line that is not an answer ({{\"id\": N, \"ok\": true|false}}): {text}{more}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn delivery(body: &'static [u8]) -> Delivery {
        Delivery {
            origin: crate::store::Origin::Webhook,
            event_id: 42,
            endpoint: "pagarme".into(),
            route: "default".into(),
            dedup_key: "k:1".into(),
            event_type: Some("charge.paid".into()),
            event_type_signed: true,
            signed_id: None,
            content_type: Some("application/json".into()),
            received_at_ms: 1_796_026_524_123,
            attempt: 2,
            headers: Bytes::from_static(
                b"content-type: application/json\r\nx-tag: a\r\nx-tag: b\r\nx-bin: \xff\r\n",
            ),
            body: Bytes::from_static(body),
            fetched: None,
        }
    }

    fn parsed(line: &[u8]) -> serde_json::Value {
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line");
        serde_json::from_slice(line).unwrap()
    }

    #[test]
    fn an_event_is_one_line_with_every_field_and_a_text_body() {
        let line = parsed(&event_line(&delivery(b"{\"a\":\n1}"), "erp").unwrap());
        assert_eq!(
            line,
            serde_json::json!({
                "id": 42,
                "endpoint": "pagarme",
                "route": "erp",
                "dedup_key": "k:1",
                "event_type": "charge.paid",
                "event_type_signed": true,
                "signed_id": null,
                "origin": "webhook",
                "received_at": "2026-11-30T08:15:24.123Z",
                "attempt": 2,
                "headers": {
                    "content-type": "application/json",
                    "x-tag": "a, b",
                    "x-bin": "\u{FFFD}",
                },
                "body": "{\"a\":\n1}",
            })
        );
    }

    #[test]
    fn a_body_that_is_not_utf8_goes_as_base64_only() {
        let mut d = delivery(b"");
        d.body = Bytes::from_static(&[0xff, 0x00, 0x41]);
        d.event_type = None;
        let line = parsed(&event_line(&d, "default").unwrap());
        assert_eq!(line["body_base64"], "/wBB");
        assert!(line.get("body").is_none(), "{line}");
        assert!(line["event_type"].is_null());
        assert_eq!(
            line["event_type_signed"], false,
            "no type is no signed type"
        );
        assert!(line["signed_id"].is_null());
        // A signed id, and a type from an unsigned header.
        let mut d = delivery(b"{}");
        d.signed_id = Some("123456".into());
        d.event_type_signed = false;
        let line = parsed(&event_line(&d, "default").unwrap());
        assert_eq!(line["signed_id"], "123456");
        assert_eq!(line["event_type_signed"], false);
        // An event a reconcile run took from the gateway's API says so.
        d.origin = crate::store::Origin::Reconcile;
        let line = parsed(&event_line(&d, "default").unwrap());
        assert_eq!(line["origin"], "reconcile");
        // Verified by fetching: the object, a field of its own, on the same one line.
        d.fetched = Some(r#"{"id":"pay_1","value":1.5}"#.into());
        let raw = event_line(&d, "default").unwrap();
        assert_eq!(raw.iter().filter(|&&b| b == b'\n').count(), 1);
        let line = parsed(&raw);
        assert_eq!(
            line["fetched"],
            serde_json::json!({"id": "pay_1", "value": 1.5})
        );
        assert_eq!(line["origin"], "reconcile");
        // An empty body is text.
        let line = parsed(&event_line(&delivery(b""), "default").unwrap());
        assert_eq!(line["body"], "");
        assert!(line.get("body_base64").is_none());
    }

    #[test]
    fn answers_are_read_and_anything_else_is_garbage() {
        assert_eq!(
            answer(br#"{"id": 7, "ok": true, "extra": 1}"#),
            Answer::For(7, Outcome::Delivered)
        );
        assert_eq!(
            answer(br#"{"id": 7, "ok": false, "error": "erp down"}"#),
            Answer::For(7, Outcome::Failed("handler: erp down".into()))
        );
        assert_eq!(
            answer(br#"{"id": 7, "ok": false}"#),
            Answer::For(7, Outcome::Failed("the handler answered ok: false".into()))
        );
        assert_eq!(
            answer(br#"{"id": 7, "ok": false, "error": "no such order", "permanent": true}"#),
            Answer::For(
                7,
                Outcome::Permanent("handler: no such order (permanent: not retried)".into())
            )
        );
        assert_eq!(
            answer(br#"{"id": 7, "ok": false, "error": "busy", "retry_after": 30}"#),
            Answer::For(
                7,
                Outcome::RetryAfter {
                    error: "handler: busy".into(),
                    wait: std::time::Duration::from_secs(30)
                }
            )
        );
        assert_eq!(
            answer(br#"{"id": 7, "ok": false, "error": "busy", "retry_after": "soon"}"#),
            Answer::For(7, Outcome::Failed("handler: busy".into()))
        );
        // Only a failure can be permanent.
        assert_eq!(
            answer(br#"{"id": 7, "ok": true, "permanent": true, "retry_after": 5}"#),
            Answer::For(7, Outcome::Delivered)
        );
        let long = format!(
            r#"{{"id": 7, "ok": false, "error": "{}"}}"#,
            "e".repeat(5000)
        );
        let Answer::For(7, Outcome::Failed(text)) = answer(long.as_bytes()) else {
            panic!("not a failure")
        };
        assert!(text.len() < 2100 && text.ends_with(" …"), "{}", text.len());
        for garbage in [
            &b"hello"[..],
            br#"{"id": "7", "ok": true}"#,
            br#"{"ok": true}"#,
            br#"[7, true]"#,
        ] {
            let Answer::Garbage(why) = answer(garbage) else {
                panic!("{garbage:?} read as an answer")
            };
            assert!(why.contains("not an answer"), "{why}");
        }
    }
}
