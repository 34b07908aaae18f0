//! What the status page reads: the overview of each endpoint now (events counted from
//! `events`, duplicates and rejections from the hourly counters, the queue's figures), the
//! chart's hours, the counted rejections by reason, the events list (filters, search, pages),
//! `/metrics`' queue figures and `/readyz`'s probe. The counters are kept across a close and
//! shared by every handle on the database.

use portaria::store::{
    AfterAttempt, Counted, EndpointNow, ListFilter, QueueStats, Rejected, Rejection, Status,
};

use super::{DAY, HOUR, MINUTE, Subject, Webhook, dead};

/// The start of the clock hour of `ms`.
fn hour_of(ms: i64) -> i64 {
    ms.div_euclid(HOUR) * HOUR
}

/// Per endpoint: events received in the last hour and day, the queue, the last arrival; the
/// counted duplicates and rejections of the last 24 clock hours; and 48 hours of chart, the
/// current one last, hours without counts as zeros. Counts made just before the read are in
/// it; endpoints named, or waiting, dead or counted, each get a row.
async fn the_overview_counts_each_endpoint_and_the_chart_has_every_hour(s: &Subject) {
    let now = s.now;
    s.new_event(Webhook::new("shop", "a", now - 5 * MINUTE).to(&[("a", None)]))
        .await;
    s.new_event(Webhook::new("shop", "b", now - 90 * MINUTE).to(&[("b", None)]))
        .await;
    s.attempt("shop", "b", now, dead()).await;
    s.new_event(Webhook::new("shop", "c", now - 30 * HOUR).to(&[("c", None)]))
        .await;
    s.attempt("shop", "c", now, AfterAttempt::Delivered).await;
    let count = |what, at| s.store.count("shop", what, at);
    count(Counted::Duplicate, now);
    count(Counted::Rejected(Rejection::BadSignature), now);
    count(Counted::Rejected(Rejection::BadSignature), now - 2 * HOUR);
    count(Counted::Received, now - 47 * HOUR);
    count(Counted::Delivered, now - 48 * HOUR);
    s.store.count("counted-only", Counted::Received, now);
    let o = s
        .store
        .overview(vec!["shop".into(), "quiet".into()], 48, now)
        .await
        .unwrap();
    let names: Vec<&str> = o.endpoints.iter().map(|e| e.endpoint.as_str()).collect();
    assert_eq!(names, ["shop", "quiet", "counted-only"]);
    let shop = &o.endpoints[0];
    assert_eq!(
        *shop,
        EndpointNow {
            endpoint: "shop".into(),
            received_last_hour: 1,
            received_last_day: 2,
            duplicates_last_day: 1,
            rejected_last_day: Rejected {
                bad_signature: 2,
                ..Rejected::default()
            },
            pending: 1,
            dead: 1,
            oldest_pending_ms: Some(now - 5 * MINUTE),
            last_received_ms: Some(now - 5 * MINUTE),
        }
    );
    assert_eq!(
        o.endpoints[1],
        EndpointNow {
            endpoint: "quiet".into(),
            ..EndpointNow::default()
        }
    );
    assert_eq!(o.hours.len(), 48);
    assert_eq!(o.hours[47].hour_ms, hour_of(now));
    assert_eq!(o.hours[0].hour_ms, hour_of(now) - 47 * HOUR);
    assert_eq!((o.hours[47].duplicate, o.hours[47].rejected), (1, 1));
    assert_eq!(o.hours[47].received, 1, "counted-only's");
    assert_eq!(o.hours[45].rejected, 1);
    assert_eq!(o.hours[0].received, 1, "47 hours ago is the first hour");
    assert_eq!(
        o.hours.iter().map(|h| h.delivered).sum::<u64>(),
        0,
        "48 hours ago is out"
    );
}

