//! What changed upstream, as the alerts task reads it (issue 27): the event types stored after
//! a cursor (`new_type`) and the events of one endpoint, received in a span, that no route took
//! (`unrouted`). On PostgreSQL only the instance holding the alerts lock is answered (its
//! listening session takes it once asked: asked until it comes), and the types cursor trails
//! the newest event by `TYPES_SETTLE_MS` (a difference on purpose: ids there are handed out in
//! insert order, not commit order).

use std::time::{Duration, Instant};

use portaria::store::{TYPES_SETTLE_MS, TypesBatch, Unrouted};

use super::{Engine, MINUTE, Subject, Webhook};

/// The types after `cursor`, asked until this instance answers (PostgreSQL's alerts lock).
async fn types_after(s: &Subject, cursor: i64) -> TypesBatch {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let batch = s.store.event_types_after(Some(cursor)).await.unwrap();
        if s.engine == Engine::Sqlite || !batch.types.is_empty() {
            return batch;
        }
        assert!(Instant::now() < deadline, "no types handed over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn seen(batch: &TypesBatch) -> Vec<(String, String, i64)> {
    batch
        .types
        .iter()
        .map(|t| (t.endpoint.clone(), t.event_type.clone(), t.first_id))
        .collect()
}

async fn the_types_after_a_cursor_name_each_first_event_once(s: &Subject) {
    let old = s.now - 5 * MINUTE;
    let at = |n: i64| old + n * 1000;
    let paid1 = s
        .new_event(Webhook::new("a", "1", at(1)).typed(Some("paid")))
        .await;
    s.new_event(Webhook::new("a", "2", at(2)).typed(Some("paid")))
        .await;
    let refunded = s
        .new_event(Webhook::new("a", "3", at(3)).typed(Some("refunded")))
        .await;
    let other = s
        .new_event(Webhook::new("b", "4", at(4)).typed(Some("paid")))
        .await;
    s.new_event(Webhook::new("a", "5", at(5)).typed(None)).await;
    let first = types_after(s, 0).await;
    let expected = vec![
        ("a".to_string(), "paid".to_string(), paid1),
        ("a".into(), "refunded".into(), refunded),
        ("b".into(), "paid".into(), other),
    ];
    assert_eq!(seen(&first), expected, "untyped events are left out");
    assert_eq!(first.types[0].first_ms, at(1));
    // Past the cursor: nothing already told, on both engines (these are settled).
    assert!(old < s.now - TYPES_SETTLE_MS);
    let again = s.store.event_types_after(Some(first.cursor)).await.unwrap();
    assert_eq!(seen(&again), []);

    // A young event: found; SQLite's cursor passes it, PostgreSQL's waits for it to settle.
    let young = s
        .new_event(Webhook::new("a", "6", s.now).typed(Some("pix.sent")))
        .await;
    let next = s.store.event_types_after(Some(again.cursor)).await.unwrap();
    assert_eq!(
        seen(&next),
        [("a".to_string(), "pix.sent".to_string(), young)]
    );
    let later = s.store.event_types_after(Some(next.cursor)).await.unwrap();
    match s.engine {
        Engine::Sqlite => assert_eq!(seen(&later), [], "the cursor is the newest id"),
        Engine::Postgres => assert_eq!(seen(&later), seen(&next), "read again until settled"),
    }
    // From now on: nothing of the past is read, the cursor is where the next look starts.
    let start = s.store.event_types_after(None).await.unwrap();
    assert_eq!(seen(&start), []);
    let after = s.store.event_types_after(Some(start.cursor)).await.unwrap();
    match s.engine {
        Engine::Sqlite => assert_eq!((start.cursor, seen(&after)), (young, vec![])),
        Engine::Postgres => assert_eq!(seen(&after), seen(&next), "not settled yet"),
    }
    // Another instance, while this one holds the alerts lock: on PostgreSQL no types, but its
    // cursor moves along (to the settled events), so that taking the lock over reads on from
    // there; SQLite has no lock.
    let other = s.another().await;
    let elsewhere = other.event_types_after(Some(0)).await.unwrap();
    match s.engine {
        Engine::Sqlite => assert_eq!(seen(&elsewhere).len(), 4),
        Engine::Postgres => {
            assert_eq!(seen(&elsewhere), []);
            assert_eq!(elsewhere.cursor, first.cursor, "past the settled ones");
        }
    }
    super::close(other).await;
}

async fn unrouted_events_are_counted_in_their_span_while_still_stored_only(s: &Subject) {
    let t = s.now - 10 * MINUTE;
    let stored = |key: &str, at: i64| Webhook::new("a", key, at).to(&[]);
    let one = s.new_event(stored("1", t + 1000)).await;
    s.new_event(Webhook::new("a", "routed", t + 2000)).await;
    let two = s.new_event(stored("2", t + 3000)).await;
    s.new_event(stored("late", t + 60_000)).await;
    s.new_event(Webhook::new("b", "elsewhere", t + 2000).to(&[]))
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let span = loop {
        let n = s
            .store
            .unrouted_between("a".into(), t, t + 3000)
            .await
            .unwrap();
        if s.engine == Engine::Sqlite || n.count > 0 {
            break n;
        }
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        span,
        Unrouted {
            count: 2,
            first_id: Some(one),
            last_id: Some(two)
        }
    );
    // The span's start is out, its end in.
    let edge = s
        .store
        .unrouted_between("a".into(), t + 1000, t + 2999)
        .await
        .unwrap();
    assert_eq!(edge, Unrouted::default());
    let nobody = s
        .store
        .unrouted_between("c".into(), t, s.now)
        .await
        .unwrap();
    assert_eq!(nobody.count, 0);
}

engines!(
    the_types_after_a_cursor_name_each_first_event_once,
    unrouted_events_are_counted_in_their_span_while_still_stored_only,
);
