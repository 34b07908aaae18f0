//! Intake's barrier: one event per (endpoint, dedup key), however many copies race in; with a
//! dedup window, a copy inside it is a duplicate of the key's newest event and one after it is
//! a new event; and an event keeps every byte and fact it came with.

use std::time::Duration;

use portaria::store::{Inserted, ListFilter, Status};

use super::{MINUTE, Subject, Webhook};

/// 30 copies of one key and 10 other events, all at once: one event for the key, every copy
/// told it is that event's duplicate, and the others in.
async fn racing_copies_of_one_key_make_one_event(s: &Subject) {
    let mut sends = Vec::new();
    for n in 0..40 {
        let key = if n % 4 == 3 {
            format!("other-{n}")
        } else {
            "hook_7".to_string()
        };
        let event = Webhook::new("pagarme", &key, s.now).into_event();
        let store = s.store.clone();
        sends.push(tokio::spawn(async move {
            let inserted = store.insert_event(event, Duration::from_secs(5)).await;
            (key, inserted.unwrap())
        }));
    }
    let mut new = Vec::new();
    let mut duplicates = Vec::new();
    for send in sends {
        match send.await.unwrap() {
            (key, Inserted::New(id)) => new.push((key, id)),
            (key, Inserted::Duplicate(id)) => duplicates.push((key, id)),
        }
    }
    let first: Vec<i64> = new
        .iter()
        .filter(|(k, _)| k == "hook_7")
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(first.len(), 1, "one copy got in: {new:?}");
    assert_eq!(new.len(), 11, "and each other event: {new:?}");
    assert_eq!(duplicates.len(), 29);
    assert!(
        duplicates
            .iter()
            .all(|(k, id)| k == "hook_7" && *id == first[0]),
        "every copy is the first's duplicate: {duplicates:?}"
    );
    let listed = s.store.list_events(ListFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 11);
    assert_eq!(s.detail(first[0]).await.routes.len(), 1, "one delivery");
}

/// With a window: a copy inside it (its start included) is a duplicate of the key's newest
/// event; one after it is a new event, and later copies are that one's duplicates.
async fn the_window_decides_between_a_duplicate_and_a_new_event(s: &Subject) {
    let at = |ago: i64| Webhook::new("pagarme", "k", s.now - ago);
    let first = s.new_event(at(30 * MINUTE)).await;
    assert_eq!(
        s.insert(at(25 * MINUTE).window(10 * MINUTE)).await,
        Inserted::Duplicate(first),
        "5 minutes later, inside 10"
    );
    assert_eq!(
        s.insert(at(20 * MINUTE).window(10 * MINUTE)).await,
        Inserted::Duplicate(first),
        "the window's start is inside it"
    );
    let second = s.new_event(at(19 * MINUTE).window(10 * MINUTE)).await;
    assert_ne!(first, second);
    let third = s.new_event(at(5 * MINUTE).window(10 * MINUTE)).await;
    assert_eq!(
        s.insert(at(0).window(10 * MINUTE)).await,
        Inserted::Duplicate(third),
        "the newest in the window answers"
    );
    assert_eq!(
        s.insert(at(0)).await,
        Inserted::Duplicate(third),
        "without a window every event of the key counts, and the newest answers"
    );
    // Another key is never held up by this one.
    let mut other = at(0).window(10 * MINUTE);
    other.key = "k2".into();
    assert!(matches!(s.insert(other).await, Inserted::New(_)));
    let keys = s.store.list_events(ListFilter::default()).await.unwrap();
    assert_eq!(keys.len(), 4);
}

async fn without_a_window_a_key_is_a_duplicate_however_old(s: &Subject) {
    let year = 365 * 24 * 60 * MINUTE;
    let first = s
        .new_event(Webhook::new("pagarme", "k", s.now - year))
        .await;
    assert_eq!(
        s.insert(Webhook::new("pagarme", "k", s.now)).await,
        Inserted::Duplicate(first)
    );
}

