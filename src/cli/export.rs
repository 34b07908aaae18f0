//! `portaria events export`: the events the filters pick, oldest first, one line each, for a
//! spreadsheet or a script: CSV (RFC 4180: CRLF lines, a field with a comma, a quote or a line
//! break quoted and its quotes doubled; UTF-8, with a byte order mark for Excel if asked) or
//! JSON lines. Each line has the event's id, received time (UTC, and the local zone with its
//! offset), endpoint, type, object id, status and dedup key, then the columns the endpoints
//! name in `export_fields`, read from the body by JSON pointer (`ingest::read_pointer`, the
//! reader of `event_type = "json:..."`). It streams: the store is read a page at a time and
//! each page written before the next is read, so memory holds one page however many events.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use serde_json::{Map, Value};

use super::database::Opened;
use super::filters::Filters;
use crate::config::{Config, EXPORT_COLUMNS};
use crate::store::{ExportCursor, Exported};
use crate::time::{rfc3339, rfc3339_local};

/// Events read from the store at a time: what the export holds in memory.
const PAGE: usize = 500;

#[derive(Args, Debug)]
pub(super) struct ExportArgs {
    #[command(flatten)]
    filters: Filters,
    /// `csv` (for a spreadsheet) or `jsonl` (one JSON object per line).
    #[arg(long, value_enum)]
    format: Format,
    /// Write to FILE (created with mode 0600) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Start the CSV with a UTF-8 byte order mark, so that Excel reads its accents right.
    #[arg(long)]
    bom: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Csv,
    Jsonl,
}

/// Runs `events export`; returns how many events it wrote.
pub(super) fn run(config: &Config, db: &Opened, args: ExportArgs) -> Result<usize, String> {
    let filter = args.filters.checked(config, db)?;
    // The endpoints' own columns: of the one asked for, else of every endpoint, by name.
    let mut fields: Vec<&str> = config
        .endpoints
        .iter()
        .filter(|e| filter.endpoint.as_ref().is_none_or(|name| *name == e.name))
        .flat_map(|e| e.export_fields.iter().map(|(name, _)| name.as_str()))
        .collect();
    fields.sort_unstable();
    fields.dedup();
    let sink: Box<dyn Write> = match &args.output {
        Some(path) => {
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Box::new(file)
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::new(sink);
    let csv = args.format == Format::Csv;
    // A reader that went away (`| head`) ends the export quietly, as in `events list`: an
    // empty error, which `run` answers as done.
    let write_error = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::BrokenPipe => String::new(),
        _ => format!("cannot write the export: {e}"),
    };
    if csv {
        if args.bom {
            out.write_all("\u{feff}".as_bytes()).map_err(write_error)?;
        }
        let header = EXPORT_COLUMNS.iter().chain(&fields).map(|h| Some(*h));
        csv_line(&mut out, header).map_err(write_error)?;
    }
    let bodies = !fields.is_empty();
    let pages = |after| {
        db.block_on(db.store.export_page(&filter, after, PAGE, bodies))
            .map_err(|e| format!("cannot read the events: {e}"))
    };
    let streamed = stream(pages, PAGE, |e| {
        let values = line(config, &fields, e);
        if csv {
            csv_line(&mut out, values.iter().map(|(_, v)| v.as_deref()))
        } else {
            jsonl_line(&mut out, e.summary.id, &values)
        }
        .map_err(write_error)
    })
    .and_then(|n| out.flush().map(|()| n).map_err(write_error));
    match streamed {
        Err(e) if e.is_empty() => Ok(0),
        other => other,
    }
}

/// Writes every row of every page `next_page` gives (from after the last row of the one
/// before), each page before the next is asked for, until a page comes back short; how many.
fn stream<P, W>(mut next_page: P, page: usize, mut write_row: W) -> Result<usize, String>
where
    P: FnMut(Option<ExportCursor>) -> Result<Vec<Exported>, String>,
    W: FnMut(&Exported) -> Result<(), String>,
{
    let (mut after, mut written) = (None, 0);
    loop {
        let rows = next_page(after)?;
        for row in &rows {
            write_row(row)?;
        }
        written += rows.len();
        match rows.last() {
            Some(last) if rows.len() >= page => after = Some(ExportCursor::of(&last.summary)),
            _ => return Ok(written),
        }
    }
}

/// One event's columns, in order, as (name, text); None where it has no value.
fn line<'a>(config: &Config, fields: &[&'a str], e: &Exported) -> Vec<(&'a str, Option<String>)> {
    let s = &e.summary;
    let fixed = [
        Some(s.id.to_string()),
        Some(rfc3339(s.received_at_ms)),
        Some(rfc3339_local(s.received_at_ms)),
        Some(s.endpoint.clone()),
        s.event_type.clone(),
        s.object_id.clone(),
        Some(s.status.as_str().to_string()),
        Some(s.dedup_key.clone()),
    ];
    let own = config.endpoint(&s.endpoint).map(|e| &e.export_fields);
    let body = e.body.as_deref().unwrap_or_default();
    let read = |name: &str| {
        let (_, pointer) = own?.iter().find(|(n, _)| n == name)?;
        crate::ingest::read_pointer(pointer, body)
    };
    EXPORT_COLUMNS
        .iter()
        .copied()
        .zip(fixed)
        .chain(fields.iter().map(|name| (*name, read(name))))
        .collect()
}

