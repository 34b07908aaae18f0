//! The `every` schedule inside `serve`: one task that owns the schedule of every endpoint with
//! an `[endpoint.reconcile] every`, runs the one that is due, then waits for the next. One
//! task, one run at a time: two runs never overlap in a process, whatever the schedules. The
//! first run of each endpoint is at start (after an outage, the moment that matters), the next
//! `every` after the previous one ended. Each run's report goes to the log. The schedule is the
//! config's at start: a reload does not change it. At the shutdown signal the task ends, a run
//! in progress dropped between or within its calls (the resends it asked for arrive anyway).

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use crate::config::Endpoint;
use crate::shutdown::Shutdown;
use crate::store::Store;

/// The running schedule.
pub struct Schedule {
    task: JoinHandle<()>,
}

impl Schedule {
    /// Starts the schedule of `endpoints` that have an `every`; None when none has. `wake`
    /// is the forwarding worker's, for the events a run stores itself.
    pub fn start(
        endpoints: &[Arc<Endpoint>],
        store: Store,
        wake: Arc<Notify>,
        shutdown: Shutdown,
    ) -> Option<Schedule> {
        let now = Instant::now();
        let due: Vec<(Instant, Arc<Endpoint>)> = endpoints
            .iter()
            .filter(|e| e.reconcile.as_ref().is_some_and(|r| r.every.is_some()))
            .map(|e| (now, e.clone()))
            .collect();
        if due.is_empty() {
            return None;
        }
        let task = tokio::spawn(crate::panics::named(
            "reconcile",
            run(due, store, wake, shutdown),
        ));
        Some(Schedule { task })
    }

    /// Waits for the task to end (it ends at the shutdown signal).
    pub async fn stop(self) {
        let _ = self.task.await;
    }
}

async fn run(
    mut due: Vec<(Instant, Arc<Endpoint>)>,
    store: Store,
    wake: Arc<Notify>,
    mut shutdown: Shutdown,
) {
    loop {
        let Some(next) = due
            .iter()
            .enumerate()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(i, _)| i)
        else {
            return;
        };
        let (at, endpoint) = due[next].clone();
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = tokio::time::sleep_until(at) => {}
        }
        let Some(reconcile) = &endpoint.reconcile else {
            return;
        };
        let report = tokio::select! {
            _ = shutdown.fired() => return,
            report = super::run(&endpoint, reconcile, &store, None, false, Some(&wake)) => report,
        };
        log(&report);
        let every = reconcile.every.unwrap_or(Duration::from_secs(3600));
        due[next].0 = Instant::now() + every;
    }
}

fn log(report: &super::Report) {
    let (endpoint, checked) = (report.endpoint.as_str(), report.checked);
    let (missing, recovered) = (report.missing.len(), report.recovered.len());
    if report.busy {
        tracing::info!(endpoint, "reconcile: skipped, another run holds the store");
    } else if report.ok() {
        tracing::info!(endpoint, checked, missing, recovered, "reconcile: run done");
    } else {
        let errors = report.errors.join("; ");
        let note = report.note.unwrap_or("");
        tracing::warn!(
            endpoint,
            checked,
            missing,
            recovered,
            errors,
            note,
            "reconcile: run done, not everything missing came back"
        );
    }
}
