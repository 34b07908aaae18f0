//! The filters `events list`, `events replay` and `events export` share ([`Filters`]): which
//! endpoint, route, status, event types (a glob) and time window, turned into the store's
//! [`ListFilter`]; the check that a named endpoint or route exists (an error naming the
//! closest, never an empty result); and the confirmation a replay of many events asks for.

use std::io::{BufRead, IsTerminal, Write};

use clap::Args;

use super::database::Opened;
use crate::config::Config;
use crate::store::{ListFilter, Status};

/// A bulk replay of more events than this asks for `--yes` (or a typed `yes`).
pub(super) const CONFIRM_ABOVE: usize = 10;

#[derive(Args, Debug)]
pub(super) struct Filters {
    /// Only this endpoint's events (a name from the config).
    #[arg(long)]
    pub(super) endpoint: Option<String>,
    /// Only events with a delivery to this route (with --status: a delivery in that status).
    #[arg(long)]
    pub(super) route: Option<String>,
    /// pending, delivering, delivered, dead or stored.
    #[arg(long)]
    pub(super) status: Option<Status>,
    /// Only event types matching this glob: `*` any run of characters, `?` any one
    /// (`payment.*`, `PAYMENT_?ECEIVED`).
    #[arg(long = "type", value_name = "GLOB")]
    pub(super) event_type: Option<String>,
    /// Only events received at or after TIME: RFC 3339 (`2026-12-01T09:00:00-03:00`; a date
    /// alone is its midnight UTC) or a duration meaning that long ago (`30m`, `2h`, `7d`).
    #[arg(long, value_name = "TIME", value_parser = time_arg)]
    pub(super) since: Option<i64>,
    /// Only events received before TIME (as --since: RFC 3339, or `2h` for two hours ago).
    #[arg(long, value_name = "TIME", value_parser = time_arg)]
    pub(super) until: Option<i64>,
}

impl Filters {
    /// The store's filter, after checking that the endpoint and route it names exist.
    pub(super) fn checked(self, config: &Config, db: &Opened) -> Result<ListFilter, String> {
        if let Some(name) = &self.endpoint {
            known_endpoint(config, db, name)?;
        }
        if let Some(route) = &self.route {
            known_route(config, self.endpoint.as_deref(), route)?;
        }
        Ok(ListFilter {
            endpoint: self.endpoint,
            route: self.route,
            status: self.status,
            event_type: self.event_type,
            since: self.since,
            until: self.until,
            ..ListFilter::default()
        })
    }
}

/// `--since`/`--until`: RFC 3339 text, or a duration before now.
fn time_arg(text: &str) -> Result<i64, String> {
    crate::time::parse_when(text, crate::time::now_ms()).ok_or_else(|| {
        format!("`{text}` is neither RFC 3339 (2026-12-01T09:00:00Z) nor a duration (2h, 7d)")
    })
}

/// An endpoint name given to a filter: configured, or still holding stored events (an
/// endpoint taken out of the config); else an error naming the configured ones and the
/// closest. A mistyped name never reads as "nothing matched".
pub(super) fn known_endpoint(config: &Config, db: &Opened, name: &str) -> Result<(), String> {
    if config.endpoint(name).is_some() {
        return Ok(());
    }
    let filter = ListFilter {
        endpoint: Some(name.to_string()),
        limit: 1,
        ..ListFilter::default()
    };
    let stored = db
        .block_on(db.store.list_events(filter))
        .map_err(|e| format!("cannot list events: {e}"))?;
    if stored.is_empty() {
        return Err(super::no_such_endpoint(config, name));
    }
    Ok(())
}

/// A route name given to a filter: one of the endpoint's routes (of any endpoint's, without
/// `--endpoint`); else an error naming them and the closest.
fn known_route(config: &Config, endpoint: Option<&str>, route: &str) -> Result<(), String> {
    let mut routes: Vec<&str> = config
        .endpoints
        .iter()
        .filter(|e| endpoint.is_none_or(|name| e.name == name))
        .flat_map(|e| e.routes.iter().map(|r| r.name.as_str()))
        .collect();
    routes.sort_unstable();
    routes.dedup();
    if routes.contains(&route) {
        return Ok(());
    }
    let of = endpoint.map_or_else(String::new, |name| format!(" in endpoint `{name}`"));
    Err(format!(
        "no route named `{route}`{of} (configured: {}){}",
        crate::suggest::list(routes.iter().copied()),
        crate::suggest::hint(route, routes.iter().copied())
    ))
}

/// A replay of `n` events, above [`CONFIRM_ABOVE`]: goes on with `--yes`, or once `yes` is
/// typed on a terminal; refused otherwise (a script must say `--yes`).
pub(super) fn confirmed(n: usize, yes: bool) -> Result<(), String> {
    if n <= CONFIRM_ABOVE || yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    let refused = format!(
        "not replaying {n} events without a confirmation: add --yes to replay more than \
         {CONFIRM_ABOVE} at once"
    );
    if !stdin.is_terminal() {
        return Err(refused);
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "Replay these {n} events? Type yes to go on: ");
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the confirmation: {e}"))?;
    match answer.trim() {
        "yes" => Ok(()),
        _ => Err(format!(
            "not replaying {n} events: the answer was not `yes`"
        )),
    }
}
