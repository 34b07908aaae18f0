//! `portaria store copy`: a SQLite database's events into an empty PostgreSQL one, read back
//! alike (ids, statuses, due times, headers and bodies, attempts), the dedup barrier carried
//! over (a copy of a copied key is a duplicate, within its window too; so is a batch of a
//! copied batch's items), ids going on after
//! the copied ones, a delivery cut off mid-attempt arriving pending, what verify-by-fetching got
//! carried over. The target is always
//! PostgreSQL: on SQLite the copy is refused.

use portaria::store::{
    AfterAttempt, CopyError, EventDetail, Fetched, Inserted, ListFilter, Status, Store,
};

use super::{Engine, HOUR, MINUTE, Subject, Webhook, dead, retry_at};

/// A SQLite database with an event of every kind; its events read in full.
async fn source() -> (Subject, Vec<EventDetail>) {
    let s = Subject::open(Engine::Sqlite).await.unwrap();
    let now = s.now;
    // Delivered after a failure.
    s.new_event(
        Webhook::new("pagarme", "delivered", now - 3 * HOUR)
            .object("ch_1")
            .to(&[("erp", Some("ch_1"))]),
    )
    .await;
    s.attempt("pagarme", "erp", now - HOUR, retry_at(now - HOUR))
        .await;
    s.attempt("pagarme", "erp", now - HOUR + 10, AfterAttempt::Delivered)
        .await;
    // Dead on one route, waiting on the other.
    let rejected = s
        .new_event(
            Webhook::new("pagarme", "dead", now - 2 * HOUR).to(&[("erp", None), ("audit", None)]),
        )
        .await;
    s.attempt("pagarme", "erp", now - HOUR, dead()).await;
    let why = Fetched::Rejected("the gateway has no such payment".into());
    s.store.keep_fetched(rejected, why).await.unwrap();
    // Cut off mid-attempt: it arrives pending.
    s.new_event(Webhook::new("pagarme", "delivering", now - HOUR).to(&[("slow", None)]))
        .await;
    s.claim_one("pagarme", "slow", now).await;
    // Stored, with what only some events carry; a body SQLite keeps deflated.
    let mut stored = Webhook::new("mercadopago", "stored", now - MINUTE).to(&[]);
    stored.body = format!(
        "{{\"data\":{{\"id\":\"pay_9\"}},\"pad\":\"{}\"}}",
        "z".repeat(3000)
    )
    .into_bytes();
    stored.client_cert = Some("CN=gateway".into());
    stored.signed_id = Some("pay_9".into());
    let stored = s.new_event(stored).await;
    // Verified by fetching: the object comes along, and so does a rejection.
    let object = Fetched::Object(r#"{"id":"pay_9","status":"approved"}"#.into());
    s.store.keep_fetched(stored, object).await.unwrap();
    // A key with a window, received twice in two windows.
    for ago in [50 * MINUTE, 20 * MINUTE] {
        s.new_event(
            Webhook::new("stripe", "windowed", now - ago)
                .window(10 * MINUTE)
                .to(&[]),
        )
        .await;
    }
    // Taken from the gateway's API by a reconcile run: its origin comes along.
    s.new_event(
        Webhook::new("stripe", "evt_taken", now - 10 * MINUTE)
            .reconciled()
            .to(&[]),
    )
    .await;
    // An Adyen batch: its items come along.
    s.new_event(
        Webhook::new("adyen", "A,B", now - 30 * MINUTE)
            .items(&["A", "B"])
            .to(&[]),
    )
    .await;
    let mut events = Vec::new();
    for e in s.store.list_events(ListFilter::default()).await.unwrap() {
        events.push(s.detail(e.id).await);
    }
    (s, events)
}

/// What must read the same after the copy: all of it, but a delivery cut off mid-attempt
/// arrives pending, due at its old time (never retried: when it was received).
fn comparable(mut e: EventDetail) -> EventDetail {
    if e.summary.status == Status::Delivering {
        let due = Some(e.summary.received_at_ms);
        e.summary.status = Status::Pending;
        e.summary.next_attempt_at_ms = due;
        for r in &mut e.routes {
            if r.status == Status::Delivering {
                r.status = Status::Pending;
                r.next_attempt_at_ms = due;
            }
        }
    }
    e
}

async fn a_sqlite_database_is_copied_whole_into_postgres(s: &Subject) {
    let (from, events) = source().await;
    super::close(from.store.clone()).await;
    let source = Store::open_read_only(from.sqlite_path().unwrap()).unwrap();
    if s.engine == Engine::Sqlite {
        let refused = s.store.copy_from(&source).await.unwrap_err();
        assert!(matches!(refused, CopyError::IntoSqlite), "{refused:?}");
        source.close();
        return;
    }
    let report = s.store.copy_from(&source).await.unwrap();
    assert_eq!(
        (report.events, report.deliveries, report.attempts),
        (8, 4, 2),
        "the delivered attempt is its delivery's row"
    );
    let mut copied = Vec::new();
    for e in &events {
        copied.push(s.detail(e.summary.id).await);
    }
    for (was, is) in events.iter().zip(&copied) {
        let (was, is) = (comparable(was.clone()), is.clone());
        assert_eq!(was.summary, is.summary);
        assert_eq!((&was.headers, &was.body), (&is.headers, &is.body));
        assert_eq!(was.content_type, is.content_type);
        assert_eq!(
            (&was.signed_id, was.event_type_signed),
            (&is.signed_id, is.event_type_signed)
        );
        assert_eq!(was.routes, is.routes, "{}", was.summary.dedup_key);
        assert_eq!(was.attempts, is.attempts, "{}", was.summary.dedup_key);
        assert_eq!(was.fetched, is.fetched, "{}", was.summary.dedup_key);
    }
    let fetched = events.iter().filter(|e| e.fetched.is_some()).count();
    assert_eq!(fetched, 2, "an object and a rejection");
    let stored = events
        .iter()
        .find(|e| e.summary.dedup_key == "stored")
        .unwrap();
    assert_eq!(
        s.store
            .client_cert(stored.summary.id)
            .await
            .unwrap()
            .as_deref(),
        Some("CN=gateway")
    );

    // The barrier came along: copies of copied keys are duplicates (the window's newest).
    let id_of = |key: &str| {
        events
            .iter()
            .filter(|e| e.summary.dedup_key == key)
            .map(|e| e.summary.id)
            .max()
            .unwrap()
    };
    assert_eq!(
        s.insert(Webhook::new("pagarme", "delivered", s.now)).await,
        Inserted::Duplicate(id_of("delivered"))
    );
    assert_eq!(
        s.insert(Webhook::new("stripe", "windowed", s.now).window(30 * MINUTE))
            .await,
        Inserted::Duplicate(id_of("windowed"))
    );
    // And the batch's items, with their event's time: inside the window, a duplicate.
    assert_eq!(
        s.insert(Webhook::new("adyen", "B", s.now).items(&["B"]).window(HOUR))
            .await,
        Inserted::Duplicate(id_of("A,B"))
    );
    // New ids go on after the copied ones; the cut-off delivery is due for its retry.
    let newest = events.iter().map(|e| e.summary.id).max().unwrap();
    let new = s.new_event(Webhook::new("pagarme", "new", s.now)).await;
    assert!(new > newest, "{new} after {newest}");
    let retry = s.claim_one("pagarme", "slow", s.now).await;
    assert_eq!((retry.dedup_key.as_str(), retry.attempt), ("delivering", 2));
    // Only into an empty database.
    let again = s.store.copy_from(&source).await.unwrap_err();
    assert!(again.to_string().contains("already has"), "{again}");
    source.close();
    from.close().await;
}

engines!(a_sqlite_database_is_copied_whole_into_postgres);
