//! The archive of pruned events: one JSON line per event in a daily gzip file,
//! `YYYY-MM-DD.jsonl.gz` (the UTC date of pruning), written before the rows are deleted and
//! read back by `portaria archive replay`.
//!
//! Each prune batch appends one gzip member and fsyncs the file before [`append`] returns;
//! concatenated members are one valid gzip stream (`zcat` reads the whole day). A batch whose
//! write or fsync fails is cut back off the file, and its rows stay in the database.
//!
//! A line keeps everything needed to audit the event and to deliver it again: endpoint, dedup
//! key, event and content type, received time, the stored headers (`name: value\r\n` each) and
//! the raw body, and the delivery outcome (status, attempts, last error, each attempt). Headers
//! and body are text when they are UTF-8 and base64 otherwise; `headers_encoding` and
//! `body_encoding` say which (`utf8` or `base64`). An event verified by fetching carries what
//! the gateway's API said as `events show --json` does: `fetch` (`fetched` or
//! `rejected_by_fetch`) and the object as JSON (`fetched`) or why (`fetch_error`); replay
//! keeps it again, so a restored event with its object does not ask the API again.
//!
//! [`replay`] puts archived events back into the queue through the restore it is given
//! (`Store::restore`, one rule for both engines): a new pending
//! row when the (endpoint, dedup key) is no longer in the database, the existing row back to
//! pending when it is there and finished, nothing when it is already pending or being
//! delivered. Never a second row for one key. A running server notices within seconds
//! (SQLite's `data_version`; on PostgreSQL at once, by `NOTIFY`) and delivers them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::store::{
    Attempt, EventDetail, EventSummary, Fetched, NewDelivery, Origin, Restored, Status, StoreError,
};
use crate::time::rfc3339;

/// The `v` of every line this version writes.
pub const FORMAT: u32 = 1;

/// One archived event, as one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The line format's version.
    pub v: u32,
    /// The event's id in the database it was pruned from (ids are not reused on replay).
    pub id: i64,
    pub endpoint: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    /// RFC 3339, UTC; `received_at_ms` is the same instant in unix milliseconds.
    pub received_at: String,
    pub received_at_ms: i64,
    /// `delivered`, `stored` or `dead`: how the event ended.
    pub status: String,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// The object it was about, if any (absent in lines written before it was stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_id: Option<String>,
    /// The id the provider signed apart from the body, if any (absent in lines written
    /// before it was stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_id: Option<String>,
    /// Whether the event type came from signed bytes; absent without a type, and in lines
    /// written before it was stored (a replayed event's targets then hear 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type_signed: Option<bool>,
    /// `reconcile` for an event a reconcile run took from the gateway's API; absent for a
    /// webhook (and in lines written before it was stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Verify by fetching: `fetched` or `rejected_by_fetch`; absent when the event was not
    /// fetched (and in lines written before it was archived). `fetched` is the object the
    /// API answered, `fetch_error` why it was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_error: Option<String>,
    pub attempt_log: Vec<AttemptLine>,
    /// When it was pruned (RFC 3339, UTC).
    pub pruned_at: String,
    pub headers: String,
    pub headers_encoding: Encoding,
    pub body: String,
    pub body_encoding: Encoding,
}

/// One delivery attempt of an archived event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLine {
    pub attempt: u32,
    pub started_at: String,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// `delivered`, `failed` or `interrupted`.
    pub outcome: String,
    pub error: Option<String>,
    /// The route it was for (lines from before routes: the shorthand's).
    #[serde(default = "shorthand_route")]
    pub route: String,
}

fn shorthand_route() -> String {
    crate::config::SHORTHAND_ROUTE.to_string()
}

/// How a byte field is written: as is when it is UTF-8, else standard base64 (with padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Utf8,
    Base64,
}

fn encode(bytes: &[u8]) -> (String, Encoding) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), Encoding::Utf8),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(bytes),
            Encoding::Base64,
        ),
    }
}

