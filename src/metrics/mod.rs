//! Metrics: one [`Metrics`] per `serve`, shared by intake, the forwarding worker and the admin
//! listener, written out in the Prometheus text format by the `prometheus-client` crate.
//!
//! Every label value is a configured endpoint name, `-` (a request to a path no endpoint has),
//! or one of a fixed list of outcomes: never anything a client sent, so the number of series is
//! fixed by the configuration. All series exist from the start, at zero, so `rate()` sees the
//! first increment: one `prometheus-client` `Registry`, filled from the [`Series`] (endpoint
//! name, its route names) the server lists. Intake calls [`Metrics::request`], the worker
//! [`Metrics::delivery`], the canary `canary_probe` (its series only when it runs), `/metrics`
//! [`Metrics::render`], the alerts task `Metrics::facts`.
//!
//! Counters and histograms move as things happen. The queue gauges (pending, age of the oldest
//! pending event, dead) are read from the database at scrape time
//! ([`crate::store::Store::queue_stats`]): the database is the truth, and `portaria events
//! replay` in another process changes it. The duplicate ratio comes from a 15-minute
//! [`DuplicateWindow`] per endpoint, the same one that raises the duplicate warning
//! (docs/operations.md, "Metrics and health").

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod canary;
mod duplicate_window;
mod facts;
mod reconcile;
mod scrape;
pub use canary::PROBE_OK;
pub use duplicate_window::{DuplicateAlert, DuplicateWindow};
pub use facts::EndpointFacts;

/// The `Content-Type` of what [`Metrics::render`] writes (text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

pub use crate::config::UNKNOWN_ENDPOINT;

/// A verified request that stored a new event: counted in the duplicate window.
pub const ACCEPTED: &str = "accepted";
/// A verified request whose event was already stored: counted in the duplicate window.
pub const DUPLICATE: &str = "duplicate";

/// Every outcome label intake gives for a configured endpoint (`not_found` belongs to `-`
/// alone). A label missing here still counts (its series is created on first use); listing it
/// only makes the series exist at zero from the start.
pub const REQUEST_OUTCOMES: [&str; 14] = [
    "accepted",
    "duplicate",
    "bad_signature",
    "stale_timestamp",
    "too_large",
    "bad_request",
    "storage_error",
    "body_timeout",
    "over_budget",
    "cut_for_room",
    "method_not_allowed",
    "handshake",
    "forbidden",
    "client_cert",
];

/// What one delivery attempt came to: `failed` will be retried, `dead` was the last try.
pub const DELIVERY_OUTCOMES: [&str; 3] = ["delivered", "failed", "dead"];

