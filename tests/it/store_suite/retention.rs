//! Retention and restore: what may be pruned (finished events past their window, never a
//! pending or delivering one), the batches a pass deletes or reads for the archive (in the
//! order the events were stored, bounded by rows and bytes), and `archive replay`'s restore
//! (never a second row for one key; a reset event keeps its history).

use portaria::store::{
    AfterAttempt, Cutoffs, EventDetail, Inserted, ListFilter, PrunableGroup, Restored, Status,
};

use super::{DAY, MINUTE, Subject, Webhook, dead, route};

fn cutoffs(s: &Subject) -> Cutoffs {
    Cutoffs {
        finished_before_ms: s.now - 30 * DAY,
        dead_before_ms: s.now - 90 * DAY,
    }
}

/// One event of pagarme in `status` (to a route of its own, named like its key), received
/// `age_days` ago; its id.
async fn aged(s: &Subject, key: &str, status: Status, age_days: i64) -> i64 {
    let w = Webhook::new("pagarme", key, s.now - age_days * DAY);
    let w = match status {
        Status::Stored => w.to(&[]),
        _ => w.to(&[(key, None)]),
    };
    let id = s.new_event(w).await;
    match status {
        Status::Delivering => drop(s.claim_one("pagarme", key, s.now).await),
        Status::Delivered => drop(
            s.attempt("pagarme", key, s.now, AfterAttempt::Delivered)
                .await,
        ),
        Status::Dead => drop(s.attempt("pagarme", key, s.now, dead()).await),
        Status::Pending | Status::Stored => {}
    }
    id
}

async fn all_ids(s: &Subject) -> Vec<i64> {
    let mut ids: Vec<i64> = s
        .store
        .list_events(ListFilter::default())
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    ids.sort();
    ids
}

/// Delivered and stored events past `retention_days`, dead ones past `dead_retention_days`;
/// pending and delivering ones never, however old. The dry run's counts are what goes; a
/// pruned key is forgotten by the barrier.
async fn only_finished_events_past_their_window_are_prunable(s: &Subject) {
    let mut keep = Vec::new();
    let mut gone = Vec::new();
    for status in Status::ALL {
        let young = aged(s, &format!("young-{status}"), status, 29).await;
        let old = aged(s, &format!("old-{status}"), status, 31).await;
        let ancient = aged(s, &format!("ancient-{status}"), status, 91).await;
        keep.push(young);
        match status {
            Status::Delivered | Status::Stored => gone.extend([old, ancient]),
            Status::Dead => {
                keep.push(old);
                gone.push(ancient);
            }
            Status::Pending | Status::Delivering => keep.extend([old, ancient]),
        }
    }
    // Each event's stored bytes: its headers and body.
    let bytes = |key: &str| {
        let w = Webhook::new("pagarme", key, 0);
        (w.headers.len() + w.body.len()) as u64
    };
    let group = |status, keys: &[&str]| PrunableGroup {
        endpoint: "pagarme".into(),
        status,
        events: keys.len() as u64,
        bytes: keys.iter().map(|k| bytes(k)).sum(),
    };
    assert_eq!(
        s.store.prunable_counts(cutoffs(s)).await.unwrap(),
        [
            group(Status::Dead, &["ancient-dead"]),
            group(Status::Delivered, &["old-delivered", "ancient-delivered"]),
            group(Status::Stored, &["old-stored", "ancient-stored"]),
        ]
    );
    let pruning = s.store.pruning().await.unwrap().expect("no other pass");
    let removed = pruning.delete_prunable(cutoffs(s), 500).await.unwrap();
    drop(pruning);
    assert_eq!(removed.len(), gone.len());
    assert_eq!(
        removed.iter().map(|r| r.bytes).sum::<u64>(),
        [
            "old-delivered",
            "ancient-delivered",
            "old-stored",
            "ancient-stored",
            "ancient-dead"
        ]
        .iter()
        .map(|k| bytes(k))
        .sum::<u64>()
    );
    keep.sort();
    assert_eq!(all_ids(s).await, keep);
    assert!(
        s.store
            .prunable_counts(cutoffs(s))
            .await
            .unwrap()
            .is_empty()
    );
    // The barrier forgot the pruned keys, and only those.
    let again = |key: &str| Webhook::new("pagarme", key, s.now).to(&[]);
    assert!(matches!(
        s.insert(again("old-stored")).await,
        Inserted::New(_)
    ));
    assert!(matches!(
        s.insert(again("old-dead")).await,
        Inserted::Duplicate(_)
    ));
}

