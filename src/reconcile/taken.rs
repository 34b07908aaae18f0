//! Events taken from the gateway's own API and stored as the endpoint's, where the gateway
//! cannot be asked to send them again (Stripe's events, Mercado Pago's payment states). The API's answer was read over TLS with the
//! account's key: it is the gateway speaking, as authoritative as a signature, so the event
//! is stored as a webhook of the endpoint would be (its routes, its dedup key, its window)
//! and marked `origin = reconcile` ([`NewEvent::reconciled`]): `events list/show`, the status
//! page and every target say so. Its dedup key is the one a real delivery of it has (Stripe:
//! a late real delivery is a duplicate) or one of its own (a payment's state), and a run that
//! finds it stored already (a delivery came in between) counts it recovered all the same.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use tokio::sync::Notify;

use super::Report;
use crate::config::Endpoint;
use crate::store::{Inserted, NewDelivery, NewEvent, Received, Store};

/// How long one insert may wait for the store to take it: a run is not a gateway waiting
/// for its answer, so longer than intake's 5 s.
const STORE_DEADLINE: Duration = Duration::from_secs(30);

/// One event as the gateway's API gave it.
#[derive(Debug)]
pub(super) struct Taken {
    /// The gateway's id of it, for the report (`evt_...`).
    pub id: String,
    /// The key a real delivery of it has (the endpoint's rule, read from `body`).
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub object_id: Option<String>,
    /// The object id the API answered for, where the provider's webhooks sign one apart
    /// from the body (Mercado Pago's `data.id`): targets trust it as they trust theirs.
    pub signed_id: Option<String>,
    /// The event's JSON, as the webhook's body would carry it.
    pub body: Vec<u8>,
}

/// Of `candidates`, the ones whose dedup key `endpoint` never stored are the report's
/// `missing`, and stored ([`store_taken`]) unless the run is dry.
pub(super) async fn store_missing(
    store: &Store,
    endpoint: &Endpoint,
    candidates: Vec<Taken>,
    wake: Option<&Notify>,
    report: &mut Report,
) -> Result<(), String> {
    let keys = candidates
        .iter()
        .map(|t| (t.id.clone(), t.dedup_key.clone()))
        .collect();
    report.missing = super::never_stored(store, &endpoint.name, keys).await?;
    if report.dry_run || report.missing.is_empty() {
        return Ok(());
    }
    let ids: HashSet<&str> = report.missing.iter().map(String::as_str).collect();
    let missing = candidates
        .into_iter()
        .filter(|t| ids.contains(t.id.as_str()))
        .collect();
    store_taken(store, endpoint, missing, wake, report).await;
    Ok(())
}

/// Stores each of `taken` as an event of `endpoint` (origin `reconcile`); each one stored, or
/// found stored already, is recovered, each failure an error of the report. Wakes the
/// forwarding worker (`wake`, inside `serve`) once something new is stored.
async fn store_taken(
    store: &Store,
    endpoint: &Endpoint,
    taken: Vec<Taken>,
    wake: Option<&Notify>,
    report: &mut Report,
) {
    report.stored = true;
    let mut new = 0;
    for t in taken {
        let at_ms = crate::time::now_ms();
        let body = Bytes::from(t.body);
        let routes: Vec<NewDelivery> = endpoint
            .deliveries_for(t.event_type.as_deref(), &HeaderMap::new(), &body)
            .into_iter()
            .map(|(route, order_key)| NewDelivery { route, order_key })
            .collect();
        let received = Received {
            event_type: t.event_type,
            content_type: Some("application/json".into()),
            headers: Vec::new(),
            body,
            at_ms,
            dedup_since_ms: endpoint.dedup_since(at_ms),
            client_cert: None,
            object_id: t.object_id,
            event_type_signed: true,
        };
        let event =
            NewEvent::reconciled(&endpoint.name, t.dedup_key, received, routes, t.signed_id);
        match store.insert_event(event, STORE_DEADLINE).await {
            Ok(inserted) => {
                let (name, id) = (&endpoint.name, &t.id);
                match inserted {
                    Inserted::New(event_id) => {
                        new += 1;
                        tracing::info!(endpoint = %name, id = %id, event_id, "reconcile: stored the event from the gateway's API");
                    }
                    Inserted::Duplicate(event_id) => {
                        tracing::info!(endpoint = %name, id = %id, event_id, "reconcile: the event arrived meanwhile");
                    }
                }
                report.recovered.push(t.id);
            }
            Err(e) => report.errors.push(format!("{}: not stored ({e})", t.id)),
        }
    }
    if new > 0
        && let Some(wake) = wake
    {
        wake.notify_one();
    }
}