/// Each rejection under its own reason, the day's 24 clock hours only; in the chart the
/// rejections of an hour together, beside what was received, delivered and failed.
async fn every_rejection_is_counted_under_its_reason(s: &Subject) {
    let now = s.now;
    let reasons = [
        Rejection::BadSignature,
        Rejection::StaleTimestamp,
        Rejection::TooLarge,
        Rejection::BadRequest,
        Rejection::StorageError,
    ];
    for (n, reason) in reasons.into_iter().enumerate() {
        for _ in 0..=n {
            s.store.count("shop", Counted::Rejected(reason), now);
        }
    }
    let in_day = hour_of(now) - 23 * HOUR;
    s.store
        .count("shop", Counted::Rejected(Rejection::TooLarge), in_day);
    s.store
        .count("shop", Counted::Rejected(Rejection::TooLarge), in_day - 1);
    for what in [Counted::Received, Counted::Received, Counted::Delivered] {
        s.store.count("shop", what, now);
    }
    s.store.count("shop", Counted::Failed, now - HOUR);
    let o = s.store.overview(vec![], 48, now).await.unwrap();
    assert_eq!(o.endpoints.len(), 1);
    let rejected = o.endpoints[0].rejected_last_day;
    assert_eq!(
        rejected,
        Rejected {
            bad_signature: 1,
            stale_timestamp: 2,
            too_large: 3 + 1,
            bad_request: 4,
            storage_error: 5,
        },
        "the first hour of the day is in it, the hour before is not"
    );
    assert_eq!(rejected.total(), 16);
    let hour = &o.hours[47];
    assert_eq!(
        (hour.received, hour.rejected, hour.delivered, hour.failed),
        (2, 15, 1, 0)
    );
    assert_eq!(o.hours[46].failed, 1);
    assert_eq!(o.hours[24].rejected, 1);
    assert_eq!(o.hours[23].rejected, 1);
}

/// Counts are kept when a handle closes, and every handle on the database adds to the same
/// hour's row (two instances on PostgreSQL; a server and a command on SQLite).
async fn counts_are_shared_and_kept_across_a_close(s: &Subject) {
    let other = s.another().await;
    let bad = Counted::Rejected(Rejection::BadSignature);
    s.store.count("shop", bad, s.now);
    other.count("shop", bad, s.now);
    other.count("shop", Counted::Duplicate, s.now);
    super::close(other).await;
    let o = s.store.overview(vec![], 48, s.now).await.unwrap();
    let shop = &o.endpoints[0];
    assert_eq!(shop.rejected_last_day.bad_signature, 2);
    assert_eq!(shop.duplicates_last_day, 1);
    assert_eq!(o.hours[47].rejected, 2);
}

/// The events list: newest first, each filter narrowing it (endpoint, status through the
/// deliveries, type, text in the key or the object id), pages by a cursor; one endpoint's
/// pages in received order.
async fn the_events_list_filters_searches_and_pages(s: &Subject) {
    let now = s.now;
    let mut ids = Vec::new();
    for n in 0..6i64 {
        let endpoint = if n % 2 == 0 { "pagarme" } else { "stripe" };
        let mut w = Webhook::new(endpoint, &format!("hook_{n}"), now - (10 - n) * MINUTE)
            .object(&format!("ch_{n}"))
            .to(&[(&format!("r{n}"), None)]);
        if n == 5 {
            w.event_type = Some("refund.created".into());
        }
        ids.push(s.new_event(w).await);
    }
    // hook_0 delivered, hook_1 dead, hook_2 delivering, the rest pending; and a stored one,
    // received before all of them but stored last (an archived event put back, say).
    s.attempt("pagarme", "r0", now, AfterAttempt::Delivered)
        .await;
    s.attempt("stripe", "r1", now, dead()).await;
    s.claim_one("pagarme", "r2", now).await;
    let late = s
        .new_event(
            Webhook::new("pagarme", "hook_late", now - DAY)
                .object("ch_late")
                .to(&[]),
        )
        .await;
    ids.push(late);
    let list = |f: ListFilter| async move {
        let rows = s.store.list_events(f).await.unwrap();
        rows.iter().map(|e| e.id).collect::<Vec<i64>>()
    };
    let all = ListFilter::default;
    let newest_first: Vec<i64> = ids.iter().rev().copied().collect();
    assert_eq!(list(all()).await, newest_first);
    let by_status = |status| ListFilter {
        status: Some(status),
        ..all()
    };
    assert_eq!(list(by_status(Status::Delivered)).await, [ids[0]]);
    assert_eq!(list(by_status(Status::Dead)).await, [ids[1]]);
    assert_eq!(list(by_status(Status::Delivering)).await, [ids[2]]);
    assert_eq!(
        list(by_status(Status::Pending)).await,
        [ids[5], ids[4], ids[3]]
    );
    assert_eq!(list(by_status(Status::Stored)).await, [late]);
    let of = |endpoint: &str| ListFilter {
        endpoint: Some(endpoint.into()),
        ..all()
    };
    assert_eq!(
        list(of("pagarme")).await,
        [ids[4], ids[2], ids[0], late],
        "one endpoint's events by received time"
    );
    let typed = ListFilter {
        event_type: Some("refund.created".into()),
        ..all()
    };
    assert_eq!(list(typed).await, [ids[5]]);
    let text = |t: &str| ListFilter {
        text: Some(t.into()),
        ..all()
    };
    assert_eq!(list(text("ok_3")).await, [ids[3]], "in the dedup key");
    assert_eq!(list(text("ch_la")).await, [late], "in the object id");
    assert_eq!(list(text("ch_")).await.len(), 7);
    assert!(list(text("nothing")).await.is_empty());
    let both = ListFilter {
        endpoint: Some("stripe".into()),
        status: Some(Status::Pending),
        ..all()
    };
    assert_eq!(list(both).await, [ids[5], ids[3]]);

    // Pages of 3 by the cursor: all of them, once each, in order.
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = list(ListFilter {
            limit: 3,
            before,
            ..all()
        })
        .await;
        if page.is_empty() {
            break;
        }
        before = page.last().copied();
        pages.push(page);
    }
    assert_eq!(pages.concat(), newest_first);
    assert_eq!(pages.len(), 3);
    // One endpoint's pages follow its received order.
    let page = |before| ListFilter {
        limit: 2,
        before,
        ..of("pagarme")
    };
    let first = list(page(None)).await;
    assert_eq!(first, [ids[4], ids[2]]);
    assert_eq!(list(page(Some(ids[2]))).await, [ids[0], late]);
    assert!(list(page(Some(late))).await.is_empty());

    // What a listed row says.
    let rows = s.store.list_events(of("stripe")).await.unwrap();
    let dead_one = rows.iter().find(|e| e.id == ids[1]).unwrap();
    assert_eq!(dead_one.status, Status::Dead);
    assert_eq!(dead_one.attempts, 1);
    assert_eq!(dead_one.object_id.as_deref(), Some("ch_1"));
    assert_eq!(dead_one.received_at_ms, now - 9 * MINUTE);
    assert_eq!(
        dead_one.last_error.as_deref(),
        Some("HTTP 500, the last try")
    );
    let pending = rows.iter().find(|e| e.id == ids[3]).unwrap();
    assert_eq!(pending.next_attempt_at_ms, Some(now - 7 * MINUTE));
}

