//! Paused routes: a pause is kept per (endpoint, route), seen by every handle on the
//! database, runs out at its `until`, is replaced by a new pause and ended by a resume.

use portaria::store::RoutePause;

use portaria::store::Order;

use super::{HOUR, MINUTE, Subject, Webhook};

fn pause(route: &str, at: i64, until: Option<i64>, reason: Option<&str>) -> RoutePause {
    RoutePause {
        endpoint: "pagarme".into(),
        route: route.into(),
        paused_at_ms: at,
        until_ms: until,
        reason: reason.map(str::to_string),
    }
}

async fn a_pause_holds_until_it_runs_out_or_is_resumed(s: &Subject) {
    let now = s.now;
    assert!(s.store.route_pauses(now).await.unwrap().is_empty());
    let erp = pause("erp", now, Some(now + 2 * HOUR), Some("ERP maintenance"));
    let mail = pause("mail", now, None, None);
    s.store.pause_route(erp.clone()).await.unwrap();
    s.store.pause_route(mail.clone()).await.unwrap();

    // Another handle (another instance, a restart) sees both.
    let other = s.another().await;
    assert_eq!(
        other.route_pauses(now + MINUTE).await.unwrap(),
        [erp.clone(), mail.clone()]
    );
    // Past its `until`, the timed one holds nothing; the other holds on.
    assert_eq!(
        s.store.route_pauses(now + 2 * HOUR).await.unwrap(),
        std::slice::from_ref(&mail)
    );
    assert!(!erp.holds_at(now + 2 * HOUR) && erp.holds_at(now + 2 * HOUR - 1));

    // A new pause replaces the old: now until resumed, with its reason.
    let again = pause("erp", now + MINUTE, None, Some("handler bug"));
    s.store.pause_route(again.clone()).await.unwrap();
    assert_eq!(
        s.store.route_pauses(now + 3 * HOUR).await.unwrap(),
        [again, mail]
    );

    // Resume says whether it was paused; an expired pause was not.
    assert!(s.store.resume_route("pagarme", "erp", now).await.unwrap());
    assert!(!s.store.resume_route("pagarme", "erp", now).await.unwrap());
    s.store
        .pause_route(pause("erp", now, Some(now + MINUTE), None))
        .await
        .unwrap();
    assert!(
        !s.store
            .resume_route("pagarme", "erp", now + HOUR)
            .await
            .unwrap()
    );
    assert!(s.store.resume_route("pagarme", "mail", now).await.unwrap());
    assert!(other.route_pauses(now).await.unwrap().is_empty());
    super::close(other).await;
}

/// The claim itself gives nothing for a paused route, whatever order: the worker's own view
/// of the pauses is a round old.
async fn a_paused_route_claims_nothing_until_its_pause_ends(s: &Subject) {
    let now = s.now;
    for n in 0..2 {
        let w = Webhook::new("pagarme", &format!("p-{n}"), now - MINUTE).to(&[("erp", None)]);
        s.new_event(w).await;
    }
    s.store
        .pause_route(pause("erp", now, Some(now + HOUR), None))
        .await
        .unwrap();
    for order in [Order::Strict, Order::Any, Order::ByKey] {
        assert!(
            s.claim_ids("pagarme", "erp", order, now).await.is_empty(),
            "{order:?}"
        );
    }
    // Run out: the oldest first.
    let after = s
        .claim_ids("pagarme", "erp", Order::Strict, now + HOUR)
        .await;
    assert_eq!(after.len(), 1);
}

engines!(
    a_pause_holds_until_it_runs_out_or_is_resumed,
    a_paused_route_claims_nothing_until_its_pause_ends,
);