fn decode(text: String, encoding: Encoding) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Utf8 => Ok(text.into_bytes()),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("bad base64: {e}")),
    }
}

impl Line {
    pub fn new(event: &EventDetail, pruned_at_ms: i64) -> Line {
        let s = &event.summary;
        let (headers, headers_encoding) = encode(&event.headers);
        let (body, body_encoding) = encode(&event.body);
        let (fetched, fetch_error) = match &event.fetched {
            Some(Fetched::Object(text)) => (serde_json::from_str(text).ok(), None),
            Some(Fetched::Rejected(why)) => (None, Some(why.clone())),
            None => (None, None),
        };
        Line {
            v: FORMAT,
            id: s.id,
            endpoint: s.endpoint.clone(),
            dedup_key: s.dedup_key.clone(),
            event_type: s.event_type.clone(),
            content_type: event.content_type.clone(),
            received_at: rfc3339(s.received_at_ms),
            received_at_ms: s.received_at_ms,
            status: s.status.as_str().to_string(),
            attempts: s.attempts,
            last_error: s.last_error.clone(),
            object_id: s.object_id.clone(),
            signed_id: event.signed_id.clone(),
            event_type_signed: event.event_type_signed,
            origin: s.origin.column().map(str::to_string),
            fetch: event.fetched.as_ref().map(|f| f.state().to_string()),
            fetched,
            fetch_error,
            attempt_log: event
                .attempts
                .iter()
                .map(|a| AttemptLine {
                    attempt: a.attempt,
                    started_at: rfc3339(a.started_at_ms),
                    started_at_ms: a.started_at_ms,
                    duration_ms: a.duration_ms,
                    outcome: a.outcome.clone(),
                    error: a.error.clone(),
                    route: a.route.clone(),
                })
                .collect(),
            pruned_at: rfc3339(pruned_at_ms),
            headers,
            headers_encoding,
            body,
            body_encoding,
        }
    }

    /// The event as it was when pruned, raw headers and body decoded.
    pub fn into_event(self) -> Result<EventDetail, String> {
        if self.v != FORMAT {
            return Err(format!(
                "line format v{} is not known to this portaria (v{FORMAT})",
                self.v
            ));
        }
        let status: Status = self.status.parse()?;
        Ok(EventDetail {
            summary: EventSummary {
                id: self.id,
                endpoint: self.endpoint,
                dedup_key: self.dedup_key,
                event_type: self.event_type,
                received_at_ms: self.received_at_ms,
                status,
                attempts: self.attempts,
                next_attempt_at_ms: None,
                last_error: self.last_error,
                object_id: self.object_id,
                origin: Origin::from_column(self.origin.as_deref()),
            },
            content_type: self.content_type,
            headers: decode(self.headers, self.headers_encoding)
                .map_err(|e| format!("headers: {e}"))?,
            body: decode(self.body, self.body_encoding).map_err(|e| format!("body: {e}"))?,
            signed_id: self.signed_id,
            event_type_signed: self.event_type_signed,
            fetched: match (self.fetched, self.fetch_error) {
                (Some(object), _) => Some(Fetched::Object(object.to_string())),
                (None, why) => why.map(Fetched::Rejected),
            },
            routes: Vec::new(),
            attempts: self
                .attempt_log
                .into_iter()
                .map(|a| Attempt {
                    attempt: a.attempt,
                    started_at_ms: a.started_at_ms,
                    duration_ms: a.duration_ms,
                    outcome: a.outcome,
                    error: a.error,
                    route: a.route,
                })
                .collect(),
        })
    }
}

/// The day's file for events pruned at `now_ms`.
pub fn file_for(dir: &Path, now_ms: i64) -> PathBuf {
    let date = &rfc3339(now_ms)[..10];
    dir.join(format!("{date}.jsonl.gz"))
}

