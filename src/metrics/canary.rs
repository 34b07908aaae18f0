//! The canary's series, registered only when the canary runs ([`Metrics::canary_on`]), all at
//! zero from the start:
//!
//! - `portaria_canary_probes_total{outcome}`: probes by outcome, `ok` or the failure's cause
//!   (a fixed list the canary gives);
//! - `portaria_canary_up`: 1 when the last probe came back as portaria's, else 0;
//! - `portaria_canary_last_success_timestamp_seconds`: when that last happened (unix seconds,
//!   0 before the first);
//! - `portaria_canary_round_trip_seconds`: how long the last successful probe took.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::Metrics;

/// The outcome of a probe that came back as portaria's.
pub const PROBE_OK: &str = "ok";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabel {
    outcome: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Handles on the canary's series.
pub(super) struct CanarySeries {
    probes: Family<ProbeLabel, Counter>,
    up: Gauge,
    last_success: FloatGauge,
    round_trip: FloatGauge,
}

impl Metrics {
    /// Creates the canary's series, `ok` and each of `causes` at zero. Before the `Metrics` is
    /// shared: the registry is written here.
    pub fn canary_on(&mut self, causes: &[&'static str]) {
        let series = CanarySeries {
            probes: Family::default(),
            up: Gauge::default(),
            last_success: FloatGauge::default(),
            round_trip: FloatGauge::default(),
        };
        for outcome in std::iter::once(PROBE_OK).chain(causes.iter().copied()) {
            let _ = series.probes.get_or_create(&ProbeLabel { outcome });
        }
        let registry = &mut self.registry;
        registry.register(
            "canary_probes",
            "Probes posted through public_url to portaria's own canary path, by outcome: ok, or why it failed",
            series.probes.clone(),
        );
        registry.register(
            "canary_up",
            "1 when the last probe through public_url came back as this portaria's, else 0",
            series.up.clone(),
        );
        registry.register(
            "canary_last_success_timestamp_seconds",
            "When the last probe that came back as this portaria's was sent (unix seconds; 0: none yet)",
            series.last_success.clone(),
        );
        registry.register(
            "canary_round_trip_seconds",
            "How long the last successful probe took, from name resolution to the answer's last byte",
            series.round_trip.clone(),
        );
        self.canary = Some(series);
    }

    /// Counts one probe, sent at `sent_ms`: `outcome` is [`PROBE_OK`] (with its round trip) or
    /// the failure's cause.
    pub fn canary_probe(&self, outcome: &'static str, sent_ms: i64, round_trip: Option<Duration>) {
        let Some(series) = &self.canary else { return };
        series.probes.get_or_create(&ProbeLabel { outcome }).inc();
        match round_trip {
            Some(rtt) if outcome == PROBE_OK => {
                series.up.set(1);
                series.last_success.set(sent_ms as f64 / 1000.0);
                series.round_trip.set(rtt.as_secs_f64());
            }
            _ => {
                series.up.set(0);
            }
        }
    }
}