/// A pass deletes and reads in the order the events were stored (by id), not by the time
/// they say they were received: an event received long ago but stored later (a restored one,
/// a late redelivery) waits for its turn.
async fn batches_go_in_the_order_events_were_stored(s: &Subject) {
    let x = aged(s, "x", Status::Stored, 40).await;
    let y = aged(s, "y", Status::Stored, 50).await;
    let z = aged(s, "z", Status::Stored, 45).await;
    let pruning = s.store.pruning().await.unwrap().unwrap();
    let batch = pruning.prunable(cutoffs(s), 2, u64::MAX).await.unwrap();
    let read: Vec<i64> = batch.iter().map(|e| e.summary.id).collect();
    assert_eq!(read, [x, y]);
    let first = pruning.delete_prunable(cutoffs(s), 1).await.unwrap();
    assert_eq!(first.len(), 1);
    drop(pruning);
    assert_eq!(all_ids(s).await, [y, z], "x went first");
}

/// A batch for the archive: each event in full (headers, body, its attempts), stopping once
/// the bytes pass the budget but taking one at least; deleted afterwards by id, each only if
/// still prunable (one replayed meanwhile stays).
async fn an_archive_batch_is_read_in_full_and_deleted_only_if_still_prunable(s: &Subject) {
    let gone_dead = aged(s, "b", Status::Dead, 100).await;
    let delivered = s
        .new_event(Webhook::new("pagarme", "a", s.now - 40 * DAY).to(&[("a", None)]))
        .await;
    s.attempt("pagarme", "a", s.now, super::retry_at(s.now))
        .await;
    s.attempt("pagarme", "a", s.now + 1, AfterAttempt::Delivered)
        .await;
    for n in 0..3 {
        aged(s, &format!("c{n}"), Status::Stored, 40).await;
    }
    let pruning = s.store.pruning().await.unwrap().unwrap();
    let all = pruning.prunable(cutoffs(s), 500, u64::MAX).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[0].summary.id, gone_dead);
    assert_eq!(all[0].attempts.len(), 1);
    let second: &EventDetail = &all[1];
    assert_eq!(second.summary.id, delivered);
    assert_eq!(second.summary.status, Status::Delivered);
    let w = Webhook::new("pagarme", "a", 0);
    assert_eq!((&second.headers, &second.body), (&w.headers, &w.body));
    let outcomes: Vec<&str> = second.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["failed", "delivered"], "read with its attempts");
    // The byte budget: each event is ~30 bytes; at least one, then until past the budget.
    let size = (w.headers.len() + w.body.len()) as u64;
    assert_eq!(pruning.prunable(cutoffs(s), 500, 1).await.unwrap().len(), 1);
    assert_eq!(
        pruning
            .prunable(cutoffs(s), 500, 2 * size + 1)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        pruning
            .prunable(cutoffs(s), 2, u64::MAX)
            .await
            .unwrap()
            .len(),
        2
    );
    // The dead one is replayed between the read and the delete: it stays.
    assert!(s.store.replay_event(gone_dead, s.now).await.unwrap());
    let ids = all.iter().map(|e| e.summary.id).collect();
    let removed = pruning.delete_pruned(cutoffs(s), ids).await.unwrap();
    drop(pruning);
    assert_eq!(removed.len(), 4);
    assert_eq!(all_ids(s).await, [gone_dead]);
}

/// The archive's read of these events, as `archive replay` hands them back.
async fn archived(s: &Subject, ids: &[i64]) -> Vec<EventDetail> {
    let mut out = Vec::new();
    for id in ids {
        out.push(s.detail(*id).await);
    }
    out
}

/// Restore: a key no longer stored comes back as a new pending event (its received time,
/// headers and body as archived, due now); a finished one goes back to pending; one pending
/// or being delivered is left alone; never a second row for one key.
async fn restoring_never_makes_a_second_row_for_one_key(s: &Subject) {
    let mut w = Webhook::new("pagarme", "gone", s.now - 200 * DAY)
        .object("ch_gone")
        .to(&[("gone", None)]);
    w.signed_id = Some("pay_gone".into());
    let gone = s.new_event(w).await;
    s.attempt("pagarme", "gone", s.now, AfterAttempt::Delivered)
        .await;
    let delivered = aged(s, "delivered", Status::Delivered, 1).await;
    let pending = aged(s, "pending", Status::Pending, 1).await;
    let delivering = aged(s, "delivering", Status::Delivering, 1).await;
    let events = archived(s, &[gone, delivered, pending, delivering]).await;
    let pruning = s.store.pruning().await.unwrap().unwrap();
    assert_eq!(
        pruning
            .delete_pruned(cutoffs(s), vec![gone])
            .await
            .unwrap()
            .len(),
        1
    );
    drop(pruning);
    let to = [route("default", None)];
    assert_eq!(
        s.restore(&events, &to).await,
        Restored {
            inserted: 1,
            reset: 1,
            already_queued: 2
        }
    );
    assert_eq!(
        s.restore(&events, &to).await.already_queued,
        4,
        "all on their way"
    );
    let listed = s.store.list_events(ListFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 4);
    let back = listed.iter().find(|e| e.dedup_key == "gone").unwrap();
    assert!(back.id > delivering, "a new id");
    assert_eq!(back.status, Status::Pending);
    assert_eq!(
        back.received_at_ms,
        s.now - 200 * DAY,
        "keeps its received time"
    );
    assert_eq!(back.next_attempt_at_ms, Some(s.now), "due now");
    let e = s.detail(back.id).await;
    let was = &events[0];
    assert_eq!((&e.headers, &e.body), (&was.headers, &was.body));
    assert_eq!(e.content_type, was.content_type);
    assert_eq!(e.summary.event_type, was.summary.event_type);
    assert_eq!(e.summary.object_id.as_deref(), Some("ch_gone"));
    assert_eq!(e.signed_id.as_deref(), Some("pay_gone"));
    assert_eq!(e.event_type_signed, Some(true));
    assert_eq!(e.routes[0].route, "default");
    let reset = s.detail(delivered).await;
    assert_eq!(reset.summary.status, Status::Pending);
    assert_eq!(reset.routes.len(), 1);
    assert_eq!(
        (reset.routes[0].route.as_str(), reset.routes[0].status),
        ("default", Status::Pending),
        "to the routes it goes to now"
    );
    assert_eq!(
        s.detail(delivering).await.summary.status,
        Status::Delivering
    );
}

