//! `portaria events list/show/replay` (`rejected`: `rejected.rs`): looks at the stored events (read-only) and puts them
//! back into the queue, and owns their output: the table, one JSON object per line (the
//! store's one shape, `store::summary_json`/`detail_json`, as the status page's API), the
//! detail view of one event and its raw request. It speaks to the configured
//! [`crate::store::Store`] (`database.rs` opens it), whatever its engine: the output is the
//! same. An endpoint or route name that matches nothing configured is an error naming the
//! closest, never an empty result.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::database::{Access, Opened};
use super::filters::{CONFIRM_ABOVE, confirmed};
use super::{EventsCommand, existing_store};
use crate::config::Config;
use crate::store::{
    EventDetail, EventSummary, Fetched, ListFilter, Origin, RoutePause, RouteState, Status,
    detail_json, summary_json,
};
use crate::time::{now_ms, rfc3339};

/// Runs `events list`, `events show` or `events replay`.
pub(super) fn run(config: Option<&Path>, command: EventsCommand) -> Result<ExitCode, String> {
    let config = existing_store(config)?;
    // Looking needs no write access; only a replay opens the database for writing.
    let access = match &command {
        EventsCommand::Replay(_) => Access::Write,
        _ => Access::Read,
    };
    let db = Opened::open(&config, access)?;
    let result = run_on(&config, &db, command);
    db.close();
    result
}

fn run_on(config: &Config, db: &Opened, command: EventsCommand) -> Result<ExitCode, String> {
    let store = &db.store;
    let out = std::io::stdout();
    let mut out = out.lock();
    let now = now_ms();
    let written = match command {
        EventsCommand::List(args) => {
            let filter = ListFilter {
                limit: args.limit,
                ..args.filters.checked(config, db)?
            };
            let events = db
                .block_on(store.list_events(filter))
                .map_err(|e| format!("cannot list events: {e}"))?;
            // Paused routes: their events wait for that, not for a failing target.
            let pauses = db
                .block_on(store.route_pauses(now))
                .map_err(|e| format!("cannot read paused routes: {e}"))?;
            closed_pipe_is_done(if args.json {
                let routes = events
                    .iter()
                    .map(|e| db.block_on(store.event_routes(e.id)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("cannot list events: {e}"))?;
                write_json(&mut out, &events, &routes, &pauses)
            } else {
                write_pauses(&mut out, &pauses).and_then(|()| write_table(&mut out, &events))
            })
        }
        EventsCommand::Rejected {
            endpoint,
            limit,
            json,
        } => return super::rejected::list(config, db, endpoint.as_deref(), limit, json),
        EventsCommand::Export(args) => {
            let n = super::export::run(config, db, args);
            return n.map(|_| ExitCode::SUCCESS);
        }
        EventsCommand::Show { id, raw, json } => match db
            .block_on(store.event_detail(id))
            .map_err(|e| format!("cannot read event {id}: {e}"))?
        {
            Some(event) if raw => {
                // An endpoint no longer in the config still has its request shown.
                let path = config
                    .endpoint(&event.summary.endpoint)
                    .map_or("/", |e| e.path.as_str());
                closed_pipe_is_done(write_raw(&mut out, path, &event))
            }
            Some(event) if json => closed_pipe_is_done(writeln!(out, "{}", detail_json(&event))),
            Some(event) => {
                let cert = db
                    .block_on(store.client_cert(id))
                    .map_err(|e| format!("cannot read event {id}: {e}"))?;
                closed_pipe_is_done(write_detail(&mut out, &event, cert.as_deref()))
            }
            None => return Err(format!("no event {id}")),
        },
        EventsCommand::Replay(args) => {
            if let Some(id) = args.id {
                if let Some(route) = &args.filters.route {
                    route_of_event(db, id, route)?;
                }
                if !db
                    .block_on(store.replay_route(id, args.filters.route.clone(), now))
                    .map_err(|e| format!("cannot replay event {id}: {e}"))?
                {
                    let which = match &args.filters.route {
                        Some(route) => format!(", it never went to route `{route}`"),
                        None => String::new(),
                    };
                    return Err(format!(
                        "cannot replay event {id}: no such event, it is being delivered right now{which}, \
                         or no route took it"
                    ));
                }
                let to = match &args.filters.route {
                    Some(route) => format!(" for route `{route}`"),
                    None => String::new(),
                };
                writeln!(
                    out,
                    "event {id} is pending again{to}; the running server delivers it within seconds"
                )
            } else {
                let mut filter = args.filters.checked(config, db)?;
                if args.dead {
                    filter.status = Some(Status::Dead);
                }
                let dead = if filter.status == Some(Status::Dead) {
                    "dead "
                } else {
                    ""
                };
                let n = db
                    .block_on(store.replay_matching(filter.clone(), None))
                    .map_err(|e| format!("cannot count the events to replay: {e}"))?;
                // Above the threshold, the count is said before anything changes.
                if n > CONFIRM_ABOVE {
                    writeln!(out, "{n} {dead}event(s) to replay")
                        .and_then(|()| out.flush())
                        .map_err(|e| format!("cannot write the output: {e}"))?;
                }
                confirmed(n, args.yes)?;
                let n = db
                    .block_on(store.replay_matching(filter, Some(now)))
                    .map_err(|e| format!("cannot replay {dead}events: {e}"))?;
                writeln!(out, "{n} {dead}event(s) pending again")
            }
        }
    };
    written.map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// A route given to `replay ID --route`: one the event went to; else an error naming them.
/// No such event is the replay's own error.
fn route_of_event(db: &Opened, id: i64, route: &str) -> Result<(), String> {
    let routes = db
        .block_on(db.store.event_routes(id))
        .map_err(|e| format!("cannot read event {id}: {e}"))?;
    let names = || routes.iter().map(|r| r.route.as_str());
    if routes.is_empty() || names().any(|name| name == route) {
        return Ok(());
    }
    Err(format!(
        "cannot replay event {id}: it never went to route `{route}` (its routes: {}){}",
        crate::suggest::list(names()),
        crate::suggest::hint(route, names())
    ))
}

/// A listing whose reader went away (`portaria events list | head -1`) is done, not failed: as
/// in ripgrep, stop writing and exit 0 with nothing on stderr. Rust ignores SIGPIPE, so a closed
/// stdout shows up here as a `BrokenPipe` write error.
fn closed_pipe_is_done(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `paused: pagarme/erp since ... [until ...] (reason)`, one line per paused route.
fn write_pauses(out: &mut impl Write, pauses: &[RoutePause]) -> std::io::Result<()> {
    for p in pauses {
        let until = p
            .until_ms
            .map_or(String::new(), |at| format!(" until {}", rfc3339(at)));
        let reason = p
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" ({r})"));
        let since = rfc3339(p.paused_at_ms);
        writeln!(
            out,
            "paused: {}/{} since {since}{until}{reason}",
            p.endpoint, p.route
        )?;
    }
    Ok(())
}

fn write_table(out: &mut impl Write, events: &[EventSummary]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>7}  {:<24}  {:<14}  {:<10}  {:>3}  {:<24}  DEDUP KEY",
        "ID", "RECEIVED (UTC)", "ENDPOINT", "STATUS", "TRY", "TYPE"
    )?;
    for e in events {
        // Last, so the columns a script cuts stay where they were.
        let origin = match e.origin {
            Origin::Webhook => "",
            Origin::Reconcile => "  (reconcile)",
        };
        writeln!(
            out,
            "{:>7}  {:<24}  {:<14}  {:<10}  {:>3}  {:<24}  {}{origin}",
            e.id,
            rfc3339(e.received_at_ms),
            e.endpoint,
            e.status,
            e.attempts,
            e.event_type.as_deref().unwrap_or("-"),
            e.dedup_key
        )?;
    }
    Ok(())
}