/// Request latency, seconds. An accepted webhook costs one group-committed fsync: about a
/// millisecond on an SSD, tens to hundreds on an SD card; the top buckets catch slow bodies.
const REQUEST_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Delivery latency, seconds: a local command or URL, up to the 30 s default timeout. 5 s is
/// the slow-delivery line (docs/operations.md, "Metrics and health").
const DELIVERY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A delivery attempt longer than this is slow (the same line as `forward::SLOW_DELIVERY`,
/// which `server` checks at compile time); [`Metrics::facts`] counts them.
pub const SLOW_DELIVERY: Duration = Duration::from_secs(5);

/// The window of the duplicate ratio and of its warning.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Above this share of duplicates in the window, warn (5 %: a gateway redelivering that much is
/// not getting answers in time).
pub const DUPLICATE_WARN_PERCENT: u64 = 5;

/// Fewer verified webhooks than this in the window say nothing about a ratio (one redelivery
/// among three webhooks is 33 %), so they never warn.
pub const DUPLICATE_MIN_SAMPLE: u64 = 20;

/// A configured endpoint, as metrics sees it: a label, and the names of its routes (each
/// gets delivery series; none: it does not forward).
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub endpoint: &'a str,
    pub routes: &'a [&'a str],
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    endpoint: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    endpoint: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOutcomeLabels {
    endpoint: String,
    route: String,
    outcome: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric portaria exports. Shared through an `Arc`; no global registry.
pub struct Metrics {
    registry: Registry,
    /// Each configured endpoint's series, by name: the hot path is a read lock, one lookup and
    /// an atomic add. A reload replaces the set ([`Metrics::configure`]).
    endpoints: RwLock<HashMap<String, EndpointSeries>>,
    /// Requests to paths no endpoint has.
    unknown: EndpointSeries,
    /// The families an endpoint's series live in.
    families: Families,
    duplicate_ratio: Family<EndpointLabel, FloatGauge>,
    pending: Family<EndpointLabel, Gauge>,
    oldest_pending_age: Family<EndpointLabel, FloatGauge>,
    dead: Family<EndpointLabel, Gauge>,
    /// 1 while a route is paused, as the worker last read the store.
    route_paused: Family<RouteLabels, Gauge>,
    /// The clock of the duplicate windows: monotonic, so a wall-clock jump neither empties nor
    /// stretches them.
    started: Instant,
    /// Gauges are set from one scrape's snapshot and then encoded; two scrapes must not
    /// interleave.
    scrape: Mutex<()>,
    /// The canary's series, when it runs (`canary`).
    canary: Option<canary::CanarySeries>,
    /// The reconcile runs' series, when an endpoint reconciles (`reconcile`).
    reconcile: Option<reconcile::ReconcileSeries>,
}

/// The families of the per-endpoint counters and histograms.
struct Families {
    requests: Family<OutcomeLabels, Counter>,
    request_latency: Family<EndpointLabel, Histogram>,
    deliveries: Family<RouteOutcomeLabels, Counter>,
    delivery_latency: Family<RouteLabels, Histogram>,
    /// Accepted events of a forwarding endpoint that no route took (only stored).
    unrouted: Family<EndpointLabel, Counter>,
    /// Accepted events whose `event_type` field (the endpoint's or its preset's) found nothing.
    untyped: Family<EndpointLabel, Counter>,
}

/// Handles on one endpoint's series (clones share the value with the registered family).
struct EndpointSeries {
    name: String,
    requests: Vec<(&'static str, Counter)>,
    request_latency: Histogram,
    /// One per route; empty for an endpoint that does not forward.
    routes: Vec<RouteSeries>,
    /// None for an endpoint that does not forward.
    unrouted: Option<Counter>,
    /// None for the `-` of unknown paths.
    untyped: Option<Counter>,
    duplicates: Mutex<DuplicateWindow>,
    /// Attempts over [`SLOW_DELIVERY`], for [`Metrics::facts`] (no series of its own).
    slow: AtomicU64,
    /// Events stored without a field their provider's events always carry, and the last one's
    /// id, for [`Metrics::facts`] (`drift`; no series of their own).
    drifted: AtomicU64,
    last_drifted: AtomicI64,
}

/// Handles on one route's delivery series.
struct RouteSeries {
    name: String,
    deliveries: Vec<(&'static str, Counter)>,
    latency: Histogram,
}

impl EndpointSeries {
    fn has_routes(&self, routes: &[&str]) -> bool {
        self.routes.len() == routes.len()
            && self.routes.iter().zip(routes).all(|(r, n)| r.name == *n)
    }
}

impl Metrics {
    /// Creates every series of these endpoints, at zero. (The gauges are set by [`Metrics::render`]
    /// before each encoding, so they too exist from the first scrape.)
    pub fn new<'a>(endpoints: impl IntoIterator<Item = Series<'a>>) -> Metrics {
        let mut registry = Registry::with_prefix("portaria");
        let requests = Family::<OutcomeLabels, Counter>::default();
        let request_latency = Family::<EndpointLabel, Histogram>::new_with_constructor(
            request_histogram as fn() -> _,
        );
        let deliveries = Family::<RouteOutcomeLabels, Counter>::default();
        let delivery_latency =
            Family::<RouteLabels, Histogram>::new_with_constructor(delivery_histogram as fn() -> _);
        let unrouted = Family::<EndpointLabel, Counter>::default();
        let untyped = Family::<EndpointLabel, Counter>::default();
        let duplicate_ratio = Family::<EndpointLabel, FloatGauge>::default();
        let pending = Family::<EndpointLabel, Gauge>::default();
        let oldest_pending_age = Family::<EndpointLabel, FloatGauge>::default();
        let dead = Family::<EndpointLabel, Gauge>::default();
        let route_paused = Family::<RouteLabels, Gauge>::default();
        let build_info = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        build_info
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION"))])
            .set(1);

        registry.register(
            "requests",
            "Webhook requests answered, by endpoint (`-`: no endpoint at that path) and outcome",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to answer, including the durable write",
            request_latency.clone(),
        );
        registry.register(
            "duplicate_ratio",
            "Share of verified webhooks that were duplicates over the last 15 minutes",
            duplicate_ratio.clone(),
        );
        registry.register(
            "deliveries",
            "Delivery attempts by route and outcome: delivered, failed (will be retried), dead (last try failed)",
            deliveries.clone(),
        );
        registry.register(
            "delivery_duration_seconds",
            "Time one delivery attempt took, by route",
            delivery_latency.clone(),
        );
        registry.register(
            "events_unrouted",
            "Accepted events of a forwarding endpoint that matched no route's filter (stored only)",
            unrouted.clone(),
        );
        registry.register(
            "events_untyped",
            "Accepted events whose configured event_type field found nothing (stored with no type)",
            untyped.clone(),
        );
        registry.register(
            "events_pending",
            "Events waiting for delivery or being delivered, read from the database at scrape time",
            pending.clone(),
        );
        registry.register(
            "oldest_pending_age_seconds",
            "Age of the oldest event waiting for delivery (0 when none), read at scrape time",
            oldest_pending_age.clone(),
        );
        registry.register(
            "events_dead",
            "Events whose every delivery attempt failed, kept for replay, read at scrape time",
            dead.clone(),
        );
        registry.register(
            "route_paused",
            "1 while a route is paused (`portaria route pause`, or its target answered 410 Gone)",
            route_paused.clone(),
        );
        registry.register("build_info", "The running version", build_info);

        let families = Families {
            requests,
            request_latency,
            deliveries,
            delivery_latency,
            unrouted,
            untyped,
        };
        let metrics = Metrics {
            registry,
            endpoints: RwLock::default(),
            unknown: families.series(UNKNOWN_ENDPOINT, &["not_found"], &[]),
            families,
            duplicate_ratio,
            pending,
            oldest_pending_age,
            dead,
            route_paused,
            started: Instant::now(),
            scrape: Mutex::new(()),
            canary: None,
            reconcile: None,
        };
        metrics.configure(endpoints);
        metrics
    }

    /// Makes the endpoint series match a (reloaded) endpoint list: a new endpoint's series are
    /// created at zero, a kept endpoint's go on counting, and a removed endpoint's (or the
    /// delivery series of one that no longer forwards) leave the output, so the number of
    /// series stays fixed by the configuration in force.
    pub fn configure<'a>(&self, endpoints: impl IntoIterator<Item = Series<'a>>) {
        let mut map = self
            .endpoints
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut old = std::mem::take(&mut *map);
        for e in endpoints {
            let series = match old.remove(e.endpoint) {
                Some(kept) if kept.has_routes(e.routes) => kept,
                previous => {
                    if let Some(previous) = &previous {
                        self.remove_delivery_series(previous);
                    }
                    let fresh = self
                        .families
                        .series(e.endpoint, &REQUEST_OUTCOMES, e.routes);
                    if let Some(previous) = previous {
                        // Its request counters live on in the families; the duplicate window
                        // is carried over by hand.
                        *fresh
                            .duplicates
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = previous
                            .duplicates
                            .into_inner()
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                    fresh
                }
            };
            map.insert(e.endpoint.to_string(), series);
        }
        for (name, gone) in old {
            let labels = label(&name);
            for (outcome, _) in &gone.requests {
                self.families.requests.remove(&OutcomeLabels {
                    endpoint: name.clone(),
                    outcome,
                });
            }
            self.families.request_latency.remove(&labels);
            self.families.untyped.remove(&labels);
            self.duplicate_ratio.remove(&labels);
            self.pending.remove(&labels);
            self.oldest_pending_age.remove(&labels);
            self.dead.remove(&labels);
            self.remove_delivery_series(&gone);
        }
    }

    /// Takes an endpoint's route series (and its unrouted count) out of the output.
    fn remove_delivery_series(&self, series: &EndpointSeries) {
        for route in &series.routes {
            for outcome in DELIVERY_OUTCOMES {
                self.families.deliveries.remove(&RouteOutcomeLabels {
                    endpoint: series.name.clone(),
                    route: route.name.clone(),
                    outcome,
                });
            }
            self.families
                .delivery_latency
                .remove(&route_labels(&series.name, &route.name));
        }
        self.families.unrouted.remove(&label(&series.name));
    }

    /// Counts an accepted event of `endpoint` that no route took.
    pub fn unrouted(&self, endpoint: &str) {
        self.count_event(endpoint, |s| s.unrouted.as_ref());
    }

    /// Counts an accepted event of `endpoint` whose `event_type` field found nothing.
    pub fn untyped(&self, endpoint: &str) {
        self.count_event(endpoint, |s| s.untyped.as_ref());
    }

    fn count_event(&self, endpoint: &str, counter: impl Fn(&EndpointSeries) -> Option<&Counter>) {
        let endpoints = self.endpoints.read();
        let endpoints = endpoints.unwrap_or_else(PoisonError::into_inner);
        endpoints.get(endpoint).and_then(counter).map(Counter::inc);
    }

    /// Counts one answered request. `endpoint` is the name of the endpoint whose path it was
    /// sent to (not counted if a reload removed it meanwhile), None if no endpoint has that
    /// path; `label` is one of a fixed list of words
    /// ([`REQUEST_OUTCOMES`], `not_found`). [`ACCEPTED`] and [`DUPLICATE`] go into the
    /// duplicate window, which warns when duplicates pass 5 % of the last 15 minutes (at most
    /// once per window and endpoint).
    pub fn request(&self, endpoint: Option<&str>, label: &'static str, elapsed: Duration) {
        let endpoints = self
            .endpoints
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let series = match endpoint {
            Some(name) => match endpoints.get(name) {
                Some(series) => series,
                // Begun before a reload removed its endpoint: no series to count it in.
                None => return,
            },
            None => &self.unknown,
        };
        match series.requests.iter().find(|(l, _)| *l == label) {
            Some((_, counter)) => {
                counter.inc();
            }
            None => {
                let labels = OutcomeLabels {
                    endpoint: series.name.clone(),
                    outcome: label,
                };
                self.families.requests.get_or_create(&labels).inc();
            }
        }
        series.request_latency.observe(elapsed.as_secs_f64());

        let duplicate = match label {
            ACCEPTED => false,
            DUPLICATE => true,
            _ => return,
        };
        let alert = series
            .duplicates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(self.now_secs(), duplicate);
        if let Some(alert) = alert {
            tracing::warn!(
                endpoint = series.name.as_str(),
                duplicates = alert.duplicates,
                received = alert.received,
                window_minutes = DUPLICATE_WINDOW.as_secs() / 60,
                "over 5 % of webhooks in the last 15 minutes were duplicates: the gateway is \
                 redelivering; are answers slow or lost on the way back?"
            );
        }
    }

    /// Counts one finished delivery attempt of `endpoint`'s `route` (configured names);
    /// `label` is one of [`DELIVERY_OUTCOMES`].
    pub fn delivery(&self, endpoint: &str, route: &str, label: &'static str, elapsed: Duration) {
        let endpoints = self
            .endpoints
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some((series, slow)) = endpoints.get(endpoint).and_then(|e| {
            e.routes
                .iter()
                .find(|r| r.name == route)
                .map(|r| (r, &e.slow))
        }) else {
            return;
        };
        if let Some((_, counter)) = series.deliveries.iter().find(|(l, _)| *l == label) {
            counter.inc();
        }
        series.latency.observe(elapsed.as_secs_f64());
        if elapsed > SLOW_DELIVERY {
            slow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a route is paused, as the worker read it this round.
    pub fn route_paused(&self, endpoint: &str, route: &str, paused: bool) {
        let labels = route_labels(endpoint, route);
        self.route_paused
            .get_or_create(&labels)
            .set(i64::from(paused));
    }

    fn now_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }
}

impl Families {
    /// One endpoint's series, created at zero in the families (or the existing ones, if the
    /// families have them already).
    fn series(&self, name: &str, outcomes: &[&'static str], routes: &[&str]) -> EndpointSeries {
        let requests = outcomes
            .iter()
            .map(|&outcome| {
                let labels = OutcomeLabels {
                    endpoint: name.to_string(),
                    outcome,
                };
                (outcome, self.requests.get_or_create_owned(&labels))
            })
            .collect();
        let routes = routes
            .iter()
            .map(|&route| RouteSeries {
                name: route.to_string(),
                deliveries: DELIVERY_OUTCOMES
                    .iter()
                    .map(|&outcome| {
                        let labels = RouteOutcomeLabels {
                            endpoint: name.to_string(),
                            route: route.to_string(),
                            outcome,
                        };
                        (outcome, self.deliveries.get_or_create_owned(&labels))
                    })
                    .collect(),
                latency: self
                    .delivery_latency
                    .get_or_create_owned(&route_labels(name, route)),
            })
            .collect::<Vec<_>>();
        EndpointSeries {
            name: name.to_string(),
            requests,
            request_latency: self.request_latency.get_or_create_owned(&label(name)),
            unrouted: (!routes.is_empty()).then(|| self.unrouted.get_or_create_owned(&label(name))),
            untyped: (name != UNKNOWN_ENDPOINT)
                .then(|| self.untyped.get_or_create_owned(&label(name))),
            routes,
            duplicates: Mutex::default(),
            slow: AtomicU64::new(0),
            drifted: AtomicU64::new(0),
            last_drifted: AtomicI64::new(0),
        }
    }
}

fn route_labels(endpoint: &str, route: &str) -> RouteLabels {
    RouteLabels {
        endpoint: endpoint.to_string(),
        route: route.to_string(),
    }
}

fn label(endpoint: &str) -> EndpointLabel {
    EndpointLabel {
        endpoint: endpoint.to_string(),
    }
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

fn delivery_histogram() -> Histogram {
    Histogram::new(DELIVERY_BUCKETS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::QueueStats;

    /// `pagarme` forwards, `github` does not.
    const ENDPOINTS: [Series<'static>; 2] = [
        Series {
            endpoint: "pagarme",
            routes: &["default"],
        },
        Series {
            endpoint: "github",
            routes: &[],
        },
    ];

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn every_series_exists_at_zero_and_moves_by_what_happened() {
        let metrics = Metrics::new(ENDPOINTS);
        let text = metrics.render(Some(&[]), None, 0);
        for series in [
            r#"portaria_requests_total{endpoint="pagarme",outcome="accepted"}"#,
            r#"portaria_requests_total{endpoint="github",outcome="bad_signature"}"#,
            r#"portaria_requests_total{endpoint="-",outcome="not_found"}"#,
            r#"portaria_deliveries_total{endpoint="pagarme",route="default",outcome="dead"}"#,
            r#"portaria_events_pending{endpoint="github"}"#,
            r#"portaria_events_dead{endpoint="pagarme"}"#,
            r#"portaria_oldest_pending_age_seconds{endpoint="pagarme"}"#,
            r#"portaria_duplicate_ratio{endpoint="pagarme"}"#,
            r#"portaria_request_duration_seconds_count{endpoint="pagarme"}"#,
            r#"portaria_delivery_duration_seconds_count{endpoint="pagarme",route="default"}"#,
            r#"portaria_events_untyped_total{endpoint="github"}"#,
        ] {
            assert_eq!(sample(&text, series), Some(0.0), "{series} in\n{text}");
        }
        assert!(!text.contains(r#"portaria_events_untyped_total{endpoint="-"}"#));
        assert!(
            !text.contains(r#"portaria_deliveries_total{endpoint="github""#),
            "github does not forward"
        );

        metrics.request(Some("pagarme"), ACCEPTED, Duration::from_millis(3));
        metrics.request(Some("pagarme"), DUPLICATE, Duration::from_millis(2));
        metrics.request(None, "not_found", Duration::from_micros(40));
        metrics.delivery("pagarme", "default", "dead", Duration::from_millis(7));
        metrics.untyped("github");
        metrics.untyped("nobody");
        let queue = [QueueStats {
            endpoint: "pagarme".into(),
            pending: 2,
            oldest_pending_ms: Some(1_000),
            dead: 1,
        }];
        let text = metrics.render(Some(&queue), None, 31_000);
        let get = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}"));
        assert_eq!(
            get(r#"portaria_requests_total{endpoint="pagarme",outcome="accepted"}"#),
            1.0
        );
        assert_eq!(
            get(r#"portaria_requests_total{endpoint="pagarme",outcome="duplicate"}"#),
            1.0
        );
        assert_eq!(
            get(r#"portaria_requests_total{endpoint="-",outcome="not_found"}"#),
            1.0
        );
        assert_eq!(
            get(r#"portaria_request_duration_seconds_count{endpoint="pagarme"}"#),
            2.0
        );
        assert_eq!(get(r#"portaria_duplicate_ratio{endpoint="pagarme"}"#), 0.5);
        assert_eq!(
            get(r#"portaria_deliveries_total{endpoint="pagarme",route="default",outcome="dead"}"#),
            1.0
        );
        assert_eq!(get(r#"portaria_events_pending{endpoint="pagarme"}"#), 2.0);
        assert_eq!(get(r#"portaria_events_dead{endpoint="pagarme"}"#), 1.0);
        assert_eq!(
            get(r#"portaria_oldest_pending_age_seconds{endpoint="pagarme"}"#),
            30.0
        );
        assert_eq!(get(r#"portaria_events_pending{endpoint="github"}"#), 0.0);
        assert_eq!(
            get(r#"portaria_events_untyped_total{endpoint="github"}"#),
            1.0
        );
        assert!(!text.contains(r#"endpoint="nobody""#));
    }

    #[test]
    fn a_reload_adds_and_removes_series_and_kept_ones_go_on_counting() {
        let metrics = Metrics::new(ENDPOINTS);
        metrics.request(Some("pagarme"), ACCEPTED, Duration::from_millis(3));
        metrics.request(Some("github"), ACCEPTED, Duration::from_millis(3));
        metrics.render(Some(&[]), None, 0);
        // pagarme stops forwarding, github goes, stripe comes.
        metrics.configure([
            Series {
                endpoint: "pagarme",
                routes: &[],
            },
            Series {
                endpoint: "stripe",
                routes: &["default"],
            },
        ]);
        metrics.request(Some("pagarme"), ACCEPTED, Duration::from_millis(3));
        let text = metrics.render(Some(&[]), None, 0);
        let get = |series: &str| sample(&text, series);
        assert_eq!(
            get(r#"portaria_requests_total{endpoint="pagarme",outcome="accepted"}"#),
            Some(2.0)
        );
        assert_eq!(
            get(
                r#"portaria_deliveries_total{endpoint="stripe",route="default",outcome="delivered"}"#
            ),
            Some(0.0)
        );
        assert_eq!(
            get(r#"portaria_events_pending{endpoint="stripe"}"#),
            Some(0.0)
        );
        assert!(!text.contains(r#"endpoint="github""#), "{text}");
        assert!(
            !text.contains(r#"portaria_deliveries_total{endpoint="pagarme""#),
            "{text}"
        );
        assert!(
            !text.contains(r#"portaria_delivery_duration_seconds_count{endpoint="pagarme""#),
            "{text}"
        );
        // A request to a removed endpoint that was in flight counts nowhere.
        metrics.request(Some("github"), ACCEPTED, Duration::from_millis(3));
        let text = metrics.render(Some(&[]), None, 0);
        assert!(!text.contains(r#"endpoint="github""#), "{text}");
        assert!(
            !text.contains(r#"endpoint="-",outcome="accepted""#),
            "{text}"
        );
    }

    #[test]
    fn an_unreadable_queue_leaves_its_gauges_out_and_unknown_names_never_appear() {
        let metrics = Metrics::new(ENDPOINTS);
        metrics.delivery("renamed-long-ago", "default", "delivered", Duration::ZERO);
        let queue = [QueueStats {
            endpoint: "renamed-long-ago".into(),
            pending: 1,
            oldest_pending_ms: Some(0),
            dead: 1,
        }];
        let text = metrics.render(Some(&queue), None, 0);
        assert!(!text.contains("renamed-long-ago"), "{text}");
        let text = metrics.render(None, None, 0);
        assert!(!text.contains("portaria_events_pending{"), "{text}");
        assert!(!text.contains("portaria_events_dead{"), "{text}");
        assert!(text.contains("portaria_requests_total{"), "{text}");
    }

    #[test]
    fn facts_count_what_the_alerts_watch() {
        let metrics = Metrics::new(ENDPOINTS);
        let fact = |m: &Metrics| {
            m.facts()
                .into_iter()
                .find(|f| f.endpoint == "pagarme")
                .unwrap()
        };
        assert_eq!(fact(&metrics).accepted, 0);
        let ms = Duration::from_millis(1);
        metrics.request(Some("pagarme"), ACCEPTED, ms);
        metrics.request(Some("pagarme"), DUPLICATE, ms);
        metrics.request(Some("pagarme"), "storage_error", ms);
        metrics.delivery("pagarme", "default", "delivered", SLOW_DELIVERY);
        metrics.delivery("pagarme", "default", "failed", SLOW_DELIVERY + ms);
        let f = fact(&metrics);
        assert_eq!(
            (f.accepted, f.storage_errors, f.slow_deliveries),
            (1, 1, 1),
            "{f:?}"
        );
        assert_eq!((f.window_duplicates, f.window_received), (1, 2));
        assert_eq!((f.drifted, f.last_drifted_id), (0, None));
        metrics.drifted("pagarme", 7);
        metrics.drifted("pagarme", 9);
        metrics.drifted("nobody", 11);
        let f = fact(&metrics);
        assert_eq!((f.drifted, f.last_drifted_id), (2, Some(9)));
        assert_eq!(metrics.facts().len(), 2, "one per configured endpoint");
    }
}
