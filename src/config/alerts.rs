//! `[alerts]`: where alerts to the owner go (a command, a local URL, or both), how often one
//! kind may alert about one endpoint, and the per-endpoint `quiet_after` and `unrouted_after`.
//! Checked here like the rest of the file: every problem collected, none fatal on its own.

use std::time::Duration;

use super::Route;
use super::raw::RawAlerts;
use super::validate::parse_duration;
use super::validator::Validator;

/// At most one alert per kind and endpoint per this, unless `alert_every` says otherwise.
pub const DEFAULT_ALERT_EVERY: Duration = Duration::from_secs(3600);

/// How long an event that matched no route may stay stored only before the `unrouted` alert,
/// unless `unrouted_after` says otherwise.
pub const DEFAULT_UNROUTED_AFTER: Duration = Duration::from_secs(3600);

/// How long an alert command may run, or a POST take, unless `timeout_secs` says otherwise.
pub const DEFAULT_ALERT_TIMEOUT: Duration = Duration::from_secs(10);

/// The validated `[alerts]` table: at least one of `command` and `url` is set.
#[derive(Debug, Clone)]
pub struct Alerts {
    /// Program and arguments, run without a shell; the alert's JSON on its stdin.
    pub command: Option<Vec<String>>,
    /// A plain `http://` URL the alert's JSON is POSTed to.
    pub url: Option<http::Uri>,
    /// At most one alert per (kind, endpoint) per this.
    pub every: Duration,
    /// Bound on one run of the command, and on one POST.
    pub timeout: Duration,
}

