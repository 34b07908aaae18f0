//! The forwarding worker's side of the queue: claim due deliveries (marking them `delivering`
//! before any attempt starts), record an attempt and move the delivery (and its event's
//! roll-up status) on, recover attempts cut off by a crash, and say when the next one is due.
//! A lane is one (endpoint, route); its deliveries are rows of `deliveries`. How each engine
//! keeps the queue: `sqlite/queue.rs` (a partial index, one writer), `postgres/queue.rs`
//! (`FOR UPDATE SKIP LOCKED`, leases, several instances).
//!
//! The cycle: [`Store::claim_lanes`](super::Store::claim_lanes) marks the due deliveries of every lane with room
//! `delivering` (attempts + 1) in one transaction; [`Store::record_attempt`] moves one to
//! `delivered`, back to `pending` with its next due time, or to `dead`, and claims the lane's
//! next in the same transaction. A lane claims in one of three [`Order`]s: `Strict` (only its
//! oldest unfinished delivery is a candidate), `ByKey` (a delivery waits while an older one
//! with its `order_key`, stored at intake, is unfinished: the partial index
//! `deliveries_order`), `Any`. [`Store::recover`], at start-up, turns every `delivering`
//! delivery back into `pending`, due now, with its cut-off attempt recorded `interrupted`,
//! clears from the queue the finished deliveries a crash left there, and writes the lost
//! roll-ups.

use bytes::Bytes;

use super::Origin;

/// A delivery claimed for one attempt (its status is now `delivering`): everything the
/// attempt hands to the target.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: i64,
    pub endpoint: String,
    /// The route this delivery is for.
    pub route: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    /// Whether `event_type` came from bytes the signature covers: false when it came from an
    /// unsigned header or body, when there is none, and for events stored before it was kept.
    pub event_type_signed: bool,
    /// The id the provider signed apart from the body (Mercado Pago's query `data.id`): what
    /// a target should trust where the body proves nothing.
    pub signed_id: Option<String>,
    /// A webhook, or taken from the gateway's API by `portaria reconcile`.
    pub origin: Origin,
    pub content_type: Option<String>,
    pub received_at_ms: i64,
    /// 1-based number of this attempt (of this route).
    pub attempt: u32,
    /// The request headers as stored (`name: value\r\n` each; credentials redacted).
    pub headers: Bytes,
    pub body: Bytes,
    /// The object the gateway's API gave for the one the event names (verify-by-fetching:
    /// compact JSON); never set by the store's claim, only by the worker before a target
    /// gets it (`forward/fetch.rs`).
    pub fetched: Option<String>,
}

/// Which of a lane's due deliveries may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Any due delivery (`concurrency` > 1 without `order_by`).
    Any,
    /// Only the oldest unfinished delivery: strict arrival order (`concurrency = 1` without
    /// `order_by`).
    Strict,
    /// Per ordering key: a delivery goes only when no older one of its key is unfinished; a
    /// delivery without a key is a lane of its own (`order_by`).
    ByKey,
}

/// One lane's share of [`Store::claim_lanes`](super::Store::claim_lanes): claim up to `limit` of its due deliveries.
#[derive(Debug, Clone)]
pub struct LaneClaim {
    pub endpoint: String,
    pub route: String,
    pub limit: usize,
    pub order: Order,
}

/// What [`Store::claim_lanes`](super::Store::claim_lanes) found for one lane.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub deliveries: Vec<Delivery>,
    /// When its next delivery is due, if it still has room after these (None: none waits).
    pub next_due: Option<i64>,
}

/// After recording an attempt, claim the next due delivery of this lane.
#[derive(Debug, Clone)]
pub struct ClaimNext {
    pub endpoint: String,
    pub route: String,
    pub order: Order,
    pub now_ms: i64,
}

/// One attempt the worker ran: which, when and for how long. What it came to is the
/// [`AfterAttempt`] recorded with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    /// 1-based, as claimed.
    pub attempt: u32,
    pub started_at_ms: i64,
    pub duration_ms: i64,
}

/// What an attempt came to, and so what happens to its delivery: the one vocabulary of an
/// attempt's result between the worker and the database (the attempt row's `outcome` column
/// and the delivery's status both follow from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAttempt {
    Delivered,
    /// Failed with this error; due again at this time (unix milliseconds).
    RetryAt {
        at_ms: i64,
        error: String,
    },
    /// Failed with this error, and it was the schedule's last try.
    Dead {
        error: String,
    },
}

impl AfterAttempt {
    /// The label of the attempt's outcome, in logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::RetryAt { .. } => "failed",
            AfterAttempt::Dead { .. } => "dead",
        }
    }

    /// Why it failed, if it did: a short text, safe to log and store.
    pub fn error(&self) -> Option<&str> {
        match self {
            AfterAttempt::Delivered => None,
            AfterAttempt::RetryAt { error, .. } | AfterAttempt::Dead { error } => Some(error),
        }
    }

    /// The attempt row's `outcome`: `delivered` or `failed` (`interrupted` is recovery's).
    pub(super) fn recorded_as(&self) -> &'static str {
        match self {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::RetryAt { .. } | AfterAttempt::Dead { .. } => "failed",
        }
    }
}