/// Each delivery says whether its route is `paused` (as the table's `paused:` lines do).
fn write_json(
    out: &mut impl Write,
    events: &[EventSummary],
    routes: &[Vec<RouteState>],
    pauses: &[RoutePause],
) -> std::io::Result<()> {
    for (e, routes) in events.iter().zip(routes) {
        let mut v = summary_json(e, Some(routes));
        if let Some(listed) = v["routes"].as_array_mut() {
            for (json, r) in listed.iter_mut().zip(routes) {
                let paused = pauses
                    .iter()
                    .any(|p| p.endpoint == e.endpoint && p.route == r.route);
                json["paused"] = paused.into();
            }
        }
        writeln!(out, "{v}")?;
    }
    Ok(())
}

/// `client_cert`: the verified client certificate's names, for an event that came over
/// mutual TLS.
fn write_detail(
    out: &mut impl Write,
    event: &EventDetail,
    client_cert: Option<&str>,
) -> std::io::Result<()> {
    let e = &event.summary;
    writeln!(out, "id:          {}", e.id)?;
    writeln!(out, "endpoint:    {}", e.endpoint)?;
    writeln!(out, "dedup key:   {}", e.dedup_key)?;
    if let Some(object) = &e.object_id {
        writeln!(out, "object id:   {object}")?;
    }
    // A type read from an unsigned header or body (or stored before portaria kept where it
    // came from) is said to be one; a reconciled event's came from the gateway's API.
    let unsigned = match (&e.event_type, event.event_type_signed, e.origin) {
        (None, ..) => "",
        (Some(_), _, Origin::Reconcile) => " (from the gateway's API)",
        (Some(_), Some(true), _) => "",
        (Some(_), ..) => " (not covered by the signature)",
    };
    writeln!(
        out,
        "event type:  {}{unsigned}",
        e.event_type.as_deref().unwrap_or("-")
    )?;
    if let Some(id) = &event.signed_id {
        writeln!(out, "signed id:   {id}")?;
    }
    if e.origin == Origin::Reconcile {
        writeln!(
            out,
            "origin:      reconcile (its webhook never arrived; taken from the gateway's API)"
        )?;
    }
    match &event.fetched {
        Some(Fetched::Object(object)) => writeln!(out, "fetched:     {object}")?,
        Some(Fetched::Rejected(why)) => writeln!(out, "fetch:       rejected_by_fetch: {why}")?,
        None => {}
    }
    writeln!(out, "received at: {}", rfc3339(e.received_at_ms))?;
    writeln!(out, "status:      {}", e.status)?;
    writeln!(out, "attempts:    {}", e.attempts)?;
    if let Some(cert) = client_cert {
        writeln!(out, "client cert: {cert}")?;
    }
    if let Some(next) = e.next_attempt_at_ms.filter(|_| e.status == Status::Pending) {
        writeln!(out, "next try:    {}", rfc3339(next))?;
    }
    for r in &event.routes {
        let next = r
            .next_attempt_at_ms
            .filter(|_| r.status == Status::Pending)
            .map(|at| format!(", next try {}", rfc3339(at)))
            .unwrap_or_default();
        let key = r
            .order_key
            .as_deref()
            .map(|k| format!(", order key {k}"))
            .unwrap_or_default();
        let error = r
            .last_error
            .as_deref()
            .map(|err| format!(": {err}"))
            .unwrap_or_default();
        writeln!(
            out,
            "route {}: {}, {} attempt(s){next}{key}{error}",
            r.route, r.status, r.attempts
        )?;
    }
    for a in &event.attempts {
        writeln!(
            out,
            "  attempt {} ({}) at {} ({} ms): {}{}",
            a.attempt,
            a.route,
            rfc3339(a.started_at_ms),
            a.duration_ms,
            a.outcome,
            a.error
                .as_deref()
                .map(|err| format!(": {err}"))
                .unwrap_or_default()
        )?;
    }
    writeln!(out, "\n--- headers ---")?;
    out.write_all(&event.headers)?;
    writeln!(out, "--- body ({} bytes) ---", event.body.len())?;
    out.write_all(&event.body)?;
    writeln!(out)
}

