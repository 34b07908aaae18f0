//! Verify-by-fetching's record (`fetch = true`, docs/reconcile.md): what the gateway's API
//! answered for the object an event names, kept once per event in table `fetches` (SQLite
//! schema 15, PostgreSQL 7) beside the event, never in its row: the object is a few KiB, and
//! the queue reads `events` rows on every claim. The first answer kept is the event's for good
//! ([`Store::keep_fetched`](super::Store::keep_fetched)): a second route, a replay or another
//! instance reads it instead of asking the gateway again (a rejection is asked again, and an
//! object answered then replaces it). Its row goes with the event (`ON DELETE CASCADE`), into
//! the archive's line (`archive.rs`) and back with a restore, and into PostgreSQL with
//! `store copy`.

/// The table, one row per fetched event (SQLite's version 15, PostgreSQL's 7), `{id}` the
/// engine's integer key: `state` is [`Fetched::state`], `detail` the object's JSON, or why it
/// was rejected.
pub(super) const CREATE: &str = "CREATE TABLE fetches (
    event_id {id} PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    state    TEXT NOT NULL,
    detail   TEXT NOT NULL
);";

/// Keeps the first object answered: a later answer changes nothing, but an object replaces a
/// rejection (asked again after a replay, once the owner fixed `api_base`, say).
pub(super) const KEEP: &str = "INSERT INTO fetches (event_id, state, detail) VALUES ($1, $2, $3) \
     ON CONFLICT (event_id) DO UPDATE SET state = excluded.state, detail = excluded.detail \
     WHERE fetches.state <> 'fetched'";

pub(super) const READ: &str = "SELECT state, detail FROM fetches WHERE event_id = $1";

/// Every record of an endpoint's events received at or after $2, in one read (a Cielo
/// reconcile run's view of the sales it has seen).
pub(super) const SINCE: &str = "SELECT f.event_id, f.state, f.detail FROM fetches f \
     JOIN events e ON e.id = f.event_id WHERE e.endpoint = $1 AND e.received_at >= $2";

/// What the gateway's API said of the object an event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The object as the API gave it: a JSON object, compact (one line).
    Object(String),
    /// The API said there is no such object (HTTP 404): why, in words.
    Rejected(String),
}

impl Fetched {
    /// `fetched` or `rejected_by_fetch`: the word `events show`, the JSON and the status
    /// page use.
    pub fn state(&self) -> &'static str {
        match self {
            Fetched::Object(_) => "fetched",
            Fetched::Rejected(_) => "rejected_by_fetch",
        }
    }

    pub(super) fn detail(&self) -> &str {
        match self {
            Fetched::Object(text) | Fetched::Rejected(text) => text,
        }
    }

    /// A row's columns back; None for a state this build does not know.
    pub(super) fn from_columns(state: &str, detail: String) -> Option<Fetched> {
        match state {
            "fetched" => Some(Fetched::Object(detail)),
            "rejected_by_fetch" => Some(Fetched::Rejected(detail)),
            _ => None,
        }
    }
}
