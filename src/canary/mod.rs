//! The canary: a background task that posts a signed probe to `public_url` +
//! `/webhooks/_canary` every `canary_every`, the way a gateway would reach portaria (DNS, the
//! tunnel, TLS, back to the webhook listener), and records what came back.
//!
//! Intake answers that path itself (`ingest`, with the same [`ProbeKey`]): it checks the
//! probe's HMAC under this process's random key and answers with a proof only this process can
//! make (`probe`); nothing is stored, forwarded or counted as an endpoint's event, and a probe
//! with a wrong key is refused 401 like any forgery. `verdict` turns each outcome into a
//! success or a cause (`dns`, `connect`, `tls`, `timeout`, `http`, `status`, `not_portaria`).
//!
//! Each probe goes into the [`PublicPath`] (the alerts task reads it for `unreachable` and
//! `reachable`; the status page for its banner), into `portaria_canary_*` metrics, and, when
//! the path goes down or comes back, into the log. The task owns its client and stops at the
//! shutdown signal, a probe in flight cut off with it.

mod probe;
mod verdict;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::config;
use crate::metrics::{Metrics, PROBE_OK};
use crate::outbound::{Client, Limits, Request, Roots};
use crate::public_path::PublicPath;
use crate::shutdown::Shutdown;
use crate::time::now_ms;

pub use probe::{HEADER, Probe, ProbeKey, Refusal};
pub use verdict::{CAUSES, Failure, judge};

/// A probe's deadlines: a gateway waits 10-30 s for an answer, so a path slower than this is
/// one on which deliveries time out.
const LIMITS: Limits = Limits {
    resolve: Duration::from_secs(5),
    connect: Duration::from_secs(5),
    handshake: Duration::from_secs(5),
    answer: Duration::from_secs(10),
    max_answer_bytes: 16 * 1024,
};

/// The running canary.
pub struct Canary {
    task: JoinHandle<()>,
}

impl Canary {
    /// Starts probing `settings.probe_url` every `settings.every`, trusting the system's roots
    /// (`roots`, read at start) and `settings`' extra CA.
    pub fn start(
        settings: &config::Canary,
        roots: Roots,
        key: Arc<ProbeKey>,
        path: PublicPath,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> Result<Canary, String> {
        let client =
            Client::new(&roots.with(&settings.extra_roots), LIMITS).map_err(|e| e.to_string())?;
        let task = Task {
            url: settings.probe_url.clone(),
            client,
            key,
            path,
            metrics,
        };
        let every = settings.every;
        Ok(Canary {
            task: tokio::spawn(crate::panics::named("canary", run(task, every, shutdown))),
        })
    }

    /// Waits for the task to end (it ends at the shutdown signal).
    pub async fn stop(self) {
        let _ = self.task.await;
    }
}

async fn run(task: Task, every: Duration, mut shutdown: Shutdown) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = ticks.tick() => {}
        }
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = task.probe() => {}
        }
    }
}

/// The task's own state.
struct Task {
    url: http::Uri,
    client: Client,
    key: Arc<ProbeKey>,
    path: PublicPath,
    metrics: Arc<Metrics>,
}

impl Task {
    /// One probe, recorded.
    async fn probe(&self) {
        let sent_ms = now_ms();
        let probe = match self.key.probe(sent_ms) {
            Ok(probe) => probe,
            Err(why) => return tracing::error!(error = why, "canary: no probe sent"),
        };
        let header = match http::HeaderValue::from_str(&probe.header) {
            Ok(value) => value,
            Err(_) => return,
        };
        let request = Request::post(self.url.clone(), &b""[..])
            .header(http::HeaderName::from_static(HEADER), header);
        let before = self.path.seen().failing;
        match judge(self.client.send(request).await, &probe.answer) {
            Ok(round_trip) => {
                self.path.succeeded(sent_ms, round_trip);
                self.metrics
                    .canary_probe(PROBE_OK, sent_ms, Some(round_trip));
                let round_trip_ms = round_trip.as_millis() as u64;
                match before {
                    Some(run) => tracing::info!(
                        url = %self.path.url(),
                        round_trip_ms,
                        failed_probes = run.probes,
                        "canary: the public URL reaches portaria again"
                    ),
                    None => tracing::debug!(round_trip_ms, "canary: probe came back"),
                }
            }
            Err(Failure { cause, detail }) => {
                self.metrics.canary_probe(cause, sent_ms, None);
                let changed = before.as_ref().is_none_or(|run| run.cause != cause);
                if changed {
                    tracing::warn!(
                        url = %self.path.url(),
                        cause,
                        error = %detail,
                        "canary: the public URL does not reach portaria; gateways cannot deliver"
                    );
                } else {
                    tracing::debug!(cause, error = %detail, "canary: probe failed again");
                }
                self.path.failed(sent_ms, cause, detail);
            }
        }
    }
}
