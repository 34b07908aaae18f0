//! Verify-by-fetching's record (`Store::fetched`, `Store::keep_fetched`): what the gateway's
//! API said of the object an event names, kept once per event (the first object answered is
//! the event's for good; a rejection may still be replaced by an object, a replay after the
//! owner fixed `api_base`), read back by one event's detail and by another handle, gone
//! with the event when it is pruned, and back with it when the archive is replayed.

use portaria::store::{AfterAttempt, Cutoffs, Fetched, ListFilter};

use super::{DAY, HOUR, Subject, Webhook, route};

async fn the_first_object_fetched_is_kept_once_and_read_back(s: &Subject) {
    let now = s.now;
    let id = s
        .new_event(Webhook::new("mercadopago", "mp-1", now - HOUR))
        .await;
    let other = s
        .new_event(Webhook::new("mercadopago", "mp-2", now - HOUR))
        .await;
    assert_eq!(s.store.fetched(id).await.unwrap(), None, "never fetched");
    assert_eq!(s.detail(id).await.fetched, None);

    let first = Fetched::Object(r#"{"id":59,"status":"approved"}"#.into());
    assert_eq!(
        s.store.keep_fetched(id, first.clone()).await.unwrap(),
        first
    );
    // A second answer (another route, another instance) changes nothing: the first is kept.
    let second = Fetched::Object(r#"{"id":59,"status":"refunded"}"#.into());
    assert_eq!(s.store.keep_fetched(id, second).await.unwrap(), first);
    let rejected = Fetched::Rejected("no such payment".into());
    assert_eq!(s.store.keep_fetched(id, rejected).await.unwrap(), first);
    assert_eq!(s.store.fetched(id).await.unwrap(), Some(first.clone()));
    assert_eq!(s.detail(id).await.fetched, Some(first.clone()));
    assert_eq!(
        s.store.fetched(other).await.unwrap(),
        None,
        "one event's only"
    );
    // Another handle (a command beside the server) reads the same.
    let handle = s.another().await;
    assert_eq!(handle.fetched(id).await.unwrap(), Some(first));
    super::close(handle).await;
}

async fn a_rejection_is_kept_until_an_object_replaces_it(s: &Subject) {
    let now = s.now;
    let id = s
        .new_event(Webhook::new("asaas", "evt_1", now - HOUR))
        .await;
    let rejected = Fetched::Rejected("the gateway has no such payment (HTTP 404)".into());
    assert_eq!(
        s.store.keep_fetched(id, rejected.clone()).await.unwrap(),
        rejected
    );
    let detail = s.detail(id).await;
    assert_eq!(
        detail.fetched.as_ref().map(Fetched::state),
        Some("rejected_by_fetch")
    );
    // Asked again after a replay, the gateway has it: the object replaces the rejection.
    let object = Fetched::Object(r#"{"id":"pay_1"}"#.into());
    assert_eq!(
        s.store.keep_fetched(id, object.clone()).await.unwrap(),
        object
    );
    assert_eq!(s.store.fetched(id).await.unwrap(), Some(object));
}

async fn the_record_goes_with_its_event(s: &Subject) {
    let now = s.now;
    let id = s
        .new_event(Webhook::new("mercadopago", "mp-9", now - HOUR))
        .await;
    let object = Fetched::Object(r#"{"id":9}"#.into());
    s.store.keep_fetched(id, object).await.unwrap();
    s.attempt("mercadopago", "default", now, AfterAttempt::Delivered)
        .await;
    let pruning = s.store.pruning().await.unwrap().unwrap();
    let later = Cutoffs {
        finished_before_ms: now + DAY,
        dead_before_ms: now + DAY,
    };
    let removed = pruning.delete_pruned(later, vec![id]).await.unwrap();
    assert_eq!(removed.len(), 1);
    drop(pruning);
    assert_eq!(s.store.fetched(id).await.unwrap(), None);
}

/// An endpoint's records since a time, in one read: its events' only, from that time on,
/// an object or a rejection alike, keyed by event.
async fn an_endpoint_s_records_since_a_time_are_read_at_once(s: &Subject) {
    let now = s.now;
    let mut ids = Vec::new();
    for (endpoint, key, at) in [
        ("cielo", "c-old", now - 2 * DAY),
        ("cielo", "c-1", now - HOUR),
        ("cielo", "c-2", now - HOUR),
        ("cielo", "c-none", now - HOUR),
        ("mercadopago", "mp-1", now - HOUR),
    ] {
        ids.push(s.new_event(Webhook::new(endpoint, key, at)).await);
    }
    let object = Fetched::Object(r#"{"Payment":{"Status":1}}"#.into());
    let rejected = Fetched::Rejected("no such sale".into());
    for (id, f) in [
        (ids[0], &object),
        (ids[1], &object),
        (ids[2], &rejected),
        (ids[4], &object),
    ] {
        s.store.keep_fetched(id, f.clone()).await.unwrap();
    }
    let got = s.store.fetched_since("cielo", now - DAY).await.unwrap();
    let mut got: Vec<(i64, Fetched)> = got.into_iter().collect();
    got.sort_unstable_by_key(|(id, _)| *id);
    assert_eq!(got, [(ids[1], object), (ids[2], rejected)]);
    assert!(s.store.fetched_since("none", 0).await.unwrap().is_empty());
}

/// Pruned into the archive, the record goes with its event's batch; restored, it is the
/// event's again (a delivery reads the object instead of asking the gateway; a rejection is
/// asked again), on a new row as on a row reset, where an object the row has stays.
async fn the_record_goes_to_the_archive_and_back(s: &Subject) {
    let now = s.now;
    let object = Fetched::Object(r#"{"id":59,"status":"approved"}"#.into());
    let rejected = Fetched::Rejected("no such payment".into());
    let mut ids = Vec::new();
    for key in ["mp-59", "mp-66", "mp-1"] {
        let w = Webhook::new("mercadopago", key, now - 40 * DAY).to(&[]);
        ids.push(s.new_event(w).await);
    }
    s.store.keep_fetched(ids[0], object.clone()).await.unwrap();
    s.store
        .keep_fetched(ids[1], rejected.clone())
        .await
        .unwrap();
    let pruning = s.store.pruning().await.unwrap().unwrap();
    let cutoffs = Cutoffs {
        finished_before_ms: now - 30 * DAY,
        dead_before_ms: now - 30 * DAY,
    };
    let batch = pruning.prunable(cutoffs, 500, u64::MAX).await.unwrap();
    let read: Vec<_> = batch.iter().map(|e| e.fetched.clone()).collect();
    assert_eq!(read, [Some(object.clone()), Some(rejected.clone()), None]);
    assert_eq!(pruning.delete_pruned(cutoffs, ids).await.unwrap().len(), 3);
    drop(pruning);

    let to = [route("default", None)];
    assert_eq!(s.restore(&batch, &to).await.inserted, 3);
    let mut back = Vec::new();
    for e in s.store.list_events(ListFilter::default()).await.unwrap() {
        back.push((e.dedup_key, s.store.fetched(e.id).await.unwrap()));
    }
    back.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        back,
        [
            ("mp-1".to_string(), None),
            ("mp-59".to_string(), Some(object.clone())),
            ("mp-66".to_string(), Some(rejected.clone())),
        ]
    );

    // A key still stored is reset: an object replaces its rejection, and stays once kept.
    let stored = s
        .new_event(Webhook::new("mercadopago", "mp-5", now - HOUR).to(&[]))
        .await;
    s.store
        .keep_fetched(stored, rejected.clone())
        .await
        .unwrap();
    let mut archived = s.detail(stored).await;
    archived.fetched = Some(object.clone());
    assert_eq!(s.restore(&[archived], &[]).await.reset, 1);
    assert_eq!(s.store.fetched(stored).await.unwrap(), Some(object.clone()));
    let mut archived = s.detail(stored).await;
    archived.fetched = Some(rejected);
    assert_eq!(s.restore(&[archived.clone()], &[]).await.reset, 1);
    assert_eq!(s.store.fetched(stored).await.unwrap(), Some(object.clone()));

    // An archived event whose key a newer event holds now (a thin body's repeat: Cielo's two
    // changes of one sale) resets that event, without giving it the older object.
    let newer = s
        .new_event(Webhook::new("mercadopago", "mp-7", now - HOUR).to(&[]))
        .await;
    let mut older = archived;
    older.summary.id = newer + 1_000;
    older.summary.dedup_key = "mp-7".into();
    older.fetched = Some(object);
    assert_eq!(s.restore(&[older], &[]).await.reset, 1);
    assert_eq!(s.store.fetched(newer).await.unwrap(), None);
}

engines!(
    an_endpoint_s_records_since_a_time_are_read_at_once,
    the_record_goes_to_the_archive_and_back,
    the_first_object_fetched_is_kept_once_and_read_back,
    a_rejection_is_kept_until_an_object_replaces_it,
    the_record_goes_with_its_event,
);
