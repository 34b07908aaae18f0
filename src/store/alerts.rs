//! What the alerts task asks of the database: the deliveries that went dead since it last looked,
//! the endpoints that have received anything, and its own state, kept in `meta` under keys
//! starting with `alerts:` (no table of its own: the schema is not changed for it).
//!
//! "Since it last looked" is a cursor on `attempts.id`, not on `events.id`: an event goes dead
//! with its last attempt, and attempt ids grow in the order attempts are recorded, whatever the
//! order events arrived in (an old event with a long schedule dies after a young one) and also
//! when a replayed event dies a second time.
//! Each engine answers in its `alerts.rs`: SQLite with that cursor, PostgreSQL (several
//! instances, one announcing) by marking the deliveries it has told of.
//!
//! What changed upstream (issue 27): the event types stored after a cursor on `events.id`
//! ([`TypesBatch`], `new_type`: on SQLite ids are handed out in commit order, so the cursor is
//! the newest id; on PostgreSQL, in insert order, so the cursor stops at the newest event
//! received [`TYPES_SETTLE_MS`] ago and what follows is read again at the next look), and the
//! events of one endpoint received in a span of time that matched no route and are still
//! stored only ([`Unrouted`]). On PostgreSQL both answer only the instance holding the alerts
//! lock, as the dead deliveries do.

/// An event whose last attempt, recorded after the cursor, left it dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadEvent {
    pub id: i64,
    pub endpoint: String,
    /// The route whose delivery went dead.
    pub route: Option<String>,
}

/// The dead events after a cursor, and the cursor to ask with next time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadBatch {
    /// In the order they went dead.
    pub events: Vec<DeadEvent>,
    pub cursor: i64,
}

/// The first event of one type among an endpoint's events after a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSeen {
    pub endpoint: String,
    pub event_type: String,
    /// Its first event after the cursor: id and received time (unix ms).
    pub first_id: i64,
    pub first_ms: i64,
}

/// The event types stored after a cursor (untyped events left out), and the cursor to ask
/// with next time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypesBatch {
    /// By (endpoint, type), in the order of their first event.
    pub types: Vec<TypeSeen>,
    pub cursor: i64,
}

/// On PostgreSQL, events received less than this long ago may still have uncommitted ones
/// below them: the types cursor waits this long before passing them.
pub const TYPES_SETTLE_MS: i64 = 60_000;

/// The events of one endpoint received in a span that matched no route and are still stored
/// only (`unrouted`): how many, the lowest and the highest id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unrouted {
    pub count: u64,
    pub first_id: Option<i64>,
    pub last_id: Option<i64>,
}

/// The prefix of every `meta` key the alerts task owns.
pub const ALERT_KEY_PREFIX: &str = "alerts:";
