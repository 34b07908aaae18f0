//! The status page's logins: one random session per successful login, kept in memory only (a
//! restart logs everyone out), ended by logging out, by [`IDLE`] without use, or, once
//! [`MAX_SESSIONS`] are open, by a new login pushing out the one unused longest. Bounded
//! whatever happens: only a login with the right token adds one.
//!
//! Pure bookkeeping: the caller passes the time and makes the ids. The table holds each id's
//! SHA-256, never the id: a lookup's timing says nothing about a live one, and a memory dump
//! holds no cookie.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Sessions open at once; a login beyond this ends the one unused longest.
pub const MAX_SESSIONS: usize = 64;

/// A session unused this long is over.
pub const IDLE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The open sessions, by the SHA-256 of their id, with when each was last used.
#[derive(Debug, Default)]
pub struct Sessions {
    last_used: HashMap<[u8; 32], Instant>,
}

impl Sessions {
    /// Opens a session for `id` (fresh and random: the caller's), making room if needed.
    pub fn open(&mut self, id: &str, now: Instant) {
        self.last_used
            .retain(|_, used| now.saturating_duration_since(*used) < IDLE);
        if self.last_used.len() >= MAX_SESSIONS
            && let Some(oldest) = self
                .last_used
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(key, _)| *key)
        {
            self.last_used.remove(&oldest);
        }
        self.last_used.insert(key(id), now);
    }

    /// Whether `id` is an open session; if so it counts as used now.
    pub fn touch(&mut self, id: &str, now: Instant) -> bool {
        let key = key(id);
        match self.last_used.get_mut(&key) {
            Some(used) if now.saturating_duration_since(*used) < IDLE => {
                *used = now;
                true
            }
            Some(_) => {
                self.last_used.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Ends session `id` (logging out); nothing if it is not open.
    pub fn end(&mut self, id: &str) {
        self.last_used.remove(&key(id));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last_used.len()
    }
}

fn key(id: &str) -> [u8; 32] {
    crate::digest::sha256(&[id.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_open_until_it_ends_or_goes_unused_for_too_long() {
        let mut sessions = Sessions::default();
        let t0 = Instant::now();
        sessions.open("a", t0);
        sessions.open("b", t0);
        assert!(sessions.touch("a", t0 + Duration::from_secs(60)));
        assert!(!sessions.touch("c", t0), "never opened");
        sessions.end("a");
        assert!(
            !sessions.touch("a", t0 + Duration::from_secs(61)),
            "logged out"
        );
        assert!(sessions.touch("b", t0 + IDLE - Duration::from_secs(1)));
        let later = t0 + IDLE - Duration::from_secs(1) + IDLE;
        assert!(!sessions.touch("b", later), "unused for IDLE");
        assert_eq!(sessions.len(), 0, "an expired session is dropped when seen");
    }

    #[test]
    fn the_table_never_holds_more_than_its_cap_and_drops_the_unused_longest() {
        let mut sessions = Sessions::default();
        let t0 = Instant::now();
        let at = |n: u64| t0 + Duration::from_secs(n);
        for n in 0..MAX_SESSIONS as u64 {
            sessions.open(&format!("s{n}"), at(n));
        }
        // s0 is used again, so s1 is now the one unused longest.
        assert!(sessions.touch("s0", at(1000)));
        sessions.open("new", at(1001));
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(!sessions.touch("s1", at(1002)), "pushed out");
        assert!(sessions.touch("s0", at(1002)));
        assert!(sessions.touch("new", at(1002)));
        // Expired ones go first, however many.
        let much_later = at(1002) + IDLE;
        sessions.open("fresh", much_later);
        assert_eq!(sessions.len(), 1);
    }
}
