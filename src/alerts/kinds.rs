//! The kinds of alert, and what one alert says: the short JSON an alert command reads on its
//! stdin (or a URL receives), with a sentence a human can act on.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::SHORTHAND_ROUTE;
use crate::time::rfc3339;

/// What happened since the last alert of one (kind, endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub count: u64,
    pub first: Option<i64>,
    pub last: Option<i64>,
    /// When the first of them happened (for `quiet`: the last webhook before the silence).
    pub since_ms: i64,
    /// For `duplicates`: the verified webhooks of the window the count is out of.
    pub out_of: Option<u64>,
    /// For `new_type`: the event types announced, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// What an alert is about. Each (kind, endpoint) is rate-limited on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Events went dead: every delivery attempt failed.
    Dead,
    /// An endpoint that has received webhooks received none for its `quiet_after`.
    Quiet,
    /// Over 5 % of the verified webhooks of the last 15 minutes were duplicates.
    Duplicates,
    /// Storage errors made portaria answer 503.
    Storage,
    /// Deliveries keep taking longer than 5 s.
    Slow,
    /// The canary's probes through `public_url` do not come back as portaria's: the gateways
    /// cannot deliver. Its "endpoint" is the public URL (the whole path, not one endpoint).
    Unreachable,
    /// They come back again, after an `unreachable` alert.
    Reachable,
    /// A route has been paused (`portaria route pause`) for over a day, and deliveries wait on
    /// it: a pause for maintenance that nobody ended.
    PausedLong,
    /// A burst of requests refused for their signature or timestamp on an endpoint that had
    /// none for an hour: the typical sign of a secret rotated at the gateway (or a clock off).
    Rejected,
    /// An event type the endpoint had never stored (past its first day): the gateway added or
    /// renamed one.
    NewType,
    /// Events that matched no route of a forwarding endpoint, still stored only after its
    /// `unrouted_after`: delivered nowhere.
    Unrouted,
    /// Events without a field their provider's events always carry (`verify::Carried`): the
    /// gateway changed its payload. Stored all the same.
    Drift,
    /// A reconcile run found what the gateway gave up on and portaria never received.
    Reconciled,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Dead,
        Kind::Quiet,
        Kind::Duplicates,
        Kind::Storage,
        Kind::Slow,
        Kind::Unreachable,
        Kind::Reachable,
        Kind::PausedLong,
        Kind::Rejected,
        Kind::NewType,
        Kind::Unrouted,
        Kind::Drift,
        Kind::Reconciled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Dead => "dead",
            Kind::Quiet => "quiet",
            Kind::Duplicates => "duplicates",
            Kind::Storage => "storage",
            Kind::Slow => "slow",
            Kind::Unreachable => "unreachable",
            Kind::Reachable => "reachable",
            Kind::PausedLong => "paused_long",
            Kind::Rejected => "rejected",
            Kind::NewType => "new_type",
            Kind::Unrouted => "unrouted",
            Kind::Drift => "drift",
            Kind::Reconciled => "reconciled",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert, as the command or URL receives it (one JSON object).
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    pub kind: &'static str,
    pub endpoint: String,
    /// The route whose deliveries went dead (`dead`); null for what concerns the endpoint as
    /// a whole (the other kinds).
    pub route: Option<String>,
    /// How many times it happened since the last alert of this kind and endpoint.
    pub count: u64,
    /// The events it concerns, when it concerns stored events (dead ones).
    pub first_event_id: Option<i64>,
    pub last_event_id: Option<i64>,
    pub message: String,
    /// When the alert was sent (RFC 3339, UTC).
    pub time: String,
    /// `unreachable`: the last failed probe's cause (`dns`, `tls`, `not_portaria`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// `new_type`: the event types never stored before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
}

impl Alert {
    /// The alert summarising `pending`, of one route of the endpoint when `route` says.
    /// `after` is the endpoint's duration of the kind: `quiet_after`, `unrouted_after`.
    pub fn new(
        kind: Kind,
        endpoint: &str,
        route: Option<&str>,
        pending: &Pending,
        after: Option<Duration>,
        now_ms: i64,
    ) -> Alert {
        Alert {
            kind: kind.as_str(),
            endpoint: endpoint.to_string(),
            route: route.map(str::to_string),
            count: pending.count,
            first_event_id: pending.first,
            last_event_id: pending.last,
            message: sentence(kind, endpoint, route, pending, after),
            time: rfc3339(now_ms),
            cause: None,
            event_types: pending.names.clone(),
        }
    }

    /// Adds a sentence to the message (what the cause was, how long the gateways wait).
    pub fn and(mut self, sentence: &str) -> Alert {
        if !sentence.is_empty() {
            self.message.push(' ');
            self.message.push_str(sentence);
        }
        self
    }

