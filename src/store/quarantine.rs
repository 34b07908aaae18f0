//! Rejected requests kept for a while (issue 27, "Keep what was rejected"): the last
//! `quarantine_keep` requests an endpoint refused (bad signature, stale timestamp, bad
//! credential, no dedup key, too large), for `quarantine_for`, in the table `rejected` on both
//! engines. Never an event: never forwarded, never counted as one, never in `events list`.
//! Each insert trims its endpoint to the newest `keep` rows and drops those past `for`, so the
//! table holds at most `keep` rows of at most `max_body_bytes` (plus headers) per endpoint,
//! whatever an attacker sends. Headers are stored redacted as an event's are (intake's
//! `headers_blob`); the body as received, cut at the endpoint's `max_body_bytes`.
//! Read back whole by id (`verify --rejected`, the status page's one request), or listed
//! without headers nor bodies ([`RejectedSummary`]: the status page's list, a page at a time,
//! and how many each endpoint keeps).

/// A rejected request to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToQuarantine {
    pub endpoint: String,
    /// Unix milliseconds.
    pub received_at_ms: i64,
    /// The status page's word for it: `bad_signature`, `stale_timestamp`, `bad_request`,
    /// `too_large` (as the log line's outcome).
    pub reason: String,
    /// What verification or the dedup key said (no secret: a `VerifyError`'s text).
    pub detail: String,
    pub content_type: Option<String>,
    /// `name: value\r\n` each, credentials redacted.
    pub headers: Vec<u8>,
    /// The body as received, at most `max_body_bytes`.
    pub body: Vec<u8>,
    /// Whether the body was cut (a too-large request: what arrived of it, or nothing).
    pub truncated: bool,
}

/// How much of an endpoint's rejections to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineKeep {
    /// The newest rows kept per endpoint (0: none).
    pub keep: u32,
    /// How long a row is kept, in milliseconds.
    pub for_ms: i64,
}

/// A kept rejected request, as `events rejected` and `verify --rejected` read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    pub id: i64,
    pub endpoint: String,
    pub received_at_ms: i64,
    pub reason: String,
    pub detail: String,
    pub content_type: Option<String>,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
    pub truncated: bool,
}

/// A kept rejected request as a list shows it: no headers nor body, the body's size
/// (the status page's list reads these, never the bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedSummary {
    pub id: i64,
    pub endpoint: String,
    pub received_at_ms: i64,
    pub reason: String,
    pub detail: String,
    pub content_type: Option<String>,
    /// The bytes of the body kept (a truncated one: what was kept, not what was sent).
    pub body_bytes: u64,
    pub truncated: bool,
}

impl From<&Quarantined> for RejectedSummary {
    fn from(r: &Quarantined) -> RejectedSummary {
        RejectedSummary {
            id: r.id,
            endpoint: r.endpoint.clone(),
            received_at_ms: r.received_at_ms,
            reason: r.reason.clone(),
            detail: r.detail.clone(),
            content_type: r.content_type.clone(),
            body_bytes: r.body.len() as u64,
            truncated: r.truncated,
        }
    }
}

/// The columns every read of `rejected` names, in [`Quarantined`]'s order.
pub(super) const COLUMNS: &str =
    "id, endpoint, received_at, reason, detail, content_type, headers, body, truncated";

/// The cap on rows a list returns.
pub const LIST_MAX: usize = 10_000;