/// The key is the endpoint's: the same key on another endpoint is another event.
async fn a_key_belongs_to_its_endpoint(s: &Subject) {
    let a = s.new_event(Webhook::new("pagarme", "k", s.now)).await;
    let b = s.new_event(Webhook::new("stripe", "k", s.now)).await;
    assert_ne!(a, b);
    assert_eq!(
        s.insert(Webhook::new("stripe", "k", s.now)).await,
        Inserted::Duplicate(b)
    );
}

/// What intake stored is what a reader gets back: headers and body as received (a body large
/// enough for SQLite to deflate too), content and event type, object id, the client
/// certificate's names, the signed id, and a delivery per route with its ordering key; an event
/// without routes is `stored`.
async fn an_event_keeps_what_it_came_with(s: &Subject) {
    let mut w = Webhook::new("mercadopago", "pay_9", s.now - MINUTE)
        .object("pay_9")
        .to(&[("erp", Some("pay_9")), ("audit", None)]);
    w.body = format!(
        "{{\"data\":{{\"id\":\"pay_9\"}},\"pad\":\"{}\"}}",
        "ab".repeat(900)
    )
    .into_bytes();
    w.headers = b"content-type: application/json\r\nx-signature: ts=1,v1=00\r\n".to_vec();
    w.event_type = Some("payment.updated".into());
    w.client_cert = Some("CN=gateway.example".into());
    w.signed_id = Some("pay_9".into());
    let id = s.new_event(w.clone()).await;
    let e = s.detail(id).await;
    assert_eq!((e.headers, e.body), (w.headers, w.body));
    assert_eq!(e.content_type.as_deref(), Some("application/json"));
    assert_eq!(e.signed_id.as_deref(), Some("pay_9"));
    assert_eq!(e.event_type_signed, Some(true));
    let summary = &e.summary;
    assert_eq!(
        (summary.endpoint.as_str(), summary.dedup_key.as_str()),
        ("mercadopago", "pay_9")
    );
    assert_eq!(summary.event_type.as_deref(), Some("payment.updated"));
    assert_eq!(summary.object_id.as_deref(), Some("pay_9"));
    assert_eq!(summary.received_at_ms, s.now - MINUTE);
    assert_eq!(summary.status, Status::Pending);
    assert_eq!(
        summary.next_attempt_at_ms,
        Some(s.now - MINUTE),
        "due at once"
    );
    assert_eq!(summary.attempts, 0);
    let routes: Vec<(String, Status, Option<String>, Option<i64>)> = e
        .routes
        .iter()
        .map(|r| {
            (
                r.route.clone(),
                r.status,
                r.order_key.clone(),
                r.next_attempt_at_ms,
            )
        })
        .collect();
    let pending = |r: &str, k: Option<&str>| {
        (
            r.to_string(),
            Status::Pending,
            k.map(str::to_string),
            Some(s.now - MINUTE),
        )
    };
    assert_eq!(
        routes,
        [pending("audit", None), pending("erp", Some("pay_9"))],
        "by route name"
    );
    assert!(e.attempts.is_empty());
    assert_eq!(
        s.store.client_cert(id).await.unwrap().as_deref(),
        Some("CN=gateway.example")
    );

    let stored = s
        .new_event(Webhook::new("github", "delivery-1", s.now).to(&[]))
        .await;
    let e = s.detail(stored).await;
    assert_eq!(e.summary.status, Status::Stored);
    assert!(e.routes.is_empty());
    assert_eq!(e.summary.next_attempt_at_ms, None);
    assert_eq!(s.store.client_cert(stored).await.unwrap(), None);
    assert!(s.store.event_detail(stored + 1000).await.unwrap().is_none());
}

