//! A gateway's patience: how long it keeps retrying a delivery that fails, where its own
//! documentation says, and a sentence saying how much of it is left ([`Patience::outlook`]),
//! which the `storage` and `unreachable` alerts and the status page's banner add. Pure: the
//! caller passes the times.
//!
//! The rules, each cited in its provider's file (sources: `shared/reference/reconcile.md` §9,
//! `signature-schemes.md` §9): Asaas, 15 consecutive failures on a documented schedule, then
//! the queue pauses and its events are deleted 14 days later; Cielo, 3 attempts on a schedule
//! it does not publish; Stripe, 3 days (live mode); Vindi, 15 attempts over about 48 h;
//! GitHub, no retry at all. Every other preset: not documented, and the sentence says so.

use std::time::Duration;

/// One gateway's rule, with its name as the owner knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub gateway: &'static str,
    pub rule: Rule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Consecutive failures pause the whole queue (`attempts` of them, at these offsets from
    /// the first, in seconds); the paused queue's events are deleted `deleted_after_days`
    /// after the pause.
    Queue {
        offsets: &'static [u32],
        deleted_after_days: u32,
    },
    /// One delivery is tried this many times, on a schedule that is not published.
    Attempts { attempts: u32 },
    /// One delivery is retried for this long after its first failure (`attempts` times, when
    /// the documentation says).
    Span {
        span: Duration,
        attempts: Option<u32>,
    },
    /// No automatic retry: a failed delivery is not sent again.
    Never,
    /// The documentation read does not say.
    Unknown,
}

impl Patience {
    /// For a gateway that pauses a queue: how many days after the pause it deletes the
    /// queue's events.
    pub fn deletes_paused_after_days(&self) -> Option<u32> {
        match self.rule {
            Rule::Queue {
                deleted_after_days, ..
            } => Some(deleted_after_days),
            _ => None,
        }
    }

    /// What is left of it for a failure going on since `since_ms` (unix ms), at `now_ms`.
    /// `failures`: the failed deliveries portaria itself saw (the 503s it answered), when it
    /// saw them; a tunnel that is down sees none, and the schedule is all there is to go by.
    pub fn outlook(&self, since_ms: i64, now_ms: i64, failures: Option<u64>) -> String {
        let gateway = self.gateway;
        let elapsed = Duration::from_millis(now_ms.saturating_sub(since_ms).max(0) as u64);
        match self.rule {
            Rule::Queue {
                offsets,
                deleted_after_days,
            } => {
                let attempts = offsets.len() as u64;
                let by_schedule = offsets
                    .iter()
                    .filter(|&&s| Duration::from_secs(s.into()) <= elapsed)
                    .count() as u64;
                let made = by_schedule.max(failures.unwrap_or(0)).min(attempts);
                let last = Duration::from_secs(offsets.last().copied().unwrap_or(0).into());
                if made < attempts {
                    let left = last.saturating_sub(elapsed);
                    format!(
                        "{gateway} pauses this queue after about {} more {} (in about {}, \
                         counting from the first failure {} ago); its events are deleted \
                         {deleted_after_days} days after the pause.",
                        attempts - made,
                        if attempts - made == 1 {
                            "failure"
                        } else {
                            "failures"
                        },
                        span(left),
                        span(elapsed)
                    )
                } else {
                    format!(
                        "{gateway} has likely paused this queue ({attempts} failures over {} \
                         since the first, {} ago); its events are deleted {deleted_after_days} \
                         days after the pause: resume the queue in {gateway} once portaria \
                         answers again.",
                        span(last),
                        span(elapsed)
                    )
                }
            }
            Rule::Attempts { attempts } => match failures {
                Some(n) if n > 0 => format!(
                    "{gateway} gives up on a notification after {attempts} attempts (portaria \
                     refused {n} so far; the schedule is not published)."
                ),
                _ => format!(
                    "{gateway} gives up on a notification after {attempts} attempts (the \
                     schedule is not published)."
                ),
            },
            Rule::Span {
                span: total,
                attempts,
            } => {
                let tries = attempts.map_or_else(String::new, |n| format!(", {n} attempts"));
                if elapsed < total {
                    format!(
                        "{gateway} stops retrying about {} after the first failure{tries}: in \
                         about {}.",
                        self::span(total),
                        self::span(total - elapsed)
                    )
                } else {
                    format!(
                        "{gateway} has stopped retrying the deliveries that failed first, {} \
                         ago (it retries for about {}{tries}).",
                        self::span(elapsed),
                        self::span(total)
                    )
                }
            }
            Rule::Never => format!(
                "{gateway} does not retry: each delivery that failed is lost unless it is \
                 redelivered."
            ),
            Rule::Unknown => {
                format!("How long {gateway} keeps retrying is not documented.")
            }
        }
    }
}

