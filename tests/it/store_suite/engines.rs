//! Where the engines differ on purpose, each difference asserted as each engine documents it
//! (docs/postgres.md), beside what both still promise:
//!
//! - an attempt cut off by a stop: SQLite's next start recovers it (`recover`); PostgreSQL has
//!   no recovery pass, the claim's lease runs out and any instance takes it over. Either way
//!   the cut-off attempt is recorded `interrupted` and the next one is the second;
//! - a pruning pass: on PostgreSQL it holds the retention lock (an advisory lock), and another
//!   instance's pass is skipped meanwhile; on SQLite every handle may prune (one file, one
//!   writer at a time);
//! - another handle's commits: PostgreSQL wakes this one by `LISTEN/NOTIFY`
//!   (`changed_elsewhere`); SQLite never does, and its worker reads `data_version` instead;
//!   both move `data_version`;
//! - the alerts task's dead deliveries: SQLite after a cursor on attempt ids, PostgreSQL by a
//!   mark on each delivery, read only by the instance holding the alerts lock. Either way a
//!   death is handed over once, and a replayed delivery that dies again is handed over again.
//!
//! The leases' other face, the next due time of a lane whose deliveries are all claimed, is
//! [`Subject::assert_lease_end`], used in `queue.rs`.

use std::time::{Duration, Instant};

use portaria::store::{AfterAttempt, DeadBatch, LaneClaim, Order, Status, Store};

use super::{Engine, MINUTE, Subject, Webhook, dead};

async fn an_attempt_cut_off_by_a_stop_is_recorded_interrupted_and_tried_again(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.claim_one("pagarme", "default", s.now).await;
    // The process delivering it stops; nothing records its attempt.
    let restart = s.now + 1000;
    let other = s.another().await;
    let lane = || LaneClaim {
        endpoint: "pagarme".into(),
        route: "default".into(),
        limit: 1,
        order: Order::Any,
    };
    let second = match s.engine {
        Engine::Sqlite => {
            assert_eq!(
                other.recover(restart).await.unwrap(),
                1,
                "a start recovers it"
            );
            let e = s.detail(id).await;
            assert_eq!(e.routes[0].status, Status::Pending);
            assert_eq!(e.routes[0].next_attempt_at_ms, Some(restart), "due at once");
            other.claim_lanes(vec![lane()], restart).await.unwrap()
        }
        Engine::Postgres => {
            assert_eq!(other.recover(restart).await.unwrap(), 0, "no recovery pass");
            let held = other.claim_lanes(vec![lane()], restart).await.unwrap();
            assert!(held[0].deliveries.is_empty(), "the lease still holds it");
            s.assert_lease_end(held[0].next_due, s.now);
            assert_eq!(s.detail(id).await.routes[0].status, Status::Delivering);
            other
                .claim_lanes(vec![lane()], s.now + 5 * MINUTE)
                .await
                .unwrap()
        }
    };
    assert_eq!(second[0].deliveries[0].attempt, 2);
    let e = s.detail(id).await;
    let outcomes: Vec<(&str, u32)> = e
        .attempts
        .iter()
        .map(|a| (a.outcome.as_str(), a.attempt))
        .collect();
    assert_eq!(outcomes, [("interrupted", 1)]);
    super::close(other).await;
}

async fn a_pruning_pass_holds_the_database_on_postgres_only(s: &Subject) {
    let other = s.another().await;
    let pass = s
        .store
        .pruning()
        .await
        .unwrap()
        .expect("nobody else prunes");
    let meanwhile = other.pruning().await.unwrap();
    match s.engine {
        Engine::Sqlite => assert!(meanwhile.is_some(), "each batch takes the write lock"),
        Engine::Postgres => assert!(meanwhile.is_none(), "the retention lock is taken"),
    }
    drop(meanwhile);
    drop(pass);
    // The pass over: the lock is free again (PostgreSQL releases it with its session).
    let deadline = Instant::now() + Duration::from_secs(10);
    while other.pruning().await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the retention lock is never let go"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    super::close(other).await;
}

/// Waits up to 10 s for `store` to hear of a change made elsewhere.
async fn woken(store: &Store) -> bool {
    tokio::time::timeout(Duration::from_secs(10), store.changed_elsewhere())
        .await
        .is_ok()
}

