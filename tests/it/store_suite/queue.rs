//! Claims and ordering, per lane (endpoint, route): `Order::Any` takes any due delivery,
//! soonest first; `Order::Strict` only the lane's oldest unfinished one (arrival order);
//! `Order::ByKey` only each ordering key's oldest unfinished one, a keyless delivery a lane of
//! its own. What a claim hands the worker, the next due time each claim reports, and one
//! claim after an attempt in the same call.

use portaria::store::{AfterAttempt, ClaimNext, Order, Status};

use super::{MINUTE, Subject, Webhook, dead, ids, retry_at, tried};

/// Events of pagarme to route `r`, received `ago` minutes before now, in this order; their ids.
async fn arrive(s: &Subject, r: &str, minutes_ago: &[i64]) -> Vec<i64> {
    let mut out = Vec::new();
    for (n, ago) in minutes_ago.iter().enumerate() {
        let w = Webhook::new("pagarme", &format!("{r}-{n}"), s.now - ago * MINUTE).to(&[(r, None)]);
        out.push(s.new_event(w).await);
    }
    out
}

async fn any_claims_due_deliveries_soonest_first_up_to_the_limit(s: &Subject) {
    let e = arrive(s, "r", &[3, 2, 1, 0]).await;
    let first = s.claim("pagarme", "r", Order::Any, 2, s.now).await;
    assert_eq!(ids(&first.deliveries), e[..2]);
    assert_eq!(first.next_due, None, "no room left: not asked");
    let rest = s.claim("pagarme", "r", Order::Any, 5, s.now).await;
    assert_eq!(ids(&rest.deliveries), e[2..]);
    s.assert_lease_end(rest.next_due, s.now);
    assert!(
        s.claim_ids("pagarme", "r", Order::Any, s.now)
            .await
            .is_empty()
    );

    // A failed attempt waits for its retry; its lane says when.
    s.record(&first.deliveries[0], s.now, retry_at(s.now + 30_000))
        .await;
    let waiting = s.claim("pagarme", "r", Order::Any, 4, s.now).await;
    assert!(waiting.deliveries.is_empty());
    assert_eq!(waiting.next_due, Some(s.now + 30_000));
    let again = s.claim("pagarme", "r", Order::Any, 4, s.now + 30_000).await;
    assert_eq!(ids(&again.deliveries), [e[0]]);
    assert_eq!(again.deliveries[0].attempt, 2);
    // Other lanes are other lanes.
    assert!(
        s.claim_ids("pagarme", "other", Order::Any, s.now)
            .await
            .is_empty()
    );
    assert!(
        s.claim_ids("stripe", "r", Order::Any, s.now)
            .await
            .is_empty()
    );
}

/// Soonest first is by due time, then arrival: a retry due later than a younger event goes
/// after it, and one due with another goes in arrival order.
async fn soonest_first_is_by_due_time_then_arrival(s: &Subject) {
    let e = arrive(s, "r", &[10]).await;
    let d = s.claim_one("pagarme", "r", s.now).await;
    s.record(&d, s.now, retry_at(s.now + 2 * MINUTE)).await;
    let at = |n: &str, due: i64| Webhook::new("pagarme", n, s.now + due).to(&[("r", None)]);
    let sooner = s.new_event(at("sooner", MINUTE)).await;
    let with_it = s.new_event(at("with-it", 2 * MINUTE)).await;
    let claimed = s
        .claim_ids("pagarme", "r", Order::Any, s.now + 3 * MINUTE)
        .await;
    assert_eq!(claimed, [sooner, e[0], with_it]);
}

/// Strict: only the head of the lane goes; the others wait behind it while it is delivered
/// and while it waits for a retry; a head that finishes, delivered or dead, lets the next go.
async fn strict_takes_only_the_head_of_the_lane(s: &Subject) {
    let e = arrive(s, "r", &[3, 2, 1]).await;
    let head = s.claim("pagarme", "r", Order::Strict, 1, s.now).await;
    assert_eq!(ids(&head.deliveries), [e[0]]);
    let behind = s.claim("pagarme", "r", Order::Strict, 1, s.now).await;
    assert!(behind.deliveries.is_empty(), "the head is being delivered");
    s.assert_lease_end(behind.next_due, s.now);

    s.record(&head.deliveries[0], s.now, retry_at(s.now + 30_000))
        .await;
    let waiting = s.claim("pagarme", "r", Order::Strict, 1, s.now).await;
    assert!(
        waiting.deliveries.is_empty(),
        "the others are due, but behind the head"
    );
    assert_eq!(
        waiting.next_due,
        Some(s.now + 30_000),
        "the lane is next due when its head is, not when those behind it are"
    );

    let at = s.now + 30_000;
    let retried = s.claim("pagarme", "r", Order::Strict, 1, at).await;
    let retried = &retried.deliveries[0];
    assert_eq!((retried.event_id, retried.attempt), (e[0], 2));
    s.record(retried, at, AfterAttempt::Delivered).await;
    let next = s.claim("pagarme", "r", Order::Strict, 1, at).await;
    assert_eq!(ids(&next.deliveries), [e[1]]);
    s.record(&next.deliveries[0], at, dead()).await;
    assert_eq!(
        s.claim_ids("pagarme", "r", Order::Strict, at).await,
        [e[2]],
        "a dead head lets the next go too"
    );
}

