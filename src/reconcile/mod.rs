//! `portaria reconcile`: asks each gateway's API which deliveries never reached portaria
//! (the tunnel or the Pi was down longer than the gateway kept trying) and gets them back.
//! One run per endpoint with an `[endpoint.reconcile]` (`config::reconcile`), each giving a
//! [`Report`]: what it checked, what portaria had never stored, what it did about it.
//!
//! - `pagarme-v5` (`pagarme`): the account's deliveries in the window, and for each one
//!   Pagar.me marks `failed` whose event portaria never stored, Pagar.me is asked to send it
//!   again; the copy arrives signed and goes through intake like any webhook.
//! - `stripe` (`stripe`): the events whose delivery has not succeeded, in the window; those
//!   portaria never stored are stored from the API's answer (Stripe cannot be asked to
//!   resend), marked `origin = reconcile` (`taken`).
//! - `paddle` (`paddle`): the notifications Paddle gave up on (`failed`) in the window; for
//!   each event portaria never stored, Paddle is asked to replay its notification, which
//!   arrives signed as a new notification of the same `event_id`.
//! - `asaas` (`asaas`): Asaas keeps the events of a webhook it paused (`interrupted`) for 14
//!   days; a run finds this endpoint's paused queue and, with `reactivate`, resumes it and
//!   drops its penalty, so Asaas sends what it held, in order.
//! - `github` (`github`): a hook's deliveries in the window, by GUID; each event none of
//!   whose deliveries is `OK` is redelivered (the list does not carry portaria's key, so a
//!   stored one comes back as a duplicate).
//! - `mercadopago` (`mercadopago`): the payments updated in the window; each one whose last
//!   update portaria never heard of (no notification of it since) is stored as a state
//!   event (`taken`), keyed by (payment, status).
//! - `cielo` (`cielo`): no list at all; the sales of the window whose last state portaria
//!   fetched is still open are asked for again, and a state portaria never heard of is
//!   stored as the notification Cielo would have sent (`taken`), keyed by (sale, status).
//!
//! `serve` runs it on each endpoint's `every` too (`schedule`: one task, one run at a time).
//! One run at a time per store, too: a run that is not dry takes the store's reconcile hold
//! ([`Store::reconcile_hold`]) and, when another run (another instance's schedule, a command)
//! holds it, does nothing and says so ([`Report::busy`]).
//!
//! "Never stored" is the store's answer ([`Store::never_stored`]) for the dedup key a real
//! delivery of the event would have had: the endpoint's `json:` rule read from the event's
//! JSON as the API gives it. The API calls, their retries and their errors are `api`'s,
//! through the outbound client (`outbound`). A run never writes the key anywhere: it is in the
//! `Authorization` header and nowhere else (docs/reconcile.md).

mod api;
mod asaas;
mod cielo;
mod github;
mod mercadopago;
mod paddle;
mod pagarme;
mod schedule;
mod stripe;
mod taken;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;

use crate::config::{Endpoint, Reconcile};
use crate::store::{LastRun, Store};

pub use api::{ApiError, MAX_WAIT};
pub use schedule::Schedule;

/// What one endpoint's run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub endpoint: String,
    pub provider: String,
    /// How far back it looked.
    pub since: Duration,
    pub dry_run: bool,
    /// Deliveries (or events) of this endpoint the gateway listed in the window.
    pub checked: usize,
    /// Of those, the ones the gateway gave up on (failed).
    pub failed_at_gateway: usize,
    /// The ids of those portaria never stored.
    pub missing: Vec<String>,
    /// The ids got back (resent by the gateway, or stored from its API: [`Report::stored`]).
    pub recovered: Vec<String>,
    /// Whether what was got back was stored from the gateway's API (`origin = reconcile`)
    /// rather than resent by the gateway.
    pub stored: bool,
    /// What went wrong: the run's own error, or one id's (`hook_x: why`).
    pub errors: Vec<String>,
    /// What the owner can do about what is missing, when the run could not get it back.
    pub note: Option<&'static str>,
    /// When the run started (unix milliseconds).
    pub at_ms: i64,
    /// Where the last run got to, for a provider that resumes from it (Mercado Pago's
    /// search by update time): this run starts there (less [`RESUME_OVERLAP`]) unless told
    /// `--since`; None: the whole window.
    pub resume_ms: Option<i64>,
    /// Where this run got to, for the next one to resume from.
    pub cursor_ms: Option<i64>,
    /// A queue the gateway paused and this run left paused (Asaas): since when runs have
    /// seen it paused (the last run's, else this one's start). The alerts' deadline.
    pub paused_since_ms: Option<i64>,
    /// Another run held the store ([`Store::reconcile_hold`]): this one did nothing.
    pub busy: bool,
}