/// The stored request as a raw HTTP/1.1 request, for `portaria verify --request -`: the
/// endpoint's path, the headers as stored (credentials already redacted), a blank line, the
/// body. The stored body is decoded, so a `transfer-encoding` header is left out, and a
/// `content-length` is added if the stored headers have none: the output is a valid request.
fn write_raw(out: &mut impl Write, path: &str, event: &EventDetail) -> std::io::Result<()> {
    write!(out, "POST {path} HTTP/1.1\r\n")?;
    let mut has_length = false;
    for line in event.headers.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            continue;
        }
        has_length |= name.eq_ignore_ascii_case(b"content-length");
        out.write_all(line)?;
        out.write_all(b"\r\n")?;
    }
    if !has_length {
        write!(out, "content-length: {}\r\n", event.body.len())?;
    }
    out.write_all(b"\r\n")?;
    out.write_all(&event.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventSummary;

    fn event(headers: &[u8], body: &[u8]) -> EventDetail {
        EventDetail {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id: 1,
                endpoint: "x".to_string(),
                dedup_key: "k".to_string(),
                event_type: None,
                received_at_ms: 0,
                status: Status::Stored,
                attempts: 0,
                next_attempt_at_ms: None,
                last_error: None,
                object_id: None,
            },
            content_type: None,
            headers: headers.to_vec(),
            body: body.to_vec(),
            routes: Vec::new(),
            signed_id: None,
            event_type_signed: None,
            fetched: None,
            attempts: Vec::new(),
        }
    }

    fn raw(headers: &[u8], body: &[u8]) -> String {
        let mut out = Vec::new();
        write_raw(&mut out, "/webhooks/x", &event(headers, body)).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn raw_output_is_the_stored_request() {
        assert_eq!(
            raw(
                b"host: h\r\ncontent-length: 2\r\nx-sig: [redacted]\r\n",
                b"{}"
            ),
            "POST /webhooks/x HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\nx-sig: [redacted]\r\n\r\n{}"
        );
    }

    #[test]
    fn raw_output_of_a_chunked_delivery_has_a_length_instead() {
        assert_eq!(
            raw(b"transfer-encoding: chunked\r\nhost: h\r\n", b"abc\n"),
            "POST /webhooks/x HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\n\r\nabc\n"
        );
    }
}