/// `2d 23h`, `12h 40m`, `35m`, `40s`: the two largest units.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let pair = |a: u64, ua: &str, b: u64, ub: &str| {
        if b == 0 {
            format!("{a}{ua}")
        } else {
            format!("{a}{ua} {b}{ub}")
        }
    };
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, m) => pair(m, "m", seconds, "s"),
        (0, h, m) => pair(h, "h", m, "m"),
        (d, h, _) => pair(d, "d", h, "h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;

    fn asaas() -> Patience {
        Patience {
            gateway: "Asaas",
            rule: Rule::Queue {
                offsets: super::super::asaas::RETRY_OFFSETS,
                deleted_after_days: 14,
            },
        }
    }

    #[test]
    fn asaas_counts_failures_on_its_schedule_or_as_seen() {
        let a = asaas();
        // 0 s, 30 s, 1.5 m, 5 m, 10 m: five attempts are due in the first 10 minutes.
        let s = a.outlook(0, 10 * MIN, None);
        assert!(
            s.starts_with("Asaas pauses this queue after about 10 more failures (in about 12h 40m"),
            "{s}"
        );
        assert!(s.contains("deleted 14 days after the pause"), "{s}");
        // 503s counted by portaria weigh when they are more than the schedule says.
        let s = a.outlook(0, 10 * MIN, Some(14));
        assert!(s.contains("after about 1 more failure ("), "{s}");
        let s = a.outlook(0, 13 * HOUR, None);
        assert!(
            s.starts_with("Asaas has likely paused this queue (15 failures over 12h 50m"),
            "{s}"
        );
    }

    #[test]
    fn spans_attempts_never_and_unknown_say_so() {
        let stripe = Patience {
            gateway: "Stripe",
            rule: Rule::Span {
                span: Duration::from_secs(3 * 86_400),
                attempts: None,
            },
        };
        assert_eq!(
            stripe.outlook(0, HOUR, None),
            "Stripe stops retrying about 3d after the first failure: in about 2d 23h."
        );
        assert!(
            stripe
                .outlook(0, 80 * HOUR, None)
                .starts_with("Stripe has stopped retrying")
        );
        let vindi = Patience {
            gateway: "Vindi",
            rule: Rule::Span {
                span: Duration::from_secs(48 * 3600),
                attempts: Some(15),
            },
        };
        assert!(
            vindi
                .outlook(0, 0, None)
                .contains("2d after the first failure, 15 attempts: in about 2d.")
        );
        let cielo = Patience {
            gateway: "Cielo",
            rule: Rule::Attempts { attempts: 3 },
        };
        assert!(
            cielo
                .outlook(0, 0, Some(2))
                .contains("after 3 attempts (portaria refused 2 so far")
        );
        assert!(
            cielo
                .outlook(0, 0, None)
                .contains("(the schedule is not published)")
        );
        let github = Patience {
            gateway: "GitHub",
            rule: Rule::Never,
        };
        assert!(
            github
                .outlook(0, 0, None)
                .starts_with("GitHub does not retry")
        );
        let other = Patience {
            gateway: "paddle",
            rule: Rule::Unknown,
        };
        assert_eq!(
            other.outlook(0, 0, None),
            "How long paddle keeps retrying is not documented."
        );
        assert_eq!(span(Duration::from_secs(40)), "40s");
        assert_eq!(span(Duration::from_secs(35 * 60 + 5)), "35m 5s");
        assert_eq!(span(Duration::from_secs(12 * 3600 + 40 * 60)), "12h 40m");
    }

    #[test]
    fn the_presets_carry_their_gateways_rules() {
        let headers = ["x-key".to_string()];
        let rule = |provider: &str| {
            let settings = super::super::Settings {
                credential_headers: (provider == "cielo").then_some(&headers[..]),
                ..Default::default()
            };
            super::super::Verifier::with_settings(provider, &settings, &["k".to_string()], None)
                .unwrap()
                .patience()
        };
        assert_eq!(rule("asaas").gateway, "Asaas");
        assert!(
            matches!(rule("asaas").rule, Rule::Queue { deleted_after_days: 14, offsets } if offsets.len() == 15)
        );
        assert_eq!(rule("cielo").rule, Rule::Attempts { attempts: 3 });
        assert!(
            matches!(rule("stripe").rule, Rule::Span { span, attempts: None } if span.as_secs() == 3 * 86_400)
        );
        assert!(matches!(
            rule("vindi").rule,
            Rule::Span {
                attempts: Some(15),
                ..
            }
        ));
        assert_eq!(rule("github").rule, Rule::Never);
        assert_eq!(
            rule("paddle"),
            Patience {
                gateway: "paddle",
                rule: Rule::Unknown
            }
        );
    }
}
