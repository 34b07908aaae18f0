//! What a reconcile run asks of the store: which of the gateway's events portaria never
//! stored, by dedup key, per endpoint, whatever the event's age, status or dedup window; and
//! what it stores itself, taken from the gateway's API: an event of origin `reconcile`, read
//! back so by every reader (list, detail, the worker's claim), kept through prune and
//! restore, and the barrier for a late real delivery of it.

use portaria::store::{AfterAttempt, Cutoffs, Inserted, ListFilter, Origin, Status};

use super::{DAY, HOUR, Subject, Webhook, route};

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| k.to_string()).collect()
}

async fn never_stored_names_the_keys_no_event_of_the_endpoint_has(s: &Subject) {
    let now = s.now;
    s.new_event(Webhook::new("pagarme", "hook_1", now - 2 * DAY))
        .await;
    // Stored only, and delivered: both were received.
    s.new_event(Webhook::new("pagarme", "hook_2", now - HOUR).to(&[]))
        .await;
    // Another endpoint's key is not this one's.
    s.new_event(Webhook::new("stripe", "hook_3", now)).await;
    // A window long passed still means the event was received.
    s.new_event(Webhook::new("pagarme", "hook_4", now - 3 * DAY).window(HOUR))
        .await;
    let asked = keys(&["hook_5", "hook_1", "hook_3", "hook_2", "hook_4", "hook_0"]);
    assert_eq!(
        s.store.never_stored("pagarme", asked).await.unwrap(),
        keys(&["hook_5", "hook_3", "hook_0"]),
        "the keys never stored, in the order asked"
    );
    assert!(
        s.store
            .never_stored("pagarme", Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
    // Another handle (a command beside the server) sees the same.
    let other = s.another().await;
    assert_eq!(
        other
            .never_stored("stripe", keys(&["hook_3", "hook_1"]))
            .await
            .unwrap(),
        keys(&["hook_1"])
    );
    super::close(other).await;
}

async fn an_event_taken_from_the_api_is_read_back_as_reconciled(s: &Subject) {
    let now = s.now;
    let taken = s
        .new_event(Webhook::new("stripe", "evt_1", now - HOUR).reconciled())
        .await;
    let webhook = s
        .new_event(Webhook::new("stripe", "evt_2", now - HOUR))
        .await;
    // Every reader says where each came from.
    let listed = s.store.list_events(ListFilter::default()).await.unwrap();
    let origin_of = |id: i64| listed.iter().find(|e| e.id == id).unwrap().origin;
    assert_eq!(
        (origin_of(taken), origin_of(webhook)),
        (Origin::Reconcile, Origin::Webhook)
    );
    let detail = s.detail(taken).await;
    assert_eq!(detail.summary.origin, Origin::Reconcile);
    assert_eq!(detail.signed_id, None, "no signature, no signed id");
    assert_eq!(
        detail.event_type_signed,
        Some(true),
        "the API said its type"
    );
    let claimed = s
        .claim("stripe", "default", portaria::store::Order::Any, 10, now)
        .await;
    let origins: Vec<(i64, Origin)> = claimed
        .deliveries
        .iter()
        .map(|d| (d.event_id, d.origin))
        .collect();
    assert_eq!(
        origins,
        [(taken, Origin::Reconcile), (webhook, Origin::Webhook)]
    );
    // A late real delivery of it is a duplicate of it.
    assert_eq!(
        s.insert(Webhook::new("stripe", "evt_1", now)).await,
        Inserted::Duplicate(taken)
    );
    for d in &claimed.deliveries {
        s.record(d, now, AfterAttempt::Delivered).await;
    }
    s.store.roll_up(vec![taken, webhook]).await.unwrap();
    // Pruned (archived) and restored, it is still a reconciled event.
    let archived = vec![s.detail(taken).await];
    let pruning = s.store.pruning().await.unwrap().unwrap();
    let later = Cutoffs {
        finished_before_ms: now + DAY,
        dead_before_ms: now + DAY,
    };
    assert_eq!(
        pruning
            .delete_pruned(later, vec![taken])
            .await
            .unwrap()
            .len(),
        1
    );
    drop(pruning);
    let restored = s.restore(&archived, &[route("default", None)]).await;
    assert_eq!(restored.inserted, 1);
    let back = s.store.list_events(ListFilter::default()).await.unwrap();
    let back = back.iter().find(|e| e.dedup_key == "evt_1").unwrap();
    assert_eq!(
        (back.origin, back.status),
        (Origin::Reconcile, Status::Pending)
    );
}

/// What a Mercado Pago run reads: per object its webhooks signed (`data.id`), when portaria
/// last heard of it within the window, of this endpoint only.
async fn the_signed_ids_of_a_window_come_with_their_newest_time(s: &Subject) {
    let now = s.now;
    let signed = |key: &str, id: &str, at: i64| {
        let mut w = Webhook::new("mercadopago", key, at);
        w.signed_id = Some(id.into());
        w
    };
    s.new_event(signed("n1", "pay_1", now - 2 * HOUR)).await;
    s.new_event(signed("n2", "pay_1", now - HOUR)).await;
    s.new_event(signed("n3", "pay_2", now - 3 * DAY)).await;
    s.new_event(Webhook::new("mercadopago", "unsigned", now))
        .await;
    let mut other = signed("n4", "pay_3", now);
    other.endpoint = "mp-other".into();
    s.new_event(other).await;
    let heard = s
        .store
        .signed_ids_since("mercadopago", now - DAY)
        .await
        .unwrap();
    assert_eq!(
        heard,
        std::collections::HashMap::from([("pay_1".to_string(), now - HOUR)])
    );
    assert!(
        s.store
            .signed_ids_since("mercadopago", now + 1)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Each endpoint's last run is kept as the run wrote it, the newest replacing the one
/// before, seen by another handle (the server beside a command), apart from the alerts
/// task's state in the same `meta`.
async fn the_last_run_of_each_endpoint_is_kept(s: &Subject) {
    assert!(s.store.reconcile_runs().await.unwrap().is_empty());
    s.store
        .save_reconcile_run("stripe", r#"{"n":1}"#.into())
        .await
        .unwrap();
    s.store
        .save_reconcile_run("asaas", r#"{"n":2}"#.into())
        .await
        .unwrap();
    s.store
        .save_reconcile_run("stripe", r#"{"n":3}"#.into())
        .await
        .unwrap();
    s.store
        .save_alert_state(vec![("alerts:x".into(), "y".into())])
        .await
        .unwrap();
    let other = s.another().await;
    assert_eq!(
        other.reconcile_runs().await.unwrap(),
        [
            ("asaas".to_string(), r#"{"n":2}"#.to_string()),
            ("stripe".to_string(), r#"{"n":3}"#.to_string())
        ]
    );
    super::close(other).await;
}

/// One reconcile run at a time per store: the hold is exclusive across handles (the server
/// and a command, two instances), released when let go. On SQLite a lock file beside the
/// database, on PostgreSQL a session's advisory lock: the same promise.
async fn one_reconcile_run_holds_the_store_at_a_time(s: &Subject) {
    let other = s.another().await;
    let held = s
        .store
        .reconcile_hold()
        .await
        .unwrap()
        .expect("free at first");
    assert!(
        other.reconcile_hold().await.unwrap().is_none(),
        "another handle must not get it while it is held"
    );
    assert!(
        s.store.reconcile_hold().await.unwrap().is_none(),
        "nor the same handle a second time"
    );
    held.release().await;
    let again = other.reconcile_hold().await.unwrap();
    assert!(again.is_some(), "free again once the holder let go");
    drop(again);
    super::close(other).await;
}

engines!(
    one_reconcile_run_holds_the_store_at_a_time,
    never_stored_names_the_keys_no_event_of_the_endpoint_has,
    the_last_run_of_each_endpoint_is_kept,
    the_signed_ids_of_a_window_come_with_their_newest_time,
    an_event_taken_from_the_api_is_read_back_as_reconciled,
);