    /// The JSON text, one line, no trailing newline.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

fn sentence(
    kind: Kind,
    endpoint: &str,
    route: Option<&str>,
    p: &Pending,
    after: Option<Duration>,
) -> String {
    let n = p.count;
    let plural = |one: &'static str, many: &'static str| if n == 1 { one } else { many };
    match kind {
        Kind::Dead => {
            let ids = match (p.first, p.last) {
                (Some(a), Some(b)) if a != b => format!(" (ids {a} to {b})"),
                (Some(a), _) => format!(" (id {a})"),
                _ => String::new(),
            };
            // The one-route shorthand's route is the endpoint's only one: not worth a word.
            let (on, only) = match route.filter(|r| *r != SHORTHAND_ROUTE) {
                Some(r) => (format!(" on route {r}"), format!(" --route {r}")),
                None => (String::new(), String::new()),
            };
            format!(
                "{n} {} of endpoint {endpoint} went dead{on}{ids}: every delivery attempt \
                 failed. See `portaria events list --status dead --endpoint {endpoint}`; replay \
                 with `portaria events replay --dead --endpoint {endpoint}{only}`.",
                plural("event", "events")
            )
        }
        Kind::Quiet => format!(
            "endpoint {endpoint} has received no webhook for {} (since {}): is the gateway \
             still sending, the tunnel up, the URL registered?",
            after.map_or_else(|| "a while".to_string(), human),
            rfc3339(p.since_ms)
        ),
        Kind::Duplicates => format!(
            "{n} of the last {} verified webhooks to endpoint {endpoint} (15 minutes) were \
             duplicates, over 5 %: the gateway is redelivering; are answers slow or lost on the \
             way back?",
            p.out_of.unwrap_or(n)
        ),
        Kind::Storage => format!(
            "portaria answered 503 to {n} {} of endpoint {endpoint} because the database could \
             not store {} (disk full, I/O error or too slow); the gateway retries, but check the \
             disk and /readyz.",
            plural("webhook", "webhooks"),
            plural("it", "them")
        ),
        Kind::Slow => format!(
            "{n} {} of endpoint {endpoint} took longer than 5 s since {}: the target is slow; \
             events wait behind it.",
            plural("delivery", "deliveries"),
            rfc3339(p.since_ms)
        ),
        Kind::Unreachable => format!(
            "the public URL {endpoint} does not reach portaria ({n} failed {} since {}): the \
             gateways cannot deliver; check the tunnel and the network.",
            plural("probe", "probes"),
            rfc3339(p.since_ms)
        ),
        Kind::Reachable => format!(
            "the public URL {endpoint} reaches portaria again (it failed since {}): the \
             gateways' retries get through now; what a gateway gave up on meanwhile must be \
             resent from its side.",
            rfc3339(p.since_ms)
        ),
        Kind::Rejected => format!(
            "{n} {} to endpoint {endpoint} refused for a bad signature or timestamp since {}, \
             after an hour with none: was the secret rotated at the gateway, or is a clock off? \
             See `portaria events rejected --endpoint {endpoint}`; `portaria verify --rejected \
             ID` explains one.",
            plural("request", "requests"),
            rfc3339(p.since_ms)
        ),
        Kind::NewType => {
            // The sentence names the first ten; `event_types` has them all.
            let mut names: Vec<String> =
                p.names.iter().take(10).map(|t| format!("`{t}`")).collect();
            if p.names.len() > 10 {
                names.push(format!("and {} more", p.names.len() - 10));
            }
            let first = p.names.first().map_or("TYPE", String::as_str);
            format!(
                "endpoint {endpoint} received {n} event {} it had never stored: {}{}. Has the \
                 gateway added or renamed {}? Check that your routes' `events` filters and \
                 your handler know {}: `portaria events list --endpoint {endpoint} --type \
                 {first}`.",
                plural("type", "types"),
                names.join(", "),
                ids(p),
                plural("one", "types"),
                plural("it", "them")
            )
        }
        Kind::Unrouted => format!(
            "{n} {} of endpoint {endpoint}{} matched no route and {} still stored only after \
             {} (since {}): delivered nowhere. If {} should have gone somewhere, add a route \
             (or widen a route's `events`): it applies to events received after it. See \
             `portaria events list --endpoint {endpoint} --status stored`.",
            plural("event", "events"),
            ids(p),
            plural("is", "are"),
            after.map_or_else(|| "a while".to_string(), human),
            rfc3339(p.since_ms),
            plural("it", "they")
        ),
        Kind::Drift => format!(
            "{n} {} of endpoint {endpoint}{} lacked a field its provider's events always carry \
             (the status page names it on each event): has the gateway changed its payload? \
             {} stored and forwarded as usual; check your handler.",
            plural("event", "events"),
            ids(p),
            plural("It was", "They were")
        ),
        Kind::Reconciled => format!(
            "`portaria reconcile` found what the gateway gave up on and endpoint {endpoint} \
             never received ({n} since {}): the tunnel or this machine was down longer than \
             the gateway kept trying. See `portaria reconcile --endpoint {endpoint} --dry-run` \
             and docs/reconcile.md.",
            rfc3339(p.since_ms)
        ),
        Kind::PausedLong => {
            let (on, only) = match route.filter(|r| *r != SHORTHAND_ROUTE) {
                Some(r) => (format!("route {r} of endpoint {endpoint}"), r),
                None => (format!("endpoint {endpoint}'s route"), SHORTHAND_ROUTE),
            };
            format!(
                "{on} has been paused since {} and {n} {} on it: resume it with \
                 `portaria route resume --endpoint {endpoint} --route {only}` (or on the status \
                 page) when the target is ready.",
                rfc3339(p.since_ms),
                plural("delivery waits", "deliveries wait")
            )
        }
    }
}

/// ` (id 3)`, ` (ids 3 to 9)`: the events a summary is about, when it knows them.
fn ids(p: &Pending) -> String {
    match (p.first, p.last) {
        (Some(a), Some(b)) if a != b => format!(" (ids {a} to {b})"),
        (Some(a), _) | (None, Some(a)) => format!(" (id {a})"),
        _ => String::new(),
    }
}

/// `6h`, `30m`, `2s`, `250ms`: the config's own style.
pub fn human(d: Duration) -> String {
    let (secs, ms) = (d.as_secs(), d.subsec_millis());
    match (secs, ms) {
        (0, ms) => format!("{ms}ms"),
        (s, 0) if s % 86_400 == 0 => format!("{}d", s / 86_400),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(count: u64, first: Option<i64>, last: Option<i64>) -> Pending {
        Pending {
            count,
            first,
            last,
            since_ms: 0,
            out_of: None,
            names: Vec::new(),
        }
    }

    #[test]
    fn an_alert_is_one_json_object_with_every_field() {
        let alert = Alert::new(
            Kind::Dead,
            "pagarme",
            Some("default"),
            &pending(2, Some(7), Some(9)),
            None,
            0,
        );
        let value: serde_json::Value = serde_json::from_slice(&alert.to_json()).unwrap();
        assert_eq!(value["kind"], "dead");
        assert_eq!(value["endpoint"], "pagarme");
        assert_eq!(value["route"], "default");
        assert_eq!(value["count"], 2);
        assert_eq!(value["first_event_id"], 7);
        assert_eq!(value["last_event_id"], 9);
        assert_eq!(value["time"], "1970-01-01T00:00:00.000Z");
        let message = value["message"].as_str().unwrap();
        assert!(message.starts_with("2 events of endpoint pagarme went dead (ids 7 to 9)"));
        assert!(!alert.to_json().contains(&b'\n'), "one line");
    }

    #[test]
    fn sentences_name_what_happened() {
        let one = Alert::new(
            Kind::Dead,
            "a",
            None,
            &pending(1, Some(3), Some(3)),
            None,
            0,
        );
        assert!(
            one.message
                .starts_with("1 event of endpoint a went dead (id 3)")
        );
        let erp = Alert::new(
            Kind::Dead,
            "a",
            Some("erp"),
            &pending(1, Some(3), None),
            None,
            0,
        );
        assert!(
            erp.message
                .starts_with("1 event of endpoint a went dead on route erp (id 3)"),
            "{}",
            erp.message
        );
        assert!(
            erp.message
                .contains("`portaria events replay --dead --endpoint a --route erp`"),
            "{}",
            erp.message
        );
        let quiet = Alert::new(
            Kind::Quiet,
            "a",
            None,
            &pending(1, None, None),
            Some(Duration::from_secs(6 * 3600)),
            0,
        );
        assert!(
            quiet.message.contains("no webhook for 6h"),
            "{}",
            quiet.message
        );
        let mut dup = pending(3, None, None);
        dup.out_of = Some(40);
        let dup = Alert::new(Kind::Duplicates, "a", None, &dup, None, 0);
        assert!(
            dup.message.starts_with("3 of the last 40"),
            "{}",
            dup.message
        );
        let storage = Alert::new(Kind::Storage, "a", None, &pending(2, None, None), None, 0);
        assert!(storage.message.contains("503 to 2 webhooks"));
        let slow = Alert::new(Kind::Slow, "a", None, &pending(3, None, None), None, 0);
        assert!(
            slow.message
                .starts_with("3 deliveries of endpoint a took longer than 5 s")
        );
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        let mut types = pending(12, Some(3), Some(40));
        types.names = (0..12).map(|n| format!("t{n}")).collect();
        let new_type = Alert::new(Kind::NewType, "a", None, &types, None, 0);
        assert!(
            new_type.message.starts_with(
                "endpoint a received 12 event types it had never stored: `t0`, `t1`, "
            ) && new_type.message.contains("`t9`, and 2 more (ids 3 to 40)."),
            "{}",
            new_type.message
        );
        assert_eq!(new_type.event_types.len(), 12, "the JSON names them all");
        let unrouted = Alert::new(
            Kind::Unrouted,
            "a",
            None,
            &pending(1, Some(7), Some(7)),
            Some(Duration::from_secs(3600)),
            0,
        );
        assert!(
            unrouted.message.starts_with(
                "1 event of endpoint a (id 7) matched no route and is still stored only after 1h"
            ),
            "{}",
            unrouted.message
        );
        assert_eq!(human(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human(Duration::from_secs(120)), "2m");
    }
}
