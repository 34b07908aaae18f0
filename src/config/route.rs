//! Routes: where an endpoint's events go. Each `[[endpoint.route]]` is a target of its own,
//! with a filter on the event type (`events`, [`EventGlob`]s), its delivery settings
//! ([`Forward`]) and an optional ordering key (`order_by`, [`OrderBy`]: a JSON pointer into
//! the body or a header). `forward`, `retry` and `concurrency` written directly
//! on an endpoint are the one-route shorthand: a route named [`SHORTHAND_ROUTE`] that takes
//! every event (the name databases from before routes have their deliveries under).
//!
//! At intake the routes whose globs take the event type are chosen, each with the event's
//! ordering key (`Endpoint::deliveries_for`), and one `deliveries` row per route goes in with
//! the event; an event no route takes is `stored` (`portaria_events_unrouted_total`). A route
//! added, removed or refiltered by a reload applies to events received after it: the rows
//! already written keep their routes, and their keys, so ordering survives a restart too.

use std::collections::HashSet;

use http::HeaderMap;
use toml::Spanned;

use super::Forward;
use super::raw::{RawForward, RawRoute};
use super::validate::valid_name;
use super::validator::Validator;
use crate::dedup::DedupRule;
use crate::verify::{Field, Verifier};

/// The name of the route that `forward` directly on an endpoint makes.
pub const SHORTHAND_ROUTE: &str = "default";

/// One target of an endpoint, and which of its events go there.
#[derive(Debug)]
pub struct Route {
    pub name: String,
    /// The event types it takes; empty: every event (also those without a type).
    pub events: Vec<EventGlob>,
    pub forward: Forward,
    /// Events with the same key go out in arrival order, different keys in parallel.
    pub order_by: Option<OrderBy>,
}

impl Route {
    /// Whether an event of this type goes to this route. An event without a type matches
    /// only a route without `events`.
    pub fn matches(&self, event_type: Option<&str>) -> bool {
        if self.events.is_empty() {
            return true;
        }
        event_type.is_some_and(|t| self.events.iter().any(|glob| glob.matches(t)))
    }

    /// The event's ordering key on this route: None without `order_by`, or when the event does
    /// not carry the key (it is then a lane of its own).
    pub fn order_key(&self, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        self.order_by.as_ref()?.0.extract(headers, body).ok()
    }
}

/// A glob on the event type: `*` matches any run of characters (dots included), everything
/// else itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventGlob(String);

impl EventGlob {
    /// Refuses an empty glob, whitespace and control characters, and `?[]{}` (kept for a
    /// richer syntax later, so that no config means something else then).
    pub fn parse(text: &str) -> Result<EventGlob, String> {
        if text.is_empty() {
            return Err("an empty glob matches nothing".into());
        }
        if let Some(c) = text
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || "?[]{}".contains(*c))
        {
            return Err(format!(
                "`{c}` is not allowed in a glob (only `*` is a wildcard)"
            ));
        }
        Ok(EventGlob(text.to_string()))
    }

    pub fn matches(&self, event_type: &str) -> bool {
        glob_matches(self.0.as_bytes(), event_type.as_bytes())
    }
}

impl std::fmt::Display for EventGlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `*` as any run of bytes; iterative with one backtrack point, so linear-ish, never recursive.
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// `order_by = "json:<pointer>" | "header:<name>"`: where an event's ordering key is read.
#[derive(Debug)]
pub struct OrderBy(DedupRule);

impl OrderBy {
    pub fn parse(text: &str) -> Result<OrderBy, String> {
        if !(text.starts_with("json:") || text.starts_with("header:")) {
            return Err(format!(
                "`{text}`: give `json:<pointer>` (e.g. json:/data/id) or `header:<name>`"
            ));
        }
        let rule: DedupRule = text.parse().map_err(|e| format!("`{text}`: {e}"))?;
        Ok(OrderBy(rule))
    }

    /// Whether it reads the event type's own source: the endpoint's `event_type` field, else
    /// the provider's event-type header, or for a provider without one, the body's `type` or
    /// `event`.
    fn reads_event_type(&self, verifier: &Verifier) -> bool {
        let header = verifier.event_type_header();
        match (&self.0, verifier.event_type_field()) {
            (DedupRule::Header(name), Some(Field::Header(field))) => name == field,
            (DedupRule::JsonPointer(pointer), Some(Field::Json(field))) => pointer == field,
            (_, Some(_)) => false,
            (DedupRule::Header(name), None) => header.is_some_and(|h| name.as_str() == h),
            (DedupRule::JsonPointer(pointer), None) => {
                header.is_none() && (pointer == "/type" || pointer == "/event")
            }
            _ => false,
        }
    }
}