impl Report {
    /// Nothing missing, or everything missing got back, and no error.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.recovered.len() == self.missing.len()
    }

    /// One line for people: `pagarme (pagarme-v5, last 3d): ...`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} ({}, last {}): {} checked, {} failed at the gateway, {} never stored by portaria",
            self.endpoint,
            self.provider,
            human(self.since),
            self.checked,
            self.failed_at_gateway,
            self.missing.len()
        );
        if !self.missing.is_empty() {
            line.push_str(&format!(" ({})", self.missing.join(", ")));
            if self.dry_run {
                line.push_str("; dry run: nothing asked");
            } else if self.stored {
                line.push_str(&format!(
                    "; stored {} from the gateway's API",
                    self.recovered.len()
                ));
            } else if self.note.is_none() {
                line.push_str(&format!(
                    "; asked the gateway to resend {}",
                    self.recovered.len()
                ));
            }
        }
        for error in &self.errors {
            line.push_str(&format!("\n  error: {error}"));
        }
        if let Some(note) = self.note {
            line.push_str(&format!("\n  note: {note}"));
        }
        line
    }

    /// One JSON object (`--json`).
    pub fn json(&self) -> serde_json::Value {
        json!({
            "endpoint": self.endpoint,
            "provider": self.provider,
            "since_secs": self.since.as_secs(),
            "dry_run": self.dry_run,
            "checked": self.checked,
            "failed_at_gateway": self.failed_at_gateway,
            "missing": self.missing,
            "recovered": self.recovered,
            "recovered_by": match (self.recovered.is_empty(), self.stored) {
                (true, _) => None,
                (false, true) => Some("stored from the API"),
                (false, false) => Some("resent by the gateway"),
            },
            "errors": self.errors,
            "note": self.note,
            "ok": self.ok(),
            "at_ms": self.at_ms,
            "cursor_ms": self.cursor_ms,
            "paused_since_ms": self.paused_since_ms,
            "busy": self.busy,
        })
    }
}

/// `3d`, `5h`, `90s`: the largest whole unit.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s >= 3_600 && s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// What a run says when another holds the store.
pub const BUSY: &str = "another reconcile run holds this store now (serve's schedule, another \
     instance's, or a command): this one did nothing; it runs again at its next turn (a command: \
     run it again once that one ends)";

/// How far before the last run's cursor a run resumes: an update that raced the last run's
/// search is looked at again (a state already stored is not stored twice).
pub const RESUME_OVERLAP: Duration = Duration::from_secs(3600);

/// Runs `endpoint`'s reconcile once, looking back `since` (its `window` unless given);
/// `dry_run` asks the gateway for nothing but the lists, and stores nothing. `wake` is the
/// forwarding worker's, inside `serve`, for an event a run stores itself (a command's run
/// is seen by the server's worker at its next look at the store). A run that is not dry is
/// kept in the store as the endpoint's last ([`Store::save_reconcile_run`]): the next run's
/// cursor, the status page's and the alerts task's view of it.
pub async fn run(
    endpoint: &Endpoint,
    reconcile: &Reconcile,
    store: &Store,
    since: Option<Duration>,
    dry_run: bool,
    wake: Option<&Notify>,
) -> Report {
    let mut report = Report {
        endpoint: endpoint.name.clone(),
        provider: endpoint.verifier.provider().to_string(),
        since: since.unwrap_or(reconcile.window),
        dry_run,
        at_ms: crate::time::now_ms(),
        ..Report::default()
    };
    // One run at a time per store: a dry run asks for lists only, and keeps nothing.
    let hold = match dry_run {
        true => None,
        false => match store.reconcile_hold().await {
            Ok(Some(hold)) => Some(hold),
            Ok(None) => {
                report.busy = true;
                report.errors.push(BUSY.to_string());
                return report;
            }
            Err(e) => {
                report
                    .errors
                    .push(format!("cannot take the reconcile lock: {e}"));
                return report;
            }
        },
    };
    let last = last_run(store, &endpoint.name).await;
    // Only Mercado Pago's search resumes (by update time); the others look at the window.
    if since.is_none() && report.provider == "mercadopago" {
        report.resume_ms = last.as_ref().and_then(|l| l.cursor_ms);
    }
    let paused_before = last.and_then(|l| l.paused_since_ms);
    let scheme = match report.provider.as_str() {
        "paddle" | "github" | "mercadopago" => api::Auth::Bearer,
        "asaas" => api::Auth::AccessToken,
        "cielo" => api::Auth::MerchantKey,
        _ => api::Auth::Basic,
    };
    let api = match api::Api::new(reconcile, scheme) {
        Ok(api) => api,
        Err(e) => {
            report.errors.push(e.to_string());
            return report;
        }
    };
    let outcome = match report.provider.as_str() {
        "pagarme-v5" => pagarme::run(&api, endpoint, store, &mut report).await,
        "stripe" => stripe::run(&api, endpoint, store, wake, &mut report).await,
        "paddle" => paddle::run(&api, endpoint, store, &mut report).await,
        "asaas" => asaas::run(&api, endpoint, reconcile, paused_before, &mut report).await,
        "github" => github::run(&api, endpoint, reconcile, &mut report).await,
        "mercadopago" => mercadopago::run(&api, endpoint, store, wake, &mut report).await,
        "cielo" => cielo::run(&api, endpoint, store, wake, &mut report).await,
        other => Err(format!("provider `{other}` has no reconcile yet")),
    };
    if let Err(e) = outcome {
        report.errors.insert(0, e);
        // Not seen this time: a paused queue's deadline stays the last run's.
        report.paused_since_ms = report.paused_since_ms.or(paused_before);
    }
    if !dry_run
        && let Err(e) = store
            .save_reconcile_run(&endpoint.name, report.json().to_string())
            .await
    {
        report
            .errors
            .push(format!("cannot keep this run in the store: {e}"));
    }
    if let Some(hold) = hold {
        hold.release().await;
    }
    report
}