impl Validator<'_> {
    pub(super) fn alerts(&mut self, raw: Option<RawAlerts>) -> Option<Alerts> {
        let raw = raw?;
        if raw.command.is_none() && raw.url.is_none() {
            self.problem(
                "alerts: give a command (e.g. command = [\"/usr/local/bin/alert\"]) or a url",
            );
        }
        if let Some(argv) = &raw.command
            && argv.first().is_none_or(|program| program.is_empty())
        {
            self.problem("alerts.command: give the program and its arguments, e.g. [\"/usr/local/lib/portaria/ntfy.sh\"]");
        }
        let url = raw.url.and_then(|url| match url.parse::<http::Uri>() {
            Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => Some(uri),
            Ok(_) => {
                self.problem(format!("alerts.url: `{url}` must be a plain http:// URL (alerts go to a local program; use a command for a remote service)"));
                None
            }
            Err(e) => {
                self.problem(format!("alerts.url: `{url}` is not a URL: {e}"));
                None
            }
        });
        let every = match raw.alert_every.as_deref().map(parse_duration) {
            None => DEFAULT_ALERT_EVERY,
            Some(Ok(d)) if !d.is_zero() => d,
            Some(Ok(_)) => {
                self.problem("alerts.alert_every: must be more than 0");
                DEFAULT_ALERT_EVERY
            }
            Some(Err(why)) => {
                self.problem(format!("alerts.alert_every: {why}"));
                DEFAULT_ALERT_EVERY
            }
        };
        if raw.timeout_secs == Some(0) {
            self.problem("alerts.timeout_secs: must be at least 1");
        }
        let timeout = raw
            .timeout_secs
            .map_or(DEFAULT_ALERT_TIMEOUT, |s| Duration::from_secs(s.max(1)));
        Some(Alerts {
            command: raw.command,
            url,
            every,
            timeout,
        })
    }

    /// An endpoint's `unrouted_after`, [`DEFAULT_UNROUTED_AFTER`] unless set; set on an
    /// endpoint without routes (every event of it is stored only, none is unrouted), a warning.
    pub(super) fn unrouted_after(
        &mut self,
        at: &str,
        raw: Option<&str>,
        routes: &[Route],
    ) -> Duration {
        let Some(raw) = raw else {
            return DEFAULT_UNROUTED_AFTER;
        };
        if routes.is_empty() {
            self.warnings.push(format!(
                "{at}.unrouted_after: this endpoint forwards nothing (no `forward`, no route): \
                 its events are stored only by design, so none is unrouted"
            ));
        }
        match parse_duration(raw) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                self.problem(format!("{at}.unrouted_after: must be more than 0"));
                DEFAULT_UNROUTED_AFTER
            }
            Err(why) => {
                self.problem(format!("{at}.unrouted_after: {why}"));
                DEFAULT_UNROUTED_AFTER
            }
        }
    }

    /// An endpoint's `quiet_after`: off unless set.
    pub(super) fn quiet_after(&mut self, at: &str, raw: Option<&str>) -> Option<Duration> {
        match parse_duration(raw?) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                self.problem(format!("{at}.quiet_after: must be more than 0"));
                None
            }
            Err(why) => {
                self.problem(format!("{at}.quiet_after: {why}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MINIMAL, parse, problems};
    use super::*;

    #[test]
    fn alerts_are_off_by_default_and_parse_with_their_defaults() {
        let config = parse(MINIMAL).unwrap();
        assert!(config.alerts.is_none());
        assert_eq!(config.endpoints[0].quiet_after, None);
        let config = parse(&format!(
            "[alerts]\ncommand = [\"/bin/alert\", \"-v\"]\n{MINIMAL}quiet_after = \"6h\"\n"
        ))
        .unwrap();
        let alerts = config.alerts.unwrap();
        assert_eq!(alerts.command.unwrap(), ["/bin/alert", "-v"]);
        assert!(alerts.url.is_none());
        assert_eq!(alerts.every, DEFAULT_ALERT_EVERY);
        assert_eq!(alerts.timeout, DEFAULT_ALERT_TIMEOUT);
        assert_eq!(
            config.endpoints[0].quiet_after,
            Some(Duration::from_secs(6 * 3600))
        );
        let config = parse(&format!(
            "[alerts]\nurl = \"http://127.0.0.1:9/alerts\"\nalert_every = \"2s\"\ntimeout_secs = 3\n{MINIMAL}"
        ))
        .unwrap();
        let alerts = config.alerts.unwrap();
        assert_eq!(alerts.url.unwrap().to_string(), "http://127.0.0.1:9/alerts");
        assert_eq!(alerts.every, Duration::from_secs(2));
        assert_eq!(alerts.timeout, Duration::from_secs(3));
    }

    #[test]
    fn bad_alert_settings_are_named() {
        for (alerts, expected) in [
            ("[alerts]\n", "alerts: give a command"),
            (
                "[alerts]\ncommand = []\n",
                "alerts.command: give the program",
            ),
            (
                "[alerts]\nurl = \"https://ntfy.sh/x\"\n",
                "alerts.url: `https://ntfy.sh/x` must be a plain http:// URL",
            ),
            (
                "[alerts]\ncommand = [\"/a\"]\nalert_every = \"soon\"\n",
                "alerts.alert_every: expected a number",
            ),
            (
                "[alerts]\ncommand = [\"/a\"]\nalert_every = \"0s\"\n",
                "alerts.alert_every: must be more than 0",
            ),
            (
                "[alerts]\ncommand = [\"/a\"]\ntimeout_secs = 0\n",
                "alerts.timeout_secs: must be at least 1",
            ),
            ("[alerts]\ncommand = [\"/a\"]\nevery = \"1h\"\n", "every"),
        ] {
            let msg = problems(&format!("{alerts}{MINIMAL}"));
            assert!(msg.contains(expected), "{alerts}: {msg}");
        }
        let msg = problems(&format!(
            "[alerts]\ncommand = [\"/a\"]\n{MINIMAL}quiet_after = \"6 hours\"\n"
        ));
        assert!(msg.contains("endpoint[0] (line 4).quiet_after"), "{msg}");
    }

    #[test]
    fn unrouted_after_is_an_hour_unless_set_and_a_duration() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.endpoints[0].unrouted_after, DEFAULT_UNROUTED_AFTER);
        let routed = format!(
            "{MINIMAL}forward = {{ command = [\"/bin/true\"] }}\nunrouted_after = \"15m\"\n"
        );
        let config = parse(&routed).unwrap();
        assert_eq!(
            config.endpoints[0].unrouted_after,
            Duration::from_secs(15 * 60)
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        for (value, expected) in [
            ("\"soon\"", "unrouted_after: expected a number"),
            ("\"0s\"", "unrouted_after: must be more than 0"),
        ] {
            let msg = problems(&format!("{MINIMAL}unrouted_after = {value}\n"));
            assert!(msg.contains("endpoint[0] (line 2).unrouted_after"), "{msg}");
            assert!(msg.contains(expected), "{value}: {msg}");
        }
        let stored_only = parse(&format!("{MINIMAL}unrouted_after = \"2h\"\n")).unwrap();
        assert!(
            stored_only
                .warnings
                .iter()
                .any(|w| w.contains("unrouted_after") && w.contains("forwards nothing")),
            "{:?}",
            stored_only.warnings
        );
    }

    #[test]
    fn quiet_after_without_alerts_is_a_warning() {
        let config = parse(&format!("{MINIMAL}quiet_after = \"1h\"\n")).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("quiet_after") && w.contains("[alerts]")),
            "{:?}",
            config.warnings
        );
    }
}
