//! Paused routes (`portaria route pause`): a paused route keeps accepting and storing, and its
//! deliveries wait, in order, until it is resumed or its pause runs out. The pause lives in
//! the store (table `route_pauses` on both engines), so it survives restarts and every
//! instance on a shared PostgreSQL database sees it; the worker reads the pauses in force each
//! round and claims nothing for a paused route (`forward/`).

/// One route's pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePause {
    pub endpoint: String,
    pub route: String,
    /// Unix milliseconds.
    pub paused_at_ms: i64,
    /// When it runs out by itself (unix milliseconds); None: until resumed.
    pub until_ms: Option<i64>,
    /// Why, as the owner (or a target answering 410 Gone) said it.
    pub reason: Option<String>,
}

impl RoutePause {
    /// Whether it still holds at `now_ms`.
    pub fn holds_at(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|until| until > now_ms)
    }
}