/// The endpoint's last run, if it kept one.
async fn last_run(store: &Store, endpoint: &str) -> Option<LastRun> {
    let runs = store.reconcile_runs().await.ok()?;
    let (_, run) = runs.into_iter().find(|(name, _)| name == endpoint)?;
    LastRun::read(endpoint, &run)
}

/// Asks the gateway to send each of `ids` again (a `POST` to `path(id)`, nothing in the
/// body): each one it takes is recovered, each refusal an error of the report. Pagar.me's
/// retry, Paddle's replay and GitHub's redelivery.
async fn ask_again(
    api: &api::Api,
    endpoint: &Endpoint,
    ids: Vec<String>,
    path: impl Fn(&str) -> String,
    report: &mut Report,
) {
    for id in ids {
        match api.post(&path(&id)).await {
            Ok(_) => {
                let (name, provider) = (&endpoint.name, &report.provider);
                tracing::info!(endpoint = %name, %provider, id = %id, "reconcile: asked the gateway to send it again");
                report.recovered.push(id);
            }
            Err(e) => report.errors.push(format!("{id}: {e}")),
        }
    }
}

/// The ids of `candidates` (id, dedup key) whose key `endpoint` never stored.
async fn never_stored(
    store: &Store,
    endpoint: &str,
    candidates: Vec<(String, String)>,
) -> Result<Vec<String>, String> {
    let keys = candidates.iter().map(|(_, key)| key.clone()).collect();
    let missing: HashSet<String> = store
        .never_stored(endpoint, keys)
        .await
        .map_err(|e| format!("cannot read the store: {e}"))?
        .into_iter()
        .collect();
    Ok(candidates
        .into_iter()
        .filter(|(_, key)| missing.contains(key))
        .map(|(id, _)| id)
        .collect())
}

/// The path of an absolute URL (`https://host/a/b?q` is `/a/b`); "" if there is none.
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    let path = rest.find('/').map_or("", |at| &rest[at..]);
    path.split(['?', '#']).next().unwrap_or("")
}

/// The value of `name` in a URL's query, as it is (not decoded): `after` of
/// `https://api.example/x?per_page=2&after=ntf_1` is `ntf_1`.
fn query_value<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let (_, query) = url.split_once('?')?;
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// An id that goes into a URL as it is (a path segment, a query value).
fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_s_path_and_query_are_read_strictly() {
        assert_eq!(
            url_path("https://shop.example/webhooks/pagarme?x=1"),
            "/webhooks/pagarme"
        );
        assert_eq!(url_path("https://shop.example"), "");
        assert_eq!(url_path("not a url"), "");
        let next = "https://api.paddle.com/notifications?per_page=2&xafter=no&after=ntf_2#x";
        assert_eq!(query_value(next, "after"), Some("ntf_2"));
        assert_eq!(query_value(next, "per_page"), Some("2"));
        assert_eq!(query_value(next, "before"), None);
        assert_eq!(
            query_value("https://api.paddle.com/notifications", "after"),
            None
        );
    }

    #[test]
    fn ids_go_into_a_url_only_when_plain() {
        assert!(plain_id("hook_4w1y0JVsPsn06EWx") && plain_id("evt_1NG8Du2eZvKYlo2CUI79vXWy"));
        assert!(!plain_id("hook/../x") && !plain_id("") && !plain_id("a?b") && !plain_id("a&b=c"));
    }

    #[test]
    fn a_report_is_ok_only_when_everything_missing_came_back() {
        let mut r = Report {
            endpoint: "pagarme".into(),
            provider: "pagarme-v5".into(),
            since: Duration::from_secs(3 * 86_400),
            ..Report::default()
        };
        assert!(r.ok());
        r.missing = vec!["hook_1".into(), "hook_2".into()];
        r.recovered = vec!["hook_1".into()];
        assert!(!r.ok());
        assert!(r.line().contains("last 3d"), "{}", r.line());
        r.recovered.push("hook_2".into());
        assert!(r.ok());
        r.errors.push("the API key was refused".into());
        assert!(!r.ok());
        assert_eq!(r.json()["ok"], false);
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_secs(7200)), "2h");
    }
}