/// Appends `events` to the day's file in `dir` (creating both if needed) as one gzip member,
/// and returns only once the file is fsynced: then, and only then, may their rows be deleted.
/// On failure the file is cut back to its length before this batch.
pub fn append(dir: &Path, events: &[EventDetail], now_ms: i64) -> io::Result<PathBuf> {
    let path = file_for(dir, now_ms);
    let context = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
    };
    // Compress in memory first, so the file sees one write per batch.
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    for event in events {
        serde_json::to_writer(&mut gz, &Line::new(event, now_ms))?;
        gz.write_all(b"\n")?;
    }
    let member = gz.finish()?;

    let new_dir = !dir.exists();
    // Private whatever the umask: the archive holds every payload.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| context("create the directory of", e))?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| context("open", e))?;
    let before = file.metadata().map_err(|e| context("read", e))?.len();
    if before == 0 {
        // Exactly 0600: a umask may also have taken the owner's bits.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| context("set the mode of", e))?;
    }
    let written = file
        .write_all(&member)
        .and_then(|()| file.sync_all())
        // An empty file may be new (or left empty by a failed first batch): its name must
        // survive a crash too, and so must a new directory's. Decided by the length, not by
        // whether the file existed, so a retry after a failure still syncs them.
        .and_then(|()| if before == 0 { sync_dir(dir) } else { Ok(()) })
        .and_then(|()| match dir.parent().filter(|_| new_dir) {
            Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
            _ => Ok(()),
        });
    if let Err(e) = written {
        // Leave no half member behind: a reader could not get past it to later batches, and
        // the rows are not deleted, so the next pass writes this batch again.
        let _ = file.set_len(before).and_then(|()| file.sync_all());
        return Err(context("write", e));
    }
    Ok(path)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_: &Path) -> io::Result<()> {
    Ok(())
}

/// Reads an archive file line by line (every gzip member in turn). Each item is a line or
/// why it could not be read, with its line number.
pub fn read(path: &Path) -> io::Result<impl Iterator<Item = Result<Line, String>>> {
    let file = File::open(path)?;
    let lines = BufReader::new(MultiGzDecoder::new(BufReader::new(file))).lines();
    Ok(lines.enumerate().map(|(i, line)| {
        let n = i + 1;
        let line = line.map_err(|e| format!("line {n}: cannot read: {e}"))?;
        serde_json::from_str(&line).map_err(|e| format!("line {n}: not an archived event: {e}"))
    }))
}

/// Events restored per transaction: each is short, so a running server's writes wait little.
const RESTORE_BATCH: usize = 500;

/// What `archive replay` did.
#[derive(Debug, Default)]
pub struct Replayed {
    pub restored: Restored,
    /// Lines of other endpoints than the one asked for.
    pub other_endpoints: usize,
    /// By endpoint: events left out because that endpoint is not configured or does not
    /// forward (there would be nothing to deliver them to).
    pub skipped: BTreeMap<String, usize>,
}

impl Replayed {
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let r = &self.restored;
        let pending = r.inserted + r.reset;
        let note = if pending > 0 {
            "; a running server delivers them within seconds"
        } else {
            ""
        };
        writeln!(
            out,
            "{pending} event(s) pending again ({} new, {} reset){note}",
            r.inserted, r.reset
        )?;
        if r.already_queued > 0 {
            writeln!(
                out,
                "{} already pending or being delivered: left alone",
                r.already_queued
            )?;
        }
        for (endpoint, n) in &self.skipped {
            writeln!(
                out,
                "{n} skipped: endpoint `{endpoint}` is not configured or does not forward"
            )?;
        }
        Ok(())
    }
}

/// Where each event goes now: the routes of its endpoint that take its type.
pub type Routes<'a> = dyn Fn(&EventDetail) -> Vec<NewDelivery> + 'a;