/// One CSV line (RFC 4180), CRLF-ended. A text a spreadsheet would run as a formula (`=`,
/// `+`, `-`, `@` first, and not a number) gets a `'` before it: an event's fields are the
/// sender's text.
fn csv_line<'a>(
    out: &mut impl Write,
    values: impl Iterator<Item = Option<&'a str>>,
) -> std::io::Result<()> {
    for (i, value) in values.enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let value = value.unwrap_or_default();
        let formula =
            value.starts_with(['=', '+', '-', '@', '\t', '\r']) && value.parse::<f64>().is_err();
        let quote = formula || value.contains([',', '"', '\r', '\n']);
        if quote {
            out.write_all(if formula { b"\"'" } else { b"\"" })?;
            out.write_all(value.replace('"', "\"\"").as_bytes())?;
            out.write_all(b"\"")?;
        } else {
            out.write_all(value.as_bytes())?;
        }
    }
    out.write_all(b"\r\n")
}

/// One JSON object: the id a number, a missing value null.
fn jsonl_line(
    out: &mut impl Write,
    id: i64,
    values: &[(&str, Option<String>)],
) -> std::io::Result<()> {
    let mut object: Map<String, Value> = values
        .iter()
        .map(|(name, v)| {
            (
                name.to_string(),
                v.clone().map_or(Value::Null, Value::String),
            )
        })
        .collect();
    object.insert("id".into(), id.into());
    // Through `Value`'s Display, which `events list --json` links already: `to_writer` here
    // would build a second copy of the serializer for this writer.
    writeln!(out, "{}", Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EventSummary, Status};

    fn event(id: i64) -> Exported {
        Exported {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id,
                endpoint: "shop".into(),
                dedup_key: format!("k{id}"),
                event_type: None,
                received_at_ms: id,
                status: Status::Stored,
                attempts: 0,
                next_attempt_at_ms: None,
                last_error: None,
                object_id: None,
            },
            body: None,
        }
    }

    /// Each page is written before the next is read, from where it ended: what is held is
    /// one page, whatever the total.
    #[test]
    fn pages_are_written_as_they_come() {
        let total = 10;
        let written = std::cell::Cell::new(0);
        let mut asked = Vec::new();
        let pages = |after: Option<ExportCursor>| {
            asked.push((after.map(|c| c.id), written.get()));
            let from = after.map_or(1, |c| c.id + 1);
            Ok((from..=total.min(from + 2)).map(event).collect())
        };
        let n = stream(pages, 3, |_| {
            written.set(written.get() + 1);
            Ok(())
        });
        assert_eq!(n, Ok(10));
        assert_eq!(
            asked,
            [(None, 0), (Some(3), 3), (Some(6), 6), (Some(9), 9)],
            "each page asked for once the one before it was written"
        );
    }

    #[test]
    fn csv_quotes_what_rfc_4180_says_and_defuses_formulas() {
        let mut out = Vec::new();
        let fields = [
            Some("plain"),
            None,
            Some("a,b"),
            Some("say \"hi\""),
            Some("two\nlines"),
            Some("=HYPERLINK(\"x\")"),
            Some("-12.5"),
            Some("João"),
        ];
        csv_line(&mut out, fields.into_iter()).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "plain,,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\"'=HYPERLINK(\"\"x\"\")\",-12.5,João\r\n"
        );
    }
}
