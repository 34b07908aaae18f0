//! The per-endpoint `quarantine_keep` and `quarantine_for`: how many of an endpoint's
//! rejected requests are kept, and for how long (`store/quarantine.rs` keeps them). Bounded,
//! so the disk they take is bounded whatever an attacker sends: at most
//! [`MAX_QUARANTINE_KEEP`] rows of at most `max_body_bytes` each per endpoint.

use std::time::Duration;

use super::validate::parse_duration;
use super::validator::Validator;

/// The rejected requests kept per endpoint unless `quarantine_keep` says otherwise.
pub const DEFAULT_QUARANTINE_KEEP: u32 = 100;
/// For how long unless `quarantine_for` says otherwise.
pub const DEFAULT_QUARANTINE_FOR: Duration = Duration::from_secs(48 * 3600);
/// The most `quarantine_keep` may say.
pub const MAX_QUARANTINE_KEEP: u32 = 10_000;

/// An endpoint's rejected requests kept: the newest `keep` (0: none), for `keep_for`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantine {
    pub keep: u32,
    pub keep_for: Duration,
}

impl Default for Quarantine {
    fn default() -> Quarantine {
        Quarantine {
            keep: DEFAULT_QUARANTINE_KEEP,
            keep_for: DEFAULT_QUARANTINE_FOR,
        }
    }
}

impl Validator<'_> {
    /// The endpoint at `at`'s `quarantine_keep` and `quarantine_for`, with their defaults.
    pub(super) fn quarantine(
        &mut self,
        at: &str,
        keep: Option<u32>,
        keep_for: Option<&str>,
    ) -> Quarantine {
        let mut q = Quarantine::default();
        match keep {
            Some(n) if n > MAX_QUARANTINE_KEEP => self.problem(format!(
                "{at}.quarantine_keep: at most {MAX_QUARANTINE_KEEP} (got {n})"
            )),
            Some(n) => q.keep = n,
            None => {}
        }
        match keep_for.map(parse_duration) {
            Some(Ok(d)) if d.is_zero() => {
                self.problem(format!("{at}.quarantine_for: must be more than 0"));
            }
            Some(Ok(d)) => q.keep_for = d,
            Some(Err(why)) => self.problem(format!("{at}.quarantine_for: {why}")),
            None => {}
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MINIMAL, parse, problems};
    use super::*;

    #[test]
    fn an_endpoint_keeps_100_rejected_requests_for_48h_unless_it_says_otherwise() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.endpoints[0].quarantine, Quarantine::default());
        assert_eq!(config.endpoints[0].quarantine.keep, 100);
        assert_eq!(
            config.endpoints[0].quarantine.keep_for,
            Duration::from_secs(172_800)
        );
        let config = parse(&format!(
            "{MINIMAL}quarantine_keep = 0\nquarantine_for = \"2h\"\n"
        ))
        .unwrap();
        assert_eq!(
            config.endpoints[0].quarantine,
            Quarantine {
                keep: 0,
                keep_for: Duration::from_secs(7200)
            }
        );
    }

    #[test]
    fn a_keep_too_large_or_a_bad_time_is_refused_with_every_problem() {
        let err = problems(&format!(
            "{MINIMAL}quarantine_keep = 20000\nquarantine_for = \"soon\"\n"
        ));
        assert!(err.contains("quarantine_keep: at most 10000"), "{err}");
        assert!(err.contains("quarantine_for:"), "{err}");
        let err = problems(&format!("{MINIMAL}quarantine_for = \"0s\"\n"));
        assert!(err.contains("quarantine_for: must be more than 0"), "{err}");
    }
}