/// Reads `path` and restores its events (of `only`, if given) through `restore`, which takes
/// a batch and where each of its events goes now (`Store::restore`, due
/// now). Stops at the first line it cannot read; the events before it stay restored, and
/// the error says how many.
pub fn replay(
    path: &Path,
    config: &Config,
    only: Option<&str>,
    mut restore: impl FnMut(Vec<EventDetail>, &Routes) -> Result<Restored, StoreError>,
) -> Result<Replayed, String> {
    let lines = read(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut out = Replayed::default();
    let mut batch = Vec::with_capacity(RESTORE_BATCH);
    let routes = |e: &EventDetail| -> Vec<NewDelivery> {
        let Some(endpoint) = config.endpoint(&e.summary.endpoint) else {
            return Vec::new();
        };
        let headers = crate::config::headers_from_blob(&e.headers);
        endpoint
            .deliveries_for(e.summary.event_type.as_deref(), &headers, &e.body)
            .into_iter()
            .map(|(route, order_key)| NewDelivery { route, order_key })
            .collect()
    };
    let mut flush = |batch: &mut Vec<EventDetail>, out: &mut Replayed| {
        let r = restore(std::mem::take(batch), &routes)
            .map_err(|e| format!("cannot restore events: {e}"))?;
        out.restored.inserted += r.inserted;
        out.restored.reset += r.reset;
        out.restored.already_queued += r.already_queued;
        Ok::<_, String>(())
    };
    for line in lines {
        let event = match line.and_then(Line::into_event) {
            Ok(event) => event,
            Err(e) => {
                flush(&mut batch, &mut out)?;
                let done = out.restored.inserted + out.restored.reset;
                return Err(format!(
                    "{}: {e} ({done} event(s) before it are pending again)",
                    path.display()
                ));
            }
        };
        let endpoint = &event.summary.endpoint;
        if only.is_some_and(|name| name != endpoint) {
            out.other_endpoints += 1;
            continue;
        }
        if config.endpoint(endpoint).is_none_or(|e| !e.forwards()) {
            *out.skipped.entry(endpoint.clone()).or_default() += 1;
            continue;
        }
        batch.push(event);
        if batch.len() == RESTORE_BATCH {
            flush(&mut batch, &mut out)?;
        }
    }
    flush(&mut batch, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, body: &[u8]) -> EventDetail {
        EventDetail {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id,
                endpoint: "pagarme".into(),
                dedup_key: format!("key-{id}"),
                event_type: Some("charge.paid".into()),
                received_at_ms: 1_796_026_524_000,
                status: Status::Dead,
                attempts: 2,
                next_attempt_at_ms: None,
                last_error: Some("exit status 7".into()),
                object_id: None,
            },
            content_type: Some("application/json".into()),
            headers: b"content-type: application/json\r\nx-hub-signature: sha256=ab\r\n".to_vec(),
            body: body.to_vec(),
            attempts: vec![Attempt {
                attempt: 1,
                started_at_ms: 1_796_026_525_000,
                duration_ms: 12,
                outcome: "failed".into(),
                error: Some("exit status 7".into()),
                route: "default".into(),
            }],
            routes: Vec::new(),
            signed_id: Some("123456".into()),
            event_type_signed: Some(false),
            fetched: None,
        }
    }

    #[test]
    fn text_stays_text_and_other_bytes_become_base64() {
        let line = Line::new(&event(1, b"{\"id\":1}"), 0);
        assert_eq!(line.body, "{\"id\":1}");
        assert_eq!(line.body_encoding, Encoding::Utf8);
        assert_eq!(line.headers_encoding, Encoding::Utf8);
        let json = serde_json::to_string(&line).unwrap();
        assert!(json.contains("\"body_encoding\":\"utf8\""), "{json}");

        let binary = [0xff, 0x00, 0xfe, b'a'];
        let line = Line::new(&event(2, &binary), 0);
        assert_eq!(line.body_encoding, Encoding::Base64);
        assert_eq!(line.body, "/wD+YQ==");
        assert_eq!(line.into_event().unwrap().body, binary);
    }

    #[test]
    fn a_line_round_trips_to_the_same_event() {
        let original = event(7, "olá, mundo".as_bytes());
        let line = Line::new(&original, 1_796_100_000_000);
        assert_eq!(line.received_at, "2026-11-30T08:15:24.000Z");
        assert_eq!(line.pruned_at, "2026-12-01T04:40:00.000Z");
        let back = line.into_event().unwrap();
        assert_eq!(back.summary, original.summary);
        assert_eq!(back.headers, original.headers);
        assert_eq!(back.body, original.body);
        assert_eq!(back.attempts, original.attempts);
        assert_eq!(back.signed_id.as_deref(), Some("123456"));
        assert_eq!(back.event_type_signed, Some(false));
    }

    #[test]
    fn a_line_from_before_the_signed_facts_reads_as_unknown() {
        let mut json = serde_json::to_value(Line::new(&event(7, b"{}"), 0)).unwrap();
        assert_eq!(json["signed_id"], "123456");
        assert_eq!(json["event_type_signed"], false);
        let old = json.as_object_mut().unwrap();
        old.remove("signed_id");
        old.remove("event_type_signed");
        assert!(old.get("fetch").is_none(), "not fetched: no field");
        let back: Line = serde_json::from_value(json).unwrap();
        let back = back.into_event().unwrap();
        assert_eq!((back.signed_id, back.event_type_signed), (None, None));
        assert_eq!(back.fetched, None);
    }

    #[test]
    fn what_fetching_got_is_archived_as_json_and_read_back() {
        let mut e = event(7, b"{}");
        let object = r#"{"id":59,"status":"approved"}"#;
        e.fetched = Some(Fetched::Object(object.into()));
        let json = serde_json::to_value(Line::new(&e, 0)).unwrap();
        assert_eq!(json["fetch"], "fetched");
        assert_eq!(json["fetched"]["id"], 59, "an object, not a string: {json}");
        let back: Line = serde_json::from_value(json).unwrap();
        assert_eq!(
            back.into_event().unwrap().fetched,
            e.fetched,
            "the same text"
        );

        e.fetched = Some(Fetched::Rejected("no such payment".into()));
        let json = serde_json::to_value(Line::new(&e, 0)).unwrap();
        assert_eq!(json["fetch"], "rejected_by_fetch");
        assert_eq!(json["fetch_error"], "no such payment");
        let back: Line = serde_json::from_value(json).unwrap();
        assert_eq!(back.into_event().unwrap().fetched, e.fetched);
    }

    #[test]
    fn batches_append_gzip_members_to_one_daily_file() {
        let dir = tempfile::tempdir().unwrap();
        let day = 1_796_026_524_000; // 2026-11-30
        let first = append(dir.path(), &[event(1, b"a"), event(2, b"b")], day).unwrap();
        let second = append(dir.path(), &[event(3, b"c")], day + 3_600_000).unwrap();
        assert_eq!(first, second);
        assert_eq!(first, dir.path().join("2026-11-30.jsonl.gz"));
        let next_day = append(dir.path(), &[event(4, b"d")], day + 86_400_000).unwrap();
        assert_eq!(next_day, dir.path().join("2026-12-01.jsonl.gz"));

        let ids: Vec<i64> = read(&first).unwrap().map(|l| l.unwrap().id).collect();
        assert_eq!(ids, [1, 2, 3], "every member is read, in order");
        // Two members really are two gzip streams: a single-member reader stops after one.
        let single = flate2::read::GzDecoder::new(File::open(&first).unwrap());
        assert_eq!(BufReader::new(single).lines().count(), 2);
    }

    #[test]
    fn a_line_of_an_unknown_format_is_refused() {
        let mut line = Line::new(&event(1, b"x"), 0);
        line.v = 99;
        assert!(line.into_event().unwrap_err().contains("v99"));
    }
}
