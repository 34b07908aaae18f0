//! Intake's one write, as callers see it: [`NewEvent`], a verified webhook (only buildable
//! with the verifier's proof), the routes it goes to, and [`Store::insert_event`], which
//! stores it unless its (endpoint, dedup key) is already there (received within the
//! endpoint's dedup window, if it has one). [`dedup_hash`] is what SQLite's narrow dedup
//! index holds. Each engine's barrier is one statement: `sqlite/intake.rs`,
//! `postgres/intake.rs` (grouped into shared transactions by `postgres/group.rs`).
//!
//! A batch of items signed one by one (Adyen) also names each item's own key
//! ([`NewEvent::with_items`]): it is a duplicate, too, when every one of its items is known
//! within the window, as an event's dedup key (a batch of that item alone) or as an item of
//! an earlier batch, so that items cut out of a batch or put together from several are not
//! a second event. The items of a new batch are kept (`event_items`, one row each but for
//! the one that is the event's own key) and go with it when it is pruned. This check runs
//! only for an event with items, before the barrier and in its transaction: under SQLite's
//! write lock, and on PostgreSQL under a transaction lock on each item, so batches sharing
//! an item, racing on any instances, are decided one after the other, each seeing the
//! items of those before it. Every other event costs nothing more.

use bytes::Bytes;

use super::Origin;
use crate::verify::Verified;

/// A verified webhook, ready to store. Building one takes the verifier's proof.
#[derive(Debug)]
pub struct NewEvent {
    pub(super) endpoint: String,
    pub(super) dedup_key: String,
    /// [`dedup_hash`] of the endpoint and key, computed here on the request's task rather
    /// than on the writer thread.
    pub(super) dedup_hash: i64,
    pub(super) event_type: Option<String>,
    pub(super) content_type: Option<String>,
    /// The request headers in HTTP/1 form, `name: value\r\n` each, exactly as received.
    pub(super) headers: Vec<u8>,
    pub(super) body: Bytes,
    pub(super) received_at_ms: i64,
    /// The start of the dedup window (see [`Received::dedup_since_ms`]).
    pub(super) dedup_since_ms: Option<i64>,
    /// The names of the verified client certificate (mutual TLS), if the connection had one.
    pub(super) client_cert: Option<String>,
    pub(super) object_id: Option<String>,
    /// The id the provider signed apart from the body ([`Verified::signed_id`]), if any.
    pub(super) signed_id: Option<String>,
    /// Whether `event_type` came from signed bytes; None when the event has no type.
    pub(super) event_type_signed: Option<bool>,
    /// The routes it goes to, each a delivery row; none: it is `stored`.
    pub(super) routes: Vec<NewDelivery>,
    /// Its items' own keys with their [`dedup_hash`], for a batch of separately signed
    /// items (see the module doc); empty for every other event.
    pub(super) items: Vec<(String, i64)>,
    /// A webhook ([`NewEvent::new`]), or taken from the gateway's API by `portaria reconcile`
    /// ([`NewEvent::reconciled`]).
    pub(super) origin: Origin,
}

/// One route an event goes to, with its ordering key on that route (if the route orders by
/// one and the event carries it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub route: String,
    pub order_key: Option<String>,
}

/// The request as received, and what it says it is: everything of an event that the store
/// keeps besides its endpoint and dedup key.
#[derive(Debug)]
pub struct Received {
    /// The provider's event type (a header or the body's `type`), if it names one.
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    /// The request headers in HTTP/1 form, `name: value\r\n` each, exactly as received.
    pub headers: Vec<u8>,
    pub body: Bytes,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// The start of the endpoint's dedup window (unix milliseconds: `at_ms` minus the
    /// window): an earlier event with the same key is a duplicate only if it was received at
    /// or after this. None: the endpoint has no window, any earlier event with the key is.
    pub dedup_since_ms: Option<i64>,
    /// The verified client certificate's names (`CN=..; DNS=..`), on a mutual-TLS connection.
    pub client_cert: Option<String>,
    /// The object the event is about (`describe`'s object id), if the body names one.
    pub object_id: Option<String>,
    /// Whether the signature covers what `event_type` was read from (the endpoint's
    /// `Verifier::event_type_signed`); told to targets, never used to refuse anything.
    pub event_type_signed: bool,
}

