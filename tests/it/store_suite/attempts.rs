//! Attempts and the roll-up: every attempt kept in the event's history, a delivery's state
//! after each, the event's status rolled up from its deliveries (and listed from them before
//! the roll-up is written); replay, and the race of an attempt that finishes after its
//! delivery was taken from it.

use portaria::store::{AfterAttempt, Attempt, EventSummary, ListFilter, Order, Status};

use super::{Engine, MINUTE, Subject, Webhook, dead, retry_at};

/// (outcome, attempt number, route) of each attempt in the history, in order.
fn history(attempts: &[Attempt]) -> Vec<(String, u32, String)> {
    attempts
        .iter()
        .map(|a| (a.outcome.clone(), a.attempt, a.route.clone()))
        .collect()
}

fn step(outcome: &str, n: u32, route: &str) -> (String, u32, String) {
    (outcome.to_string(), n, route.to_string())
}

async fn listed(s: &Subject, status: Status) -> Vec<i64> {
    let filter = ListFilter {
        status: Some(status),
        ..ListFilter::default()
    };
    let rows: Vec<EventSummary> = s.store.list_events(filter).await.unwrap();
    rows.iter().map(|e| e.id).collect()
}

async fn a_failed_attempt_is_kept_and_its_delivery_waits_for_the_retry(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.attempt("pagarme", "default", s.now, retry_at(s.now + 30_000))
        .await;
    let e = s.detail(id).await;
    let r = &e.routes[0];
    assert_eq!((r.status, r.attempts), (Status::Pending, 1));
    assert_eq!(r.next_attempt_at_ms, Some(s.now + 30_000));
    assert_eq!(r.last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(r.finished_at_ms, None);
    assert_eq!(
        e.attempts,
        [Attempt {
            attempt: 1,
            started_at_ms: s.now,
            duration_ms: 5,
            outcome: "failed".into(),
            error: Some("HTTP 500".into()),
            route: "default".into(),
        }]
    );
    let summary = &e.summary;
    assert_eq!((summary.status, summary.attempts), (Status::Pending, 1));
    assert_eq!(summary.next_attempt_at_ms, Some(s.now + 30_000));
    assert_eq!(summary.last_error.as_deref(), Some("HTTP 500"));
}

/// Two failures then a delivery: three attempts in the order they ran, the delivered one
/// with its start and duration; the delivery finished when its last attempt did.
async fn the_history_keeps_every_attempt_in_order(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    for (n, after) in [retry_at(s.now + 1000), retry_at(s.now + 2000)]
        .into_iter()
        .enumerate()
    {
        s.attempt("pagarme", "default", s.now + n as i64 * 1000, after)
            .await;
    }
    s.attempt("pagarme", "default", s.now + 2000, AfterAttempt::Delivered)
        .await;
    let e = s.detail(id).await;
    assert_eq!(
        history(&e.attempts),
        [
            step("failed", 1, "default"),
            step("failed", 2, "default"),
            step("delivered", 3, "default")
        ]
    );
    let last = &e.attempts[2];
    assert_eq!((last.started_at_ms, last.duration_ms), (s.now + 2000, 5));
    assert_eq!(last.error, None);
    let r = &e.routes[0];
    assert_eq!((r.status, r.attempts), (Status::Delivered, 3));
    assert_eq!(r.finished_at_ms, Some(s.now + 2005));
    assert_eq!(r.next_attempt_at_ms, None);
    assert_eq!(e.summary.status, Status::Delivered);
    assert_eq!(e.summary.next_attempt_at_ms, None);
}

/// Attempts that started in the same millisecond (a quick failure and its quick retry) are
/// listed in the order they ran, the delivered one last.
async fn attempts_of_one_millisecond_keep_their_order(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.attempt("pagarme", "default", s.now, retry_at(s.now))
        .await;
    s.attempt("pagarme", "default", s.now, retry_at(s.now))
        .await;
    s.attempt("pagarme", "default", s.now, AfterAttempt::Delivered)
        .await;
    assert_eq!(
        history(&s.detail(id).await.attempts),
        [
            step("failed", 1, "default"),
            step("failed", 2, "default"),
            step("delivered", 3, "default")
        ]
    );
}

/// While an attempt runs, the event and its delivery say `delivering`, and nothing is due.
async fn an_event_is_delivering_while_an_attempt_runs(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.claim_one("pagarme", "default", s.now).await;
    let e = s.detail(id).await;
    assert_eq!(e.summary.status, Status::Delivering);
    assert_eq!(e.summary.next_attempt_at_ms, None);
    let r = &e.routes[0];
    assert_eq!((r.status, r.attempts), (Status::Delivering, 1));
    assert_eq!(
        r.next_attempt_at_ms, None,
        "not due while it is being delivered"
    );
    assert_eq!(s.store.event_routes(id).await.unwrap(), e.routes);
    assert_eq!(listed(s, Status::Delivering).await, [id]);
    assert!(listed(s, Status::Pending).await.is_empty());
}

/// An event is finished only with its last delivery: until then the roll-up leaves it
/// pending; once every route is delivered it is; the list reads its deliveries meanwhile.
async fn the_roll_up_waits_for_every_route(s: &Subject) {
    let w = Webhook::new("pagarme", "k", s.now - MINUTE).to(&[("erp", None), ("audit", None)]);
    let id = s.new_event(w).await;
    s.attempt("pagarme", "erp", s.now, AfterAttempt::Delivered)
        .await;
    assert_eq!(
        s.detail(id).await.summary.status,
        Status::Pending,
        "audit waits"
    );
    // Audit delivered, its roll-up not written yet: listed as delivered, not yet among them.
    let d = s.claim_one("pagarme", "audit", s.now + 10).await;
    s.record(&d, s.now + 10, AfterAttempt::Delivered).await;
    assert_eq!(s.detail(id).await.summary.status, Status::Delivered);
    assert!(
        listed(s, Status::Delivered).await.is_empty(),
        "by the roll-up"
    );
    assert_eq!(listed(s, Status::Pending).await, Vec::<i64>::new());
    s.store.roll_up(vec![id]).await.unwrap();
    assert_eq!(listed(s, Status::Delivered).await, [id]);
    let e = s.detail(id).await;
    assert_eq!(e.summary.attempts, 2, "one per route");
    assert_eq!(
        history(&e.attempts),
        [step("delivered", 1, "erp"), step("delivered", 1, "audit")]
    );
}

/// One dead route makes the event dead, once the other is finished too; it is listed among
/// the dead from the moment its delivery died.
async fn one_dead_route_makes_the_event_dead(s: &Subject) {
    let w = Webhook::new("pagarme", "k", s.now - MINUTE).to(&[("erp", None), ("audit", None)]);
    let id = s.new_event(w).await;
    s.attempt("pagarme", "erp", s.now, dead()).await;
    assert_eq!(
        listed(s, Status::Dead).await,
        [id],
        "an owner must look at it now"
    );
    assert_eq!(s.detail(id).await.summary.status, Status::Pending);
    s.attempt("pagarme", "audit", s.now, AfterAttempt::Delivered)
        .await;
    let e = s.detail(id).await;
    assert_eq!(e.summary.status, Status::Dead);
    assert_eq!(
        e.summary.last_error.as_deref(),
        Some("HTTP 500, the last try")
    );
    assert_eq!(listed(s, Status::Dead).await, [id]);
    assert!(listed(s, Status::Delivered).await.is_empty());
}

/// The roll-ups a stop cut off (deliveries finished, the event's status not written) are
/// written by the next start's `recover`.
async fn a_start_writes_the_roll_ups_a_stop_cut_off(s: &Subject) {
    let a = s
        .new_event(Webhook::new("pagarme", "a", s.now - MINUTE))
        .await;
    let b = s
        .new_event(Webhook::new("pagarme", "b", s.now - MINUTE))
        .await;
    for after in [AfterAttempt::Delivered, dead()] {
        let d = s.claim_one("pagarme", "default", s.now).await;
        s.record(&d, s.now, after).await;
    }
    let filter = ListFilter {
        status: Some(Status::Delivered),
        ..ListFilter::default()
    };
    assert!(
        s.store
            .list_events(filter.clone())
            .await
            .unwrap()
            .is_empty()
    );
    s.store.recover(s.now).await.unwrap();
    assert_eq!(s.store.list_events(filter).await.unwrap()[0].id, a);
    assert_eq!(s.detail(b).await.summary.status, Status::Dead);
}

/// A replay puts an event's finished deliveries back to pending, due now, with a fresh count
/// of attempts; the history keeps what happened before (the delivered attempt too). A stored
/// event, an unknown one, and a delivery being delivered right now are not replayed.
async fn a_replay_puts_finished_deliveries_back_and_keeps_their_history(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    s.attempt("pagarme", "default", s.now, AfterAttempt::Delivered)
        .await;
    let at = s.now + MINUTE;
    assert!(s.store.replay_event(id, at).await.unwrap());
    let e = s.detail(id).await;
    assert_eq!(e.summary.status, Status::Pending);
    let r = &e.routes[0];
    assert_eq!((r.status, r.attempts), (Status::Pending, 0));
    assert_eq!((r.next_attempt_at_ms, r.finished_at_ms), (Some(at), None));
    assert_eq!(history(&e.attempts), [step("delivered", 1, "default")]);
    assert_eq!(e.attempts[0].started_at_ms, s.now);

    // Delivered again: both deliveries in the history.
    let d = s.claim_one("pagarme", "default", at).await;
    assert_eq!(d.attempt, 1);
    assert!(
        !s.store.replay_event(id, at).await.unwrap(),
        "being delivered: left alone"
    );
    s.record(&d, at, AfterAttempt::Delivered).await;
    s.store.roll_up(vec![id]).await.unwrap();
    let e = s.detail(id).await;
    assert_eq!(
        history(&e.attempts),
        [
            step("delivered", 1, "default"),
            step("delivered", 1, "default")
        ]
    );
    assert_eq!(e.summary.status, Status::Delivered);

    let stored = s
        .new_event(Webhook::new("github", "g", s.now).to(&[]))
        .await;
    assert!(!s.store.replay_event(stored, at).await.unwrap());
    assert!(!s.store.replay_event(stored + 1000, at).await.unwrap());
}

/// Replay by route, and of every dead delivery (of an endpoint, of a route).
async fn a_replay_takes_only_the_deliveries_it_names(s: &Subject) {
    let both = [("erp", None), ("audit", None)];
    let one = s
        .new_event(Webhook::new("pagarme", "one", s.now - MINUTE).to(&both))
        .await;
    let two = s
        .new_event(Webhook::new("pagarme", "two", s.now - MINUTE).to(&both))
        .await;
    let three = s
        .new_event(Webhook::new("stripe", "three", s.now - MINUTE).to(&[("erp", None)]))
        .await;
    // one: erp dead, audit delivered; two: both dead; three: dead.
    for (endpoint, route, after) in [
        ("pagarme", "erp", dead()),
        ("pagarme", "audit", AfterAttempt::Delivered),
        ("pagarme", "erp", dead()),
        ("pagarme", "audit", dead()),
        ("stripe", "erp", dead()),
    ] {
        s.attempt(endpoint, route, s.now, after).await;
    }
    let status_of = |id| async move {
        let routes = s.store.event_routes(id).await.unwrap();
        routes.iter().map(|r| r.status).collect::<Vec<_>>()
    };
    let at = s.now + MINUTE;
    // `--route audit` of event one: its delivered audit, not its dead erp.
    assert!(
        s.store
            .replay_route(one, Some("audit".into()), at)
            .await
            .unwrap()
    );
    assert_eq!(status_of(one).await, [Status::Pending, Status::Dead]);
    assert!(
        !s.store
            .replay_route(one, Some("nowhere".into()), at)
            .await
            .unwrap()
    );
    // Every dead delivery of pagarme's audit route: event two's only.
    let n = s
        .store
        .replay_dead(Some("pagarme".into()), Some("audit".into()), at)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(status_of(two).await, [Status::Pending, Status::Dead]);
    // Every dead one of pagarme: events one and two (their erp).
    assert_eq!(
        s.store.replay_dead_of("pagarme".into(), at).await.unwrap(),
        2
    );
    assert_eq!(status_of(one).await, [Status::Pending, Status::Pending]);
    assert_eq!(status_of(three).await, [Status::Dead]);
    assert_eq!(s.store.replay_dead(None, None, at).await.unwrap(), 1);
    assert_eq!(status_of(three).await, [Status::Pending]);
    assert_eq!(s.store.replay_dead(None, None, at).await.unwrap(), 0);
}

/// The replay race: an attempt that finishes after its delivery was taken from it (by a
/// start's recovery on SQLite, by another instance after the lease on PostgreSQL) does not
/// move the delivery on, but the history keeps it: a target did get that attempt.
async fn an_attempt_finished_after_its_delivery_was_taken_is_kept(s: &Subject) {
    let id = s
        .new_event(Webhook::new("pagarme", "k", s.now - MINUTE))
        .await;
    let mine = s.claim_one("pagarme", "default", s.now).await;
    let later = s.now + 5 * MINUTE;
    let other = match s.engine {
        // A start of the server (its recovery) while this attempt still ran.
        Engine::Sqlite => {
            assert_eq!(s.store.recover(later).await.unwrap(), 1);
            None
        }
        // Another instance, once this one's lease has run out.
        Engine::Postgres => {
            let other = s.another().await;
            let lane = portaria::store::LaneClaim {
                endpoint: "pagarme".into(),
                route: "default".into(),
                limit: 1,
                order: Order::Any,
            };
            let taken = other.claim_lanes(vec![lane], later).await.unwrap();
            assert_eq!(taken[0].deliveries[0].attempt, 2, "taken over");
            Some(other)
        }
    };
    let interrupted = s.detail(id).await;
    assert_eq!(
        history(&interrupted.attempts),
        [step("interrupted", 1, "default")]
    );

    // The first attempt ends, delivered: late.
    s.record(&mine, s.now, AfterAttempt::Delivered).await;
    s.store.roll_up(vec![id]).await.unwrap();
    let e = s.detail(id).await;
    assert_eq!(
        history(&e.attempts),
        [
            step("delivered", 1, "default"),
            step("interrupted", 1, "default")
        ],
        "the late attempt is in the history"
    );
    assert_ne!(
        e.routes[0].status,
        Status::Delivered,
        "but not the delivery's to finish"
    );
    if let Some(other) = other {
        super::close(other).await;
    }
}

engines!(
    a_failed_attempt_is_kept_and_its_delivery_waits_for_the_retry,
    the_history_keeps_every_attempt_in_order,
    attempts_of_one_millisecond_keep_their_order,
    an_event_is_delivering_while_an_attempt_runs,
    the_roll_up_waits_for_every_route,
    one_dead_route_makes_the_event_dead,
    a_start_writes_the_roll_ups_a_stop_cut_off,
    a_replay_puts_finished_deliveries_back_and_keeps_their_history,
    a_replay_takes_only_the_deliveries_it_names,
    an_attempt_finished_after_its_delivery_was_taken_is_kept,
);
