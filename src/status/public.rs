//! The public path on the status page, when the canary runs: what its probes last saw
//! ([`PublicPath`]), as JSON (`/api/stats`: `public_path`) and, while the probes fail, as the
//! red part of the banner, with how long each endpoint's gateway keeps retrying
//! ([`Patience::outlook`], counted from the first failed probe).

use maud::{Markup, html};
use serde_json::{Value, json};

use super::text::{Lang, ago, when};
use crate::public_path::{Failing, PublicPath};
use crate::time::rfc3339;
use crate::verify::Patience;

/// The canary's record and the gateways' patience, as the page shows them.
pub struct PublicView {
    pub path: PublicPath,
    /// Each endpoint's gateway's give-up rule, in the config's order.
    pub patience: Vec<(String, Patience)>,
}

impl PublicView {
    /// The failure going on, if the probes fail.
    pub fn failing(&self) -> Option<Failing> {
        self.path.seen().failing
    }

    /// Each endpoint's gateway's outlook for a failure since `since_ms`.
    fn outlooks(&self, since_ms: i64, now: i64) -> Vec<(&str, String)> {
        self.patience
            .iter()
            .map(|(name, p)| (name.as_str(), p.outlook(since_ms, now, None)))
            .collect()
    }

    /// `public_path` of `/api/stats`.
    pub fn json(&self, now: i64) -> Value {
        let seen = self.path.seen();
        let failing = seen.failing.as_ref().map(|run| {
            let gateways: Vec<Value> = self
                .outlooks(run.since_ms, now)
                .into_iter()
                .map(|(endpoint, outlook)| json!({ "endpoint": endpoint, "outlook": outlook }))
                .collect();
            json!({
                "since": rfc3339(run.since_ms),
                "since_ms": run.since_ms,
                "probes": run.probes,
                "cause": run.cause,
                "detail": run.detail,
                "gateways": gateways,
            })
        });
        json!({
            "url": self.path.url(),
            "reachable": seen.last_success_ms.is_some() && seen.failing.is_none(),
            "last_success_at": seen.last_success_ms.map(rfc3339),
            "last_success_ms": seen.last_success_ms,
            "round_trip_ms": seen.last_round_trip.map(|d| d.as_millis() as u64),
            "probes_ok": seen.succeeded,
            "probes_failed": seen.failed,
            "failing": failing,
        })
    }

    /// The banner's part about the public path, while its probes fail. Each gateway's outlook
    /// is `verify::patience`'s sentence, in English on both pages (it names the gateway's
    /// own rule, as its documentation words it).
    pub fn banner(&self, now: i64, t: Lang) -> Option<Markup> {
        let run = self.failing()?;
        Some(html! {
            p.unreachable {
                t { "The public URL " } code { (self.path.url()) } t { " does not reach portaria" }
                t { " (since " } (when(run.since_ms, now, t)) ", " (run.probes)
                @if run.probes == 1 { t { " failed probe" } } @else { t { " failed probes" } }
                "): " (run.detail)
                t { ". Gateways cannot deliver until the tunnel is back; each keeps retrying \
                     for a while (" }
                (ago(now - run.since_ms, t)) t { " of it used):" }
            }
            ul.patience {
                @for (endpoint, outlook) in self.outlooks(run.since_ms, now) {
                    li { strong { (endpoint) } ": " (outlook) }
                }
            }
        })
    }
}