/// `/metrics`' queue figures per endpoint: deliveries waiting or under way, when the oldest
/// of them was received, deliveries dead; an endpoint with only dead ones has a row too. (The
/// oldest: SQLite reads the received time of the smallest event id, one row, PostgreSQL the
/// smallest received time. Alike here, where events are stored in the order received; an
/// event put back by `archive replay`, a new id with its old time, counts as the oldest only
/// on PostgreSQL.)
async fn the_queue_figures_count_deliveries_per_endpoint(s: &Subject) {
    let now = s.now;
    let two = [("erp", None), ("audit", None)];
    s.new_event(Webhook::new("pagarme", "a", now - 3 * MINUTE).to(&two))
        .await;
    s.new_event(Webhook::new("pagarme", "b", now - 2 * MINUTE).to(&[("x", None)]))
        .await;
    s.new_event(Webhook::new("stripe", "c", now - MINUTE).to(&[("x", None)]))
        .await;
    s.new_event(Webhook::new("github", "d", now).to(&[])).await;
    s.attempt("pagarme", "erp", now, AfterAttempt::Delivered)
        .await;
    s.claim_one("pagarme", "audit", now).await;
    s.attempt("stripe", "x", now, dead()).await;
    let mut stats = s.store.queue_stats().await.unwrap();
    stats.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
    assert_eq!(
        stats,
        [
            QueueStats {
                endpoint: "pagarme".into(),
                pending: 2,
                oldest_pending_ms: Some(now - 3 * MINUTE),
                dead: 0,
            },
            QueueStats {
                endpoint: "stripe".into(),
                pending: 0,
                oldest_pending_ms: None,
                dead: 1,
            },
        ],
        "a's audit (delivering) and b; the oldest is a's"
    );
}

/// `/readyz`'s write probe commits; with room on the disk, the store is ready.
async fn a_ready_store_takes_the_write_probe(s: &Subject) {
    s.store.probe_write(s.now).await.unwrap();
    s.store.readiness(1, s.now).await.unwrap();
}

engines!(
    the_overview_counts_each_endpoint_and_the_chart_has_every_hour,
    every_rejection_is_counted_under_its_reason,
    counts_are_shared_and_kept_across_a_close,
    the_events_list_filters_searches_and_pages,
    the_queue_figures_count_deliveries_per_endpoint,
    a_ready_store_takes_the_write_probe,
);