/// A restored event that was delivered keeps its delivered attempt in the history, as a
/// replay does.
async fn a_restored_event_keeps_its_history(s: &Subject) {
    let id = aged(s, "k", Status::Delivered, 1).await;
    let events = archived(s, &[id]).await;
    assert_eq!(events[0].attempts.len(), 1);
    let restored = s.restore(&events, &[route("default", None)]).await;
    assert_eq!(restored.reset, 1);
    let e = s.detail(id).await;
    let outcomes: Vec<(&str, &str)> = e
        .attempts
        .iter()
        .map(|a| (a.outcome.as_str(), a.route.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [("delivered", "k")],
        "the delivered attempt is kept"
    );
    // With no route now, it is stored.
    let other = aged(s, "stored", Status::Delivered, 1).await;
    let events = archived(s, &[other]).await;
    assert_eq!(s.restore(&events, &[]).await.reset, 1);
    let e = s.detail(other).await;
    assert_eq!(e.summary.status, Status::Stored);
    assert!(e.routes.is_empty());
}

/// With a dedup window a key may have several events: restore sends it once more (the
/// newest goes back to pending), and not again while that one is on its way.
async fn restoring_a_key_with_several_events_sends_it_once_more(s: &Subject) {
    let at = |ago: i64| Webhook::new("pagarme", "k", s.now - ago).window(MINUTE);
    let older = s.new_event(at(3 * DAY)).await;
    let newer = s.new_event(at(2 * DAY)).await;
    for after in [AfterAttempt::Delivered, dead()] {
        let d = s.claim_one("pagarme", "default", s.now).await;
        s.record(&d, s.now, after).await;
    }
    s.store.roll_up(vec![older, newer]).await.unwrap();
    let events = archived(s, &[older]).await;
    let to = [route("default", None)];
    assert_eq!(
        s.restore(&events, &to).await,
        Restored {
            reset: 1,
            ..Restored::default()
        }
    );
    let status = |id| async move { s.detail(id).await.summary.status };
    assert_eq!(status(newer).await, Status::Pending, "the newest");
    assert_eq!(status(older).await, Status::Delivered, "only one");
    assert_eq!(s.restore(&events, &to).await.already_queued, 1);
    assert_eq!(status(older).await, Status::Delivered);
    assert_eq!(all_ids(s).await, [older, newer]);
}

/// A pruned batch's items go with it: they no longer make a later batch a duplicate.
async fn a_pruned_batch_takes_its_items_with_it(s: &Subject) {
    let batch = |items: &[&str], ago: i64| {
        Webhook::new("adyen", &items.join(","), s.now - ago)
            .items(items)
            .to(&[])
    };
    let old = s.new_event(batch(&["A", "B"], 40 * DAY)).await;
    let young = s.new_event(batch(&["C", "D"], DAY)).await;
    assert_eq!(
        s.insert(batch(&["A"], 39 * DAY)).await,
        Inserted::Duplicate(old)
    );
    let pruning = s.store.pruning().await.unwrap().expect("no other pass");
    let removed = pruning.delete_prunable(cutoffs(s), 500).await.unwrap();
    drop(pruning);
    assert_eq!(removed.len(), 1);
    assert_eq!(all_ids(s).await, [young]);
    assert!(matches!(s.insert(batch(&["A"], 0)).await, Inserted::New(_)));
    assert_eq!(s.insert(batch(&["D"], 0)).await, Inserted::Duplicate(young));
}

engines!(
    a_pruned_batch_takes_its_items_with_it,
    only_finished_events_past_their_window_are_prunable,
    batches_go_in_the_order_events_were_stored,
    an_archive_batch_is_read_in_full_and_deleted_only_if_still_prunable,
    restoring_never_makes_a_second_row_for_one_key,
    a_restored_event_keeps_its_history,
    restoring_a_key_with_several_events_sends_it_once_more,
);