/// `order_by`: one key at a time in arrival order, a key waiting for its retry holding back
/// only itself, a delivery without a key a lane of its own.
async fn by_key_a_key_goes_one_at_a_time_and_a_keyless_delivery_alone(s: &Subject) {
    let mut keyed = Vec::new();
    for (n, key) in [Some("A"), Some("B"), Some("A"), None, None]
        .iter()
        .enumerate()
    {
        let w = Webhook::new("pagarme", &format!("k{n}"), s.now - 10 * MINUTE + n as i64)
            .to(&[("erp", *key)]);
        keyed.push(s.new_event(w).await);
    }
    let [a1, b1, a2, none1, none2] = keyed[..] else {
        unreachable!()
    };
    let claimed = s.claim("pagarme", "erp", Order::ByKey, 10, s.now).await;
    assert_eq!(
        ids(&claimed.deliveries),
        [a1, b1, none1, none2],
        "A's second waits for its first"
    );
    s.assert_lease_end(claimed.next_due, s.now);
    let a1_claim = &claimed.deliveries[0];
    assert!(
        s.claim_ids("pagarme", "erp", Order::ByKey, s.now)
            .await
            .is_empty()
    );

    // A's head fails and waits for its retry: A's second still waits, B goes on.
    s.record(a1_claim, s.now, retry_at(s.now + 30_000)).await;
    let b2 = s
        .new_event(Webhook::new("pagarme", "k5", s.now).to(&[("erp", Some("B"))]))
        .await;
    let waiting = s.claim("pagarme", "erp", Order::ByKey, 10, s.now).await;
    assert!(waiting.deliveries.is_empty(), "b2 waits for b1, a2 for a1");
    assert_eq!(
        waiting.next_due,
        Some(s.now + 30_000),
        "A's head, due again"
    );
    s.record(&claimed.deliveries[1], s.now, AfterAttempt::Delivered)
        .await;
    assert_eq!(
        s.claim_ids("pagarme", "erp", Order::ByKey, s.now).await,
        [b2]
    );

    let at = s.now + 30_000;
    let retried = s.claim("pagarme", "erp", Order::ByKey, 10, at).await;
    assert_eq!(ids(&retried.deliveries), [a1]);
    s.record(&retried.deliveries[0], at, AfterAttempt::Delivered)
        .await;
    assert_eq!(
        s.claim_ids("pagarme", "erp", Order::ByKey, at).await,
        [a2],
        "A's head done: its second goes"
    );
    // The keys are kept with the deliveries.
    let keys: Vec<Option<String>> = {
        let mut out = Vec::new();
        for id in [a1, b1, a2, none1] {
            out.push(s.detail(id).await.routes[0].order_key.clone());
        }
        out
    };
    let key = |k: &str| Some(k.to_string());
    assert_eq!(keys, [key("A"), key("B"), key("A"), None]);
}

/// Two handles on one database (two instances on PostgreSQL, a server and a command on a
/// SQLite file): what one has claimed the other does not take, a key held by one is held for
/// the other, and strict order holds across both.
async fn claims_hold_across_handles_on_one_database(s: &Subject) {
    let other = s.another().await;
    for (n, key) in [Some("A"), Some("A"), Some("B")].iter().enumerate() {
        let w = Webhook::new("pagarme", &format!("k{n}"), s.now - MINUTE + n as i64)
            .to(&[("erp", *key), ("strict", None)]);
        s.new_event(w).await;
    }
    let lane = |route: &str, order| portaria::store::LaneClaim {
        endpoint: "pagarme".into(),
        route: route.into(),
        limit: 10,
        order,
    };
    let mine = s.claim("pagarme", "erp", Order::ByKey, 10, s.now).await;
    let theirs = other
        .claim_lanes(vec![lane("erp", Order::ByKey)], s.now)
        .await
        .unwrap();
    assert_eq!(mine.deliveries.len(), 2, "A's head and B's");
    assert!(
        theirs[0].deliveries.is_empty(),
        "A's second waits for A's head in the other's hands"
    );
    let head = s.claim("pagarme", "strict", Order::Strict, 1, s.now).await;
    assert_eq!(head.deliveries.len(), 1);
    let theirs = other
        .claim_lanes(vec![lane("strict", Order::Strict)], s.now)
        .await
        .unwrap();
    assert!(theirs[0].deliveries.is_empty(), "the strict head is out");
    // A's head done by this handle: the other takes A's second.
    s.record(&mine.deliveries[0], s.now, AfterAttempt::Delivered)
        .await;
    let theirs = other
        .claim_lanes(vec![lane("erp", Order::ByKey)], s.now)
        .await
        .unwrap();
    assert_eq!(theirs[0].deliveries.len(), 1);
    assert_eq!(theirs[0].deliveries[0].dedup_key, "k1");
    super::close(other).await;
}

