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

/// The prefix of every `meta` key the alerts task owns.
pub const ALERT_KEY_PREFIX: &str = "alerts:";
