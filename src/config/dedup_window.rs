//! `dedup_window`: for how long an event's dedup key makes a later event with the same key a
//! duplicate.
//!
//! Without a window (the default for most presets), any earlier event with the key that is
//! still stored is a duplicate; since finished events are pruned after `retention_days`, that
//! is a window of the retention. Some gateways send bodies so thin that two real events are
//! byte-identical (Cielo's notification is only `{"PaymentId": .., "ChangeType": 1}`): with a
//! body-hash key, the second status change of a payment would be dropped as a duplicate. For
//! those presets the window defaults to the gateway's retry span, and a long one is warned of.

use std::time::Duration;

use super::Endpoint;
use super::validate::parse_duration;
use super::validator::Validator;

/// A preset whose bodies carry no event id, so two real events may be byte-identical.
struct ThinBodies {
    provider: &'static str,
    /// The default window: the span over which the gateway retries one notification.
    window: Duration,
}

/// The presets documented as sending thin bodies, with their default windows.
const THIN_BODIES: &[ThinBodies] = &[
    // Cielo retries a notification twice more after a non-200 answer, within minutes (per its
    // docs): the window only needs to cover that, and anything longer risks dropping a real
    // second status change of the same payment.
    ThinBodies {
        provider: "cielo",
        window: Duration::from_secs(10 * 60),
    },
    // PicPay's legacy callback is only `{referenceId, authorizationId}`, the same for every
    // status change of a payment; its retries are not documented: Cielo's window, a resend
    // soon after is one event, a later change another.
    ThinBodies {
        provider: "picpay",
        window: Duration::from_secs(10 * 60),
    },
];

/// An explicit window longer than this, on a thin-body preset, gets a warning.
pub(super) const THIN_BODY_WINDOW_LIMIT: Duration = Duration::from_secs(3600);

/// The window a preset gives when the endpoint sets none; None: no window (any earlier event
/// with the key that is still stored is a duplicate, which is the retention window).
pub fn default_dedup_window(provider: &str) -> Option<Duration> {
    thin_bodies(provider).map(|t| t.window)
}

fn thin_bodies(provider: &str) -> Option<&'static ThinBodies> {
    THIN_BODIES.iter().find(|t| t.provider == provider)
}

/// The warning for an explicit `dedup_window = "{text}"` (`window`) on this provider, if the
/// provider sends thin bodies and the window is longer than [`THIN_BODY_WINDOW_LIMIT`].
pub(super) fn thin_body_warning(
    at: &str,
    provider: &str,
    text: &str,
    window: Duration,
) -> Option<String> {
    let thin = thin_bodies(provider)?;
    (window > THIN_BODY_WINDOW_LIMIT).then(|| {
        format!(
            "{at}.dedup_window: `{text}` is long for provider `{provider}`, whose bodies carry \
             no event id: two real events can be byte-identical, and the second one within the \
             window is dropped as a duplicate; keep it to the gateway's retry span (the \
             preset's default is {} min, the limit for this warning {} min)",
            thin.window.as_secs() / 60,
            THIN_BODY_WINDOW_LIMIT.as_secs() / 60,
        )
    })
}

impl Validator<'_> {
    /// The endpoint's window: as written (0 refused), else the preset's default, else None.
    /// `provider` is the verifier's canonical name, when the provider is known.
    pub(super) fn dedup_window(
        &mut self,
        at: &str,
        raw: Option<&str>,
        provider: Option<&str>,
    ) -> Option<Duration> {
        let Some(text) = raw else {
            return provider.and_then(default_dedup_window);
        };
        let window = match parse_duration(text) {
            Ok(window) if window.is_zero() => {
                self.problems.push(format!(
                    "{at}.dedup_window: must be longer than 0 (leave it out to count any \
                     earlier event with the key as a duplicate)"
                ));
                return None;
            }
            Ok(window) => window,
            Err(why) => {
                self.problems
                    .push(format!("{at}.dedup_window: `{text}`: {why}"));
                return None;
            }
        };
        if let Some(warning) = provider.and_then(|p| thin_body_warning(at, p, text, window)) {
            self.warnings.push(warning);
        }
        Some(window)
    }
}

impl Endpoint {
    /// The start of this endpoint's dedup window for an event received at `at_ms` (unix
    /// milliseconds), for intake and for what a reconcile run stores; None without a window
    /// (any earlier event of the key is a duplicate).
    pub fn dedup_since(&self, at_ms: i64) -> Option<i64> {
        self.dedup_window.map(|w| window_start(at_ms, w))
    }
}