/// Stored headers (`name: value\r\n` each) back as a map, for reading an ordering key of an
/// archived event; a line that is not a header is skipped.
pub fn headers_from_blob(blob: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in blob.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
}

impl Validator<'_> {
    /// A warning for each route of endpoint `name` that relies on an event type its provider
    /// does not sign ([`Verifier::event_type_signed`]): an `events` filter, or an `order_by`
    /// that reads the type's own source. Whoever captured one delivery can send it again
    /// with another type: to a route it was never meant for, or to none (then it is only
    /// stored, and the genuine delivery, when it comes, is its duplicate).
    pub(super) fn unsigned_event_type(
        &mut self,
        at: &str,
        name: &str,
        verifier: &Verifier,
        routes: &[Route],
    ) {
        if verifier.event_type_signed() {
            return;
        }
        let provider = verifier.provider();
        let source = match (verifier.event_type_field(), verifier.event_type_header()) {
            (Some(field), _) => format!("`{field}`, which provider `{provider}` does not sign"),
            (None, Some(header)) => {
                format!("the `{header}` header, which provider `{provider}` does not sign")
            }
            (None, None) => format!("the body, which provider `{provider}` does not sign"),
        };
        let why = "whoever captured one delivery can send it again under another type, to \
                   another route or to none; the route's program is told \
                   (PORTARIA_EVENT_TYPE_SIGNED=0) and should check the type against what is signed";
        for route in routes {
            let at = format!("{at} (`{name}`), route `{}`", route.name);
            if !route.events.is_empty() {
                self.warnings.push(format!(
                    "{at}: its `events` filter relies on the event type, read from {source}: {why}"
                ));
            }
            if route
                .order_by
                .as_ref()
                .is_some_and(|o| o.reads_event_type(verifier))
            {
                self.warnings.push(format!(
                    "{at}: its `order_by` reads the event type, from {source}: {why}"
                ));
            }
        }
    }

    /// An endpoint's routes: its `[[endpoint.route]]` tables, or the shorthand, never both.
    pub(super) fn routes(
        &mut self,
        at: &str,
        shorthand: Option<RawForward>,
        retry: Option<Vec<String>>,
        concurrency: Option<usize>,
        tables: Option<Vec<Spanned<RawRoute>>>,
    ) -> Vec<Route> {
        let Some(tables) = tables else {
            return self
                .forward(at, shorthand, retry, concurrency)
                .map(|forward| Route {
                    name: SHORTHAND_ROUTE.to_string(),
                    events: Vec::new(),
                    forward,
                    order_by: None,
                })
                .into_iter()
                .collect();
        };
        if shorthand.is_some() || retry.is_some() || concurrency.is_some() {
            self.problem(format!(
                "{at}: forward, retry and concurrency directly on an endpoint are the one-route \
                 shorthand; with [[endpoint.route]] tables, put them in the routes"
            ));
        }
        if tables.is_empty() {
            self.problem(format!("{at}.route: the list of routes is empty"));
        }
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, spanned) in tables.into_iter().enumerate() {
            let line = self.line_of(spanned.span());
            let at = format!("{at}.route[{i}] (line {line})");
            if let Some(route) = self.route(&at, spanned) {
                if !names.insert(route.name.clone()) {
                    self.problem(format!(
                        "{at}.name: `{}` is used twice in this endpoint",
                        route.name
                    ));
                }
                out.push(route);
            }
        }
        out
    }

    fn route(&mut self, at: &str, raw: Spanned<RawRoute>) -> Option<Route> {
        let raw = raw.into_inner();
        let before = self.problems.len();
        let name = match raw.name {
            Some(name) if !name.is_empty() && valid_name(&name) => name,
            Some(name) => {
                self.problem(format!(
                    "{at}.name: `{name}` must be non-empty, of letters, digits, `-`, `_` and `.`"
                ));
                String::new()
            }
            None => {
                self.problem(format!("{at}.name: missing (e.g. name = \"erp\")"));
                String::new()
            }
        };
        let events = match raw.events {
            None => Vec::new(),
            Some(list) if list.is_empty() => {
                self.problem(format!(
                    "{at}.events: an empty list matches nothing; leave it out to take every event"
                ));
                Vec::new()
            }
            Some(list) => list
                .iter()
                .filter_map(|g| match EventGlob::parse(g) {
                    Ok(glob) => Some(glob),
                    Err(why) => {
                        self.problem(format!("{at}.events: `{g}`: {why}"));
                        None
                    }
                })
                .collect(),
        };
        let order_by = match raw.order_by.as_deref().map(OrderBy::parse) {
            None => None,
            Some(Ok(order_by)) => Some(order_by),
            Some(Err(why)) => {
                self.problem(format!("{at}.order_by: {why}"));
                None
            }
        };
        if raw.forward.is_none() {
            self.problem(format!(
                "{at}.forward: missing (e.g. forward = {{ command = [\"/usr/local/bin/erp-import\"] }})"
            ));
        }
        let forward = self.forward(at, raw.forward, raw.retry, raw.concurrency);
        if self.problems.len() != before {
            return None;
        }
        Some(Route {
            name,
            events,
            forward: forward?,
            order_by,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{MINIMAL, parse, problems};

    const ERP: &str = "[[endpoint.route]]\nname = \"erp\"\nevents = [\"order.paid\", \"charge.*\"]\n\
        forward = { command = [\"/bin/true\"] }\nconcurrency = 4\norder_by = \"json:/data/id\"\n";
    const AUDIT: &str = "[[endpoint.route]]\nname = \"audit\"\nforward = { url = \"http://127.0.0.1:3000/audit\" }\n";

    #[test]
    fn routes_parse_with_filters_order_and_their_own_settings() {
        let config = parse(&format!("{MINIMAL}{ERP}{AUDIT}")).unwrap();
        let routes = &config.endpoints[0].routes;
        assert_eq!(routes.len(), 2);
        let (erp, audit) = (&routes[0], &routes[1]);
        assert_eq!((erp.name.as_str(), audit.name.as_str()), ("erp", "audit"));
        assert_eq!(erp.forward.concurrency, 4);
        assert_eq!(audit.forward.concurrency, 1);
        assert!(erp.order_by.is_some() && audit.order_by.is_none());
        assert!(erp.matches(Some("order.paid")) && erp.matches(Some("charge.refunded")));
        assert!(!erp.matches(Some("order.created")) && !erp.matches(None));
        assert!(audit.matches(None) && audit.matches(Some("anything")));
        // The shorthand is one route, `default`, taking every event.
        let shorthand = parse(&format!(
            "{MINIMAL}forward = {{ command = [\"/bin/true\"] }}\n"
        ))
        .unwrap();
        let [route] = shorthand.endpoints[0].routes.as_slice() else {
            panic!("one route")
        };
        assert_eq!(route.name, SHORTHAND_ROUTE);
        assert!(route.events.is_empty() && route.order_by.is_none());
    }

    #[test]
    fn bad_routes_are_named_with_their_line() {
        let twice = problems(&format!("{MINIMAL}{AUDIT}{AUDIT}"));
        assert!(twice.contains("route[1] (line"), "{twice}");
        assert!(
            twice.contains("`audit` is used twice in this endpoint"),
            "{twice}"
        );
        let both = problems(&format!(
            "{MINIMAL}forward = {{ command = [\"/bin/true\"] }}\n{AUDIT}"
        ));
        assert!(both.contains("one-route shorthand"), "{both}");
        let retry_too = problems(&format!("{MINIMAL}retry = [\"1s\"]\n{AUDIT}"));
        assert!(retry_too.contains("one-route shorthand"), "{retry_too}");
        let name = problems(&format!("{MINIMAL}{}", AUDIT.replace("audit", "a b")));
        assert!(name.contains(".name: `a b` must be"), "{name}");
        let glob = problems(&format!("{MINIMAL}{}", ERP.replace("charge.*", "charge.?")));
        assert!(glob.contains(".events: `charge.?`"), "{glob}");
        let empty = problems(&format!(
            "{MINIMAL}{}",
            ERP.replace("\"order.paid\", \"charge.*\"", "")
        ));
        assert!(empty.contains("an empty list matches nothing"), "{empty}");
        let order = problems(&format!(
            "{MINIMAL}{}",
            ERP.replace("json:/data/id", "body-sha256")
        ));
        assert!(order.contains(".order_by: `body-sha256`"), "{order}");
        let pointer = problems(&format!(
            "{MINIMAL}{}",
            ERP.replace("json:/data/id", "json:data")
        ));
        assert!(pointer.contains(".order_by:"), "{pointer}");
        let no_forward = problems(&format!("{MINIMAL}[[endpoint.route]]\nname = \"x\"\n"));
        assert!(
            no_forward.contains("route[0] (line") && no_forward.contains(".forward: missing"),
            "{no_forward}"
        );
        let no_name = problems(&format!(
            "{MINIMAL}{}",
            AUDIT.replace("name = \"audit\"\n", "")
        ));
        assert!(no_name.contains(".name: missing"), "{no_name}");
        let bad_concurrency = problems(&format!(
            "{MINIMAL}{}",
            ERP.replace("concurrency = 4", "concurrency = 0")
        ));
        assert!(
            bad_concurrency.contains("concurrency: must be between 1 and 64"),
            "{bad_concurrency}"
        );
    }

    #[test]
    fn globs_match_with_star_as_any_run() {
        let glob = |g: &str| EventGlob::parse(g).unwrap();
        assert!(glob("order.paid").matches("order.paid"));
        assert!(!glob("order.paid").matches("order.paid2"));
        assert!(glob("charge.*").matches("charge.refunded"));
        assert!(glob("charge.*").matches("charge.a.b"));
        assert!(!glob("charge.*").matches("charges.x"));
        assert!(glob("*.paid").matches("order.paid"));
        assert!(glob("*").matches(""));
        assert!(glob("a*b*c").matches("aXXbYYc"));
        assert!(!glob("a*b*c").matches("aXXbYY"));
        assert!(EventGlob::parse("").is_err());
        assert!(EventGlob::parse("a b").is_err());
        assert!(EventGlob::parse("charge.?").is_err());
    }

    #[test]
    fn a_route_relying_on_an_unsigned_event_type_is_a_warning() {
        // GitHub's type is its `X-GitHub-Event` header, which its signature does not cover.
        let filter = format!("{MINIMAL}{ERP}{AUDIT}");
        let warnings = parse(&filter).unwrap().warnings;
        let [warning] = warnings.as_slice() else {
            panic!("one warning, for the filtering route: {warnings:?}")
        };
        assert!(
            warning
                .starts_with("endpoint[0] (line 2) (`github`), route `erp`: its `events` filter"),
            "{warning}"
        );
        assert!(warning.contains("`x-github-event` header"), "{warning}");
        assert!(warning.contains("another type"), "{warning}");
        let by_type = ERP.replace("json:/data/id", "header:X-GitHub-Event");
        let warnings = parse(&format!("{MINIMAL}{by_type}")).unwrap().warnings;
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].contains("its `order_by` reads the event type"),
            "{warnings:?}"
        );
        // Mercado Pago's type is in a body it does not sign.
        let mp = MINIMAL.replace("github", "mercadopago");
        let warnings = parse(&format!(
            "{mp}{}",
            ERP.replace("json:/data/id", "json:/type")
        ))
        .unwrap()
        .warnings;
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("the body, which provider `mercadopago`"),
            "{warnings:?}"
        );
        // Stripe signs the body its type is read from; no filter, no ordering by the type,
        // nothing relied on.
        let stripe = MINIMAL.replace("github", "stripe");
        assert_eq!(
            parse(&format!("{stripe}{ERP}")).unwrap().warnings,
            Vec::<String>::new()
        );
        let plain = format!("{MINIMAL}{AUDIT}");
        assert_eq!(parse(&plain).unwrap().warnings, Vec::<String>::new());
        // An `event_type` field decides: GitHub's body is signed, so no warning; a header it
        // does not sign is named, and an `order_by` reading that field warns too.
        let body = MINIMAL.replace("secret =", "event_type = \"json:/action\"\nsecret =");
        let by_field = ERP.replace("json:/data/id", "json:/action");
        let warnings = parse(&format!("{body}{by_field}")).unwrap().warnings;
        assert_eq!(warnings, Vec::<String>::new());
        let header = MINIMAL.replace("secret =", "event_type = \"header:x-topic\"\nsecret =");
        let by_topic = ERP.replace("json:/data/id", "header:X-Topic");
        let warnings = parse(&format!("{header}{by_topic}")).unwrap().warnings;
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("read from `header:x-topic`, which provider `github` does not"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("its `order_by` reads the event type"));
        // With a field, the provider's own header is not the type's source any more.
        let gh_header = ERP.replace("json:/data/id", "header:X-GitHub-Event");
        let warnings = parse(&format!("{header}{gh_header}")).unwrap().warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn order_by_reads_json_or_a_header_only() {
        assert!(OrderBy::parse("json:/data/id").is_ok());
        assert!(OrderBy::parse("header:x-object").is_ok());
        assert!(OrderBy::parse("body-sha256").is_err());
        assert!(OrderBy::parse("json:data").is_err());
    }
}
