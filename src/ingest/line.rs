//! The one log line of a request (`Intake::handle` decides whether it gets one: `flood`): its
//! level and fields by outcome, and what is known of the event by then.

use std::net::IpAddr;
use std::time::Duration;

use super::Outcome;
use crate::config::Endpoint;

/// What the log line says about the event, once it is known.
#[derive(Debug, Default)]
pub(super) struct EventMeta {
    pub(super) dedup_key: Option<String>,
    pub(super) event_type: Option<String>,
    pub(super) object_id: Option<String>,
}

/// The line of one request. `client`: the address it came from (the tunnel's header when
/// believed), for reading only: never a metrics label.
pub(super) fn log(
    endpoint: Option<&Endpoint>,
    client: IpAddr,
    outcome: &Outcome,
    meta: &EventMeta,
    elapsed: Duration,
) {
    let endpoint = endpoint.map_or("-", |e| e.name.as_str());
    let status = outcome.status().as_u16();
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    let dedup_key = meta.dedup_key.as_deref().unwrap_or("-");
    let event_type = meta.event_type.as_deref().unwrap_or("-");
    let object_id = meta.object_id.as_deref().unwrap_or("-");
    match outcome {
        Outcome::Accepted(id) | Outcome::Duplicate(id) => tracing::info!(
            endpoint,
            outcome = outcome.label(),
            %client,
            event_id = id,
            dedup_key,
            event_type,
            object_id,
            status,
            latency_ms,
            duplicate = matches!(outcome, Outcome::Duplicate(_)),
            "webhook"
        ),
        Outcome::StorageError(cause) => tracing::error!(
            endpoint,
            outcome = outcome.label(),
            %client,
            dedup_key,
            status,
            latency_ms,
            cause,
            "webhook"
        ),
        Outcome::BadSignature(cause) | Outcome::BadRequest(cause) => tracing::warn!(
            endpoint,
            outcome = outcome.label(),
            %client,
            status,
            latency_ms,
            cause,
            "webhook rejected"
        ),
        Outcome::Handshake(_) => tracing::info!(
            endpoint,
            outcome = outcome.label(),
            %client,
            status,
            latency_ms,
            "provider check answered (not an event: nothing stored)"
        ),
        // Internet scanners reach every tunnel: wrong paths and methods are not news.
        Outcome::NotFound | Outcome::MethodNotAllowed => tracing::debug!(
            endpoint,
            outcome = outcome.label(),
            %client,
            status,
            latency_ms,
            "request rejected"
        ),
        _ => tracing::warn!(
            endpoint,
            outcome = outcome.label(),
            %client,
            status,
            latency_ms,
            "webhook rejected"
        ),
    }
}