impl NewEvent {
    /// An event of `endpoint` with this dedup key, for `routes` (none: it is only stored).
    pub fn new(
        proof: Verified,
        endpoint: &str,
        dedup_key: String,
        received: Received,
        routes: Vec<NewDelivery>,
    ) -> Self {
        let signed_id = proof.signed_id().map(str::to_string);
        Self::assemble(
            endpoint,
            dedup_key,
            received,
            routes,
            signed_id,
            Origin::Webhook,
        )
    }

    /// An event `portaria reconcile` read from the gateway's own API (over TLS, with the
    /// account's key) because its webhook never reached portaria: no signature to prove it,
    /// the API's answer is the proof. Its dedup key is the one a real delivery of it would
    /// have (Stripe's), or one of its own namespace (Mercado Pago's payment states); its type
    /// counts as signed, and so does `signed_id`, the object id the API answered for (where
    /// the provider's webhooks sign one: Mercado Pago's `data.id`); targets are told its
    /// origin (`reconcile`). It came through no connection: no client certificate.
    pub fn reconciled(
        endpoint: &str,
        dedup_key: String,
        mut received: Received,
        routes: Vec<NewDelivery>,
        signed_id: Option<String>,
    ) -> Self {
        received.event_type_signed = true;
        received.client_cert = None;
        Self::assemble(
            endpoint,
            dedup_key,
            received,
            routes,
            signed_id,
            Origin::Reconcile,
        )
    }

    fn assemble(
        endpoint: &str,
        dedup_key: String,
        received: Received,
        routes: Vec<NewDelivery>,
        signed_id: Option<String>,
        origin: Origin,
    ) -> Self {
        NewEvent {
            endpoint: endpoint.to_string(),
            dedup_hash: dedup_hash(endpoint, &dedup_key),
            dedup_key,
            event_type_signed: received
                .event_type
                .is_some()
                .then_some(received.event_type_signed),
            event_type: received.event_type,
            content_type: received.content_type,
            headers: received.headers,
            body: received.body,
            received_at_ms: received.at_ms,
            dedup_since_ms: received.dedup_since_ms,
            routes,
            client_cert: received.client_cert,
            object_id: received.object_id,
            signed_id,
            items: Vec::new(),
            origin,
        }
    }

    /// The event, a batch whose items are signed one by one, with each item's own key (the
    /// dedup rule's `item_keys`, from signed fields only): a duplicate too when every item
    /// is known (see the module doc). No keys: an event like any other.
    pub fn with_items(mut self, keys: Vec<String>) -> Self {
        self.items = keys
            .into_iter()
            .map(|key| {
                let hash = dedup_hash(&self.endpoint, &key);
                (key, hash)
            })
            .collect();
        self
    }

    /// The item keys that need a row of their own: every one but the event's own key (a
    /// batch of one item is keyed by that item already).
    pub(super) fn item_rows(&self) -> impl Iterator<Item = &(String, i64)> {
        self.items.iter().filter(|(key, _)| *key != self.dedup_key)
    }
}

/// What the dedup index holds for an (endpoint, dedup key): the first 8 bytes of SHA-256 over
/// the endpoint, a zero byte and the key, as a signed integer. Stored in every row, so it must
/// never change. Two keys may share a hash (about one chance in 10^8 among a million events);
/// the insert compares the full key, so they are still two events.
pub fn dedup_hash(endpoint: &str, dedup_key: &str) -> i64 {
    let digest = crate::digest::sha256(&[endpoint.as_bytes(), &[0u8], dedup_key.as_bytes()]);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// What inserting an event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row, with its id.
    New(i64),
    /// The (endpoint, dedup key) was already there (within the window, if the endpoint has
    /// one): the id of the newest such row.
    Duplicate(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dedup_hash_is_fixed_and_covers_the_endpoint() {
        // Stored in every row: a change here would let every old event in again.
        // Computed independently: SHA-256 of b"pagarme\0hook_1", first 8 bytes, big-endian.
        assert_eq!(
            dedup_hash("pagarme", "hook_1"),
            0x54d0_7625_2da8_a59c_u64 as i64
        );
        assert_eq!(dedup_hash("", ""), 0x6e34_0b9c_ffb3_7a98_u64 as i64);
        assert_ne!(dedup_hash("a", "b"), dedup_hash("b", "a"));
        assert_ne!(dedup_hash("ab", "c"), dedup_hash("a", "bc"));
    }
}