/// Lets go of a wake-up already waiting (one is kept, however many came).
async fn drain(store: &Store) {
    while tokio::time::timeout(Duration::from_millis(100), store.changed_elsewhere())
        .await
        .is_ok()
    {}
}

async fn another_handles_commits_are_seen_by_data_version_and_on_postgres_by_notify(s: &Subject) {
    let other = s.another().await;
    let done = s.new_event(Webhook::new("pagarme", "done", s.now)).await;
    s.attempt("pagarme", "default", s.now, AfterAttempt::Delivered)
        .await;
    if s.engine == Engine::Postgres {
        // Listening once the first wake-up (its own, at LISTEN) comes.
        assert!(woken(&s.store).await, "the listening session starts");
    }
    drain(&s.store).await;
    let before = s.store.data_version().await.unwrap();
    let w = Webhook::new("pagarme", "elsewhere", s.now).into_event();
    other.insert_event(w, Duration::from_secs(5)).await.unwrap();
    assert_ne!(s.store.data_version().await.unwrap(), before);
    match s.engine {
        Engine::Sqlite => {
            let heard =
                tokio::time::timeout(Duration::from_millis(300), s.store.changed_elsewhere());
            assert!(heard.await.is_err(), "never on SQLite");
        }
        Engine::Postgres => {
            assert!(woken(&s.store).await, "an event accepted elsewhere");
            drain(&s.store).await;
            assert!(other.replay_event(done, s.now).await.unwrap());
            assert!(woken(&s.store).await, "a replay elsewhere");
        }
    }
    super::close(other).await;
}

/// The alerts task's next batch of dead events: on PostgreSQL none until this instance holds
/// the alerts lock (its listening session takes it once asked), so asked until it comes.
async fn dead_batch(s: &Subject, cursor: i64) -> DeadBatch {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let batch = s.store.dead_after(cursor).await.unwrap();
        if s.engine == Engine::Sqlite || !batch.events.is_empty() {
            return batch;
        }
        assert!(Instant::now() < deadline, "no dead events handed over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_death_is_handed_to_the_alerts_task_once_and_again_after_a_replay(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.new_event(Webhook::new("pagarme", "ok", s.now - MINUTE))
        .await;
    s.attempt("pagarme", "default", s.now, dead()).await;
    s.attempt("pagarme", "default", s.now, AfterAttempt::Delivered)
        .await;
    let first = dead_batch(s, 0).await;
    let dead_ones: Vec<(i64, Option<&str>)> = first
        .events
        .iter()
        .map(|e| (e.id, e.route.as_deref()))
        .collect();
    assert_eq!(dead_ones, [(id, Some("default"))]);
    assert_eq!(first.events[0].endpoint, "pagarme");
    // Handed over and saved: not again.
    s.store
        .save_alert_state(vec![
            ("alerts:dead".into(), "1".into()),
            ("ready_probe_at".into(), "not the task's".into()),
        ])
        .await
        .unwrap();
    assert!(
        s.store
            .dead_after(first.cursor)
            .await
            .unwrap()
            .events
            .is_empty()
    );
    assert_eq!(
        s.store.alert_state().await.unwrap(),
        [("alerts:dead".to_string(), "1".to_string())]
    );
    // Replayed, dead again: handed over again.
    assert!(s.store.replay_event(id, s.now).await.unwrap());
    s.attempt("pagarme", "default", s.now, dead()).await;
    let again = dead_batch(s, first.cursor).await;
    assert_eq!(again.events.len(), 1, "{again:?}");
    assert_eq!(again.events[0].id, id);
    let names = vec!["pagarme".into(), "stripe".into()];
    assert_eq!(
        s.store.endpoints_with_events(names).await.unwrap(),
        ["pagarme"]
    );
}

engines!(
    an_attempt_cut_off_by_a_stop_is_recorded_interrupted_and_tried_again,
    a_pruning_pass_holds_the_database_on_postgres_only,
    another_handles_commits_are_seen_by_data_version_and_on_postgres_by_notify,
    a_death_is_handed_to_the_alerts_task_once_and_again_after_a_replay,
);
