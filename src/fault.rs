//! Test-only fault injection, for the reliability suite (docs/guarantees/storage.md). Read
//! from the environment in debug builds only (`cfg(debug_assertions)`, which the integration
//! tests' binary is); in a release build every function here is a constant "no fault", so a
//! production binary cannot be made to misbehave by its environment.
//!
//! - `PORTARIA_TEST_FAULT`, a comma-separated list of: `panic-worker` (the forward worker
//!   panics when it claims an event), `panic-pruner` (at the start of a pruning pass),
//!   `panic-checkpoint` (the checkpoint thread, as it starts), `panic-writer` (the writer
//!   thread, running an intake insert).
//! - `PORTARIA_TEST_COMMIT_DELAY_MS`: the writer sleeps this long before each COMMIT of a batch
//!   that needs an fsync (every intake insert), to show that no answer leaves before it.
//! - `PORTARIA_TEST_STORE_DEADLINE_MS`: how long a webhook waits for the store to take its
//!   insert before it is given up and answered 503 (5 s otherwise), so a test can hold the
//!   writer past it in a second.
//! - `PORTARIA_TEST_LOG_SUMMARY_MS`: the interval over which like rejected webhooks are
//!   summarised in one log line (a minute otherwise), so a test sees the summary.
//! - `PORTARIA_TEST_TLS_CHECK_MS`: how often the TLS files' modification times are looked at
//!   (once a minute otherwise), so a test sees a renewal in well under a minute.
//! - `PORTARIA_TEST_PG_LEASE_MS`: the PostgreSQL backend's delivery lease (a minute
//!   otherwise), so a test sees a dead instance's claim taken over in seconds.
//! - `PORTARIA_TEST_PRUNE_EVERY_MS`: how often the server's pruner runs a pass (hourly
//!   otherwise), so a test sees several instances pruning on schedule in seconds.
//! - `PORTARIA_TEST_EXTERNAL_CHECK_MS`: how often the forward worker checks the database for
//!   other processes' commits (2 s otherwise), so a test shows that a wake-up came from
//!   PostgreSQL's NOTIFY and not from that fallback.

use std::time::Duration;

/// Whether the fault `name` (say `panic-worker`) was asked for.
#[cfg(debug_assertions)]
pub fn injected(name: &str) -> bool {
    std::env::var("PORTARIA_TEST_FAULT")
        .is_ok_and(|faults| faults.split(',').any(|f| f.trim() == name))
}

#[cfg(not(debug_assertions))]
pub fn injected(_name: &str) -> bool {
    false
}

/// Panics with a message naming the fault, if it was asked for.
pub fn panic_if(name: &str) {
    if injected(name) {
        panic!("injected fault {name} (PORTARIA_TEST_FAULT)");
    }
}

/// `var` in milliseconds, at least `floor_ms`, when a test sets it (debug builds only: a
/// release build never reads it).
#[cfg(debug_assertions)]
fn env_ms(var: &str, floor_ms: u64) -> Option<Duration> {
    let ms: u64 = std::env::var(var).ok()?.parse().ok()?;
    Some(Duration::from_millis(ms.max(floor_ms)))
}

#[cfg(not(debug_assertions))]
fn env_ms(_var: &str, _floor_ms: u64) -> Option<Duration> {
    None
}

/// How long to hold each fsync'd COMMIT back, if asked.
pub fn commit_delay() -> Option<Duration> {
    env_ms("PORTARIA_TEST_COMMIT_DELAY_MS", 0)
}

/// How long intake waits for the store to take an insert, if a test asks for other than 5 s.
pub fn store_deadline() -> Option<Duration> {
    env_ms("PORTARIA_TEST_STORE_DEADLINE_MS", 10)
}

/// The interval of a summary of rejected webhooks, if a test asks for other than a minute.
pub fn log_summary_every() -> Option<Duration> {
    env_ms("PORTARIA_TEST_LOG_SUMMARY_MS", 10)
}

/// How often to look at the TLS files, if a test asks for other than once a minute.
pub fn tls_check_every() -> Option<Duration> {
    env_ms("PORTARIA_TEST_TLS_CHECK_MS", 10)
}

/// The PostgreSQL backend's delivery lease, if a test asks for other than a minute.
pub fn pg_lease() -> Option<Duration> {
    env_ms("PORTARIA_TEST_PG_LEASE_MS", 100)
}

/// How often the worker looks for other processes' commits, if a test asks for other than 2 s.
pub fn external_check() -> Option<Duration> {
    env_ms("PORTARIA_TEST_EXTERNAL_CHECK_MS", 10)
}

/// How often the server prunes, if a test asks for other than hourly.
pub fn prune_every() -> Option<Duration> {
    env_ms("PORTARIA_TEST_PRUNE_EVERY_MS", 10)
}
