//! `portaria events export`'s reads: the events a [`ListFilter`] picks, oldest first, a page
//! at a time ([`Store::export_page`]), each page starting after the last row of the one
//! before, so an export of a million events holds one page, never the lot. One endpoint's
//! come along its `events_endpoint` index (received time, then id); any endpoint's by id
//! (the two orders differ only for events put back by `archive replay`, which get new ids).

use super::EventSummary;
use super::events::{Arg, Dialect, ListFilter, SUMMARY, Sql};

/// One exported event: its summary, and its body (decoded) when asked for.
#[derive(Debug, Clone)]
pub struct Exported {
    pub summary: EventSummary,
    pub body: Option<Vec<u8>>,
}

/// Where a page ended: the last row's received time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportCursor {
    pub received_at_ms: i64,
    pub id: i64,
}

impl ExportCursor {
    pub fn of(e: &EventSummary) -> ExportCursor {
        ExportCursor {
            received_at_ms: e.received_at_ms,
            id: e.id,
        }
    }
}

/// The page's statement in `dialect`: [`SUMMARY`]'s columns, then the body's if `bodies`.
pub(super) fn export_query(
    f: &ListFilter,
    after: Option<ExportCursor>,
    limit: usize,
    bodies: bool,
    dialect: &Dialect,
) -> (String, Vec<Arg>) {
    let (columns, join) = match bodies {
        true => (
            format!("{SUMMARY}, {}", dialect.body),
            " JOIN payloads ON payloads.event_id = events.id",
        ),
        false => (SUMMARY.to_string(), ""),
    };
    let mut q = Sql::new(
        format!("SELECT {columns} FROM events{join} WHERE true"),
        dialect,
    );
    q.filter(f);
    let by_endpoint = f.endpoint.is_some();
    if let Some(c) = after {
        match by_endpoint {
            true => q.and(
                "(events.received_at, events.id) > (?, ?)",
                [Arg::Int(c.received_at_ms), Arg::Int(c.id)],
            ),
            false => q.and("events.id > ?", [Arg::Int(c.id)]),
        }
    }
    q.sql.push_str(match by_endpoint {
        true => " ORDER BY events.received_at, events.id",
        false => " ORDER BY events.id",
    });
    q.limit(limit);
    (q.sql, q.args)
}