/// What a claim hands the attempt: the event's facts, headers and body as received (SQLite's
/// deflated body inflated again), and the attempt's number on this route.
async fn a_claim_carries_its_event(s: &Subject) {
    let mut w = Webhook::new("pagarme", "hook_1", s.now - MINUTE).to(&[("erp", None)]);
    w.body = format!("{{\"id\":\"hook_1\",\"pad\":\"{}\"}}", "xy".repeat(2000)).into_bytes();
    w.signed_id = Some("pay_1".into());
    let id = s.new_event(w.clone()).await;
    let d = s.claim_one("pagarme", "erp", s.now).await;
    assert_eq!(
        (d.event_id, d.endpoint.as_str(), d.route.as_str()),
        (id, "pagarme", "erp")
    );
    assert_eq!(d.dedup_key, "hook_1");
    assert_eq!(d.event_type.as_deref(), Some("charge.paid"));
    assert!(d.event_type_signed);
    assert_eq!(d.signed_id.as_deref(), Some("pay_1"));
    assert_eq!(d.content_type.as_deref(), Some("application/json"));
    assert_eq!(d.received_at_ms, s.now - MINUTE);
    assert_eq!(d.attempt, 1);
    assert_eq!((&d.headers[..], &d.body[..]), (&w.headers[..], &w.body[..]));
    s.record(&d, s.now, retry_at(s.now)).await;
    assert_eq!(s.claim_one("pagarme", "erp", s.now).await.attempt, 2);
}

/// An attempt's record can claim the lane's next due delivery in the same call (a busy lane's
/// one commit per delivery).
async fn recording_an_attempt_can_claim_the_next(s: &Subject) {
    let e = arrive(s, "r", &[2, 1]).await;
    let d = s.claim_one("pagarme", "r", s.now).await;
    let then = ClaimNext {
        endpoint: "pagarme".into(),
        route: "r".into(),
        order: Order::Strict,
        now_ms: s.now,
    };
    let next = s
        .store
        .record_attempt(
            d.event_id,
            d.route.clone(),
            tried(&d, s.now),
            AfterAttempt::Delivered,
            Some(then.clone()),
        )
        .await
        .unwrap()
        .expect("the next is due");
    assert_eq!((next.event_id, next.attempt), (e[1], 1));
    let none = s
        .store
        .record_attempt(
            next.event_id,
            next.route.clone(),
            tried(&next, s.now),
            AfterAttempt::Delivered,
            Some(then),
        )
        .await
        .unwrap();
    assert!(none.is_none(), "nothing left");
    assert_eq!(s.detail(e[1]).await.routes[0].status, Status::Delivered);
}

/// The unfinished deliveries per lane, for the start-up check of routes.
async fn unfinished_deliveries_are_counted_per_lane(s: &Subject) {
    arrive(s, "r", &[3, 2, 1]).await;
    arrive(s, "q", &[1]).await;
    let d = s.claim_one("pagarme", "r", s.now).await;
    s.record(&d, s.now, AfterAttempt::Delivered).await;
    s.claim_one("pagarme", "r", s.now).await; // delivering: still unfinished
    let mut lanes = s.store.unfinished_by_route().await.unwrap();
    lanes.sort();
    let lane = |r: &str, n| ("pagarme".to_string(), r.to_string(), n);
    assert_eq!(lanes, [lane("q", 1), lane("r", 2)]);
}

engines!(
    any_claims_due_deliveries_soonest_first_up_to_the_limit,
    soonest_first_is_by_due_time_then_arrival,
    strict_takes_only_the_head_of_the_lane,
    by_key_a_key_goes_one_at_a_time_and_a_keyless_delivery_alone,
    claims_hold_across_handles_on_one_database,
    a_claim_carries_its_event,
    recording_an_attempt_can_claim_the_next,
    unfinished_deliveries_are_counted_per_lane,
);