/// A batch of items signed one by one (Adyen's) is a duplicate when every one of its items
/// is known within the window, as an event's own key (a batch of that item alone) or as an
/// item of an earlier batch; one new item makes it a new event. An item older than the
/// window, or of another endpoint, does not count.
async fn a_batch_whose_items_are_all_known_is_a_duplicate(s: &Subject) {
    let batch = |items: &[&str], ago: i64| {
        Webhook::new("adyen", &items.join(","), s.now - ago).items(items)
    };
    let ab = s.new_event(batch(&["A", "B"], 50 * MINUTE)).await;
    // Cut out of it, or the batch again: the same event.
    for items in [&["A"][..], &["B"], &["A", "B"]] {
        assert_eq!(
            s.insert(batch(items, 45 * MINUTE)).await,
            Inserted::Duplicate(ab),
            "{items:?} after [A, B]"
        );
    }
    // One item not seen: a new event, whose items count from now on.
    let ac = s.new_event(batch(&["A", "C"], 40 * MINUTE)).await;
    assert_eq!(
        s.insert(batch(&["B", "C"], 35 * MINUTE)).await,
        Inserted::Duplicate(ac),
        "B of [A, B] and C of [A, C]: the newest event answers"
    );
    // Items of single notifications put together.
    let d = s.new_event(batch(&["D"], 30 * MINUTE)).await;
    let e = s.new_event(batch(&["E"], 29 * MINUTE)).await;
    assert!(d < e);
    assert_eq!(
        s.insert(batch(&["D", "E"], 28 * MINUTE)).await,
        Inserted::Duplicate(e)
    );
    // The window: B's only event ([A, B], 50 minutes ago) is outside 20 minutes, so [B] is
    // new; C's ([A, C], 40 minutes ago) is inside 45.
    assert_eq!(
        s.insert(batch(&["C"], 0).window(45 * MINUTE)).await,
        Inserted::Duplicate(ac)
    );
    let b = s.new_event(batch(&["B"], 0).window(20 * MINUTE)).await;
    // E as a key (29 minutes ago) is inside 30 minutes; D (30) and E are outside 20.
    assert_eq!(
        s.insert(batch(&["E"], 0).window(30 * MINUTE)).await,
        Inserted::Duplicate(e)
    );
    let de = s.new_event(batch(&["D", "E"], 0).window(20 * MINUTE)).await;
    assert!(b < de);
    // Another endpoint's items are not this one's.
    let mut other = batch(&["A"], 0);
    other.endpoint = "adyen-eu".into();
    assert!(matches!(s.insert(other).await, Inserted::New(_)));
    // An event without items is keyed as ever: its key alone.
    assert!(matches!(
        s.insert(Webhook::new("adyen", "A", s.now)).await,
        Inserted::New(_)
    ));
}

/// Batches sharing items, all at once (10 each of `[A]`, `[B]`, `[A, B]`): taken one after
/// another, at most two are new (`[A, B]` first: one; `[A]` or `[B]` first: two), never the
/// three that a check of the items racing with another batch's insert would let in.
async fn racing_batches_sharing_items_make_at_most_two_events(s: &Subject) {
    let mut sends = Vec::new();
    for n in 0..30 {
        let items: &[&str] = match n % 3 {
            0 => &["A"],
            1 => &["B"],
            _ => &["A", "B"],
        };
        let event = Webhook::new("adyen", &items.join(","), s.now)
            .items(items)
            .into_event();
        let store = s.store.clone();
        sends.push(tokio::spawn(async move {
            store.insert_event(event, Duration::from_secs(5)).await
        }));
    }
    let mut new = 0;
    for send in sends {
        if let Inserted::New(_) = send.await.unwrap().unwrap() {
            new += 1;
        }
    }
    assert!((1..=2).contains(&new), "{new} events");
    let listed = s.store.list_events(ListFilter::default()).await.unwrap();
    assert_eq!(listed.len(), new);
}

engines!(
    racing_batches_sharing_items_make_at_most_two_events,
    a_batch_whose_items_are_all_known_is_a_duplicate,
    racing_copies_of_one_key_make_one_event,
    the_window_decides_between_a_duplicate_and_a_new_event,
    without_a_window_a_key_is_a_duplicate_however_old,
    a_key_belongs_to_its_endpoint,
    an_event_keeps_what_it_came_with,
);