/// The start of a dedup window of `window` ending at `at_ms` (unix milliseconds): an earlier
/// event with the key counts as a duplicate only if received at or after it. A window longer
/// than the clock's past starts before every event.
fn window_start(at_ms: i64, window: Duration) -> i64 {
    at_ms.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dedup_window_starts_its_length_before_the_event() {
        assert_eq!(window_start(10_000, Duration::from_secs(2)), 8_000);
        assert_eq!(window_start(10_000, Duration::from_millis(1)), 9_999);
        // A window longer than the clock's past: no overflow, it starts before every event.
        assert_eq!(window_start(5, Duration::from_secs(u64::MAX)), 5 - i64::MAX);
        assert_eq!(window_start(i64::MIN + 1, Duration::from_secs(1)), i64::MIN);
    }
    use crate::config::tests::{MINIMAL, parse, problems};

    #[test]
    fn the_key_parses_and_no_key_means_no_window() {
        assert_eq!(parse(MINIMAL).unwrap().endpoints[0].dedup_window, None);
        for (text, window) in [
            ("10m", Duration::from_secs(600)),
            ("2s", Duration::from_secs(2)),
            ("1500ms", Duration::from_millis(1500)),
            ("7d", Duration::from_secs(7 * 86_400)),
        ] {
            let config = parse(&format!("{MINIMAL}dedup_window = \"{text}\"\n")).unwrap();
            assert_eq!(config.endpoints[0].dedup_window, Some(window), "{text}");
            assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        }
    }

    #[test]
    fn a_zero_or_unreadable_window_is_refused_by_name() {
        for zero in ["0s", "0ms", "0m"] {
            let msg = problems(&format!("{MINIMAL}dedup_window = \"{zero}\"\n"));
            assert!(
                msg.contains("endpoint[0] (line 2).dedup_window: must be longer than 0"),
                "{zero}: {msg}"
            );
        }
        let msg = problems(&format!("{MINIMAL}dedup_window = \"soon\"\n"));
        assert!(msg.contains(".dedup_window: `soon`"), "{msg}");
        let msg = problems(&format!("{MINIMAL}dedup_window = 600\n"));
        assert!(msg.contains("dedup_window"), "{msg}");
    }

    #[test]
    fn thin_body_presets_default_to_their_retry_span() {
        assert_eq!(
            default_dedup_window("cielo"),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            default_dedup_window("picpay"),
            Some(Duration::from_secs(600))
        );
        for provider in [
            "rede",
            "iugu",
            "plowf",
            "pagarme",
            "relya",
            "stripe",
            "standard-webhooks",
            "svix",
            "github",
            "hmac",
        ] {
            assert_eq!(default_dedup_window(provider), None, "{provider}");
        }
    }

    // The warning's function, at its edges; `a_cielo_endpoint_...` below checks its wiring.
    #[test]
    fn a_long_window_on_a_thin_body_preset_is_a_warning() {
        let at = "endpoint[0] (line 1)";
        let long = Duration::from_secs(2 * 86_400);
        let warning = thin_body_warning(at, "cielo", "2d", long).expect("a warning");
        assert!(
            warning.starts_with(
                "endpoint[0] (line 1).dedup_window: `2d` is long for provider `cielo`"
            ),
            "{warning}"
        );
        assert!(warning.contains("default is 10 min"), "{warning}");
        let hour = THIN_BODY_WINDOW_LIMIT;
        assert_eq!(thin_body_warning(at, "cielo", "1h", hour), None);
        assert!(thin_body_warning(at, "cielo", "61m", hour + Duration::from_secs(60)).is_some());
        assert_eq!(
            thin_body_warning(at, "cielo", "10m", Duration::from_secs(600)),
            None
        );
        assert_eq!(thin_body_warning(at, "pagarme", "2d", long), None);
        let config = parse(&format!("{MINIMAL}dedup_window = \"30d\"\n")).unwrap();
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    /// A real `cielo` endpoint: its default window, and the warning through `parse`.
    #[test]
    fn a_cielo_endpoint_gets_its_short_window_and_a_long_one_is_warned_about() {
        let cielo = "[[endpoint]]\npath = \"/webhooks/cielo\"\nprovider = \"cielo\"\n\
                     credential_headers = [\"X-Shop-Key\"]\nsecret = \"shop-key-0123456789\"\n";
        let config = parse(cielo).unwrap();
        assert_eq!(
            config.endpoints[0].dedup_window,
            Some(Duration::from_secs(600))
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = parse(&format!("{cielo}dedup_window = \"2d\"\n")).unwrap();
        assert_eq!(
            config.endpoints[0].dedup_window,
            Some(Duration::from_secs(2 * 86_400))
        );
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("is long for provider `cielo`")),
            "{:?}",
            config.warnings
        );
    }
}
