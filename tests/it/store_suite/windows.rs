//! The filters `events list`, `events replay` and `events export` share, on both engines: a
//! time window, a glob on the type (whose other characters are themselves on both, though
//! SQLite reads it with `GLOB` and PostgreSQL with `LIKE`), a route with or without a status;
//! a replay by filters puts back exactly what its count said; an export reads every event
//! once, a page at a time, in order.

use portaria::store::{AfterAttempt, ExportCursor, ListFilter, Status};

use super::{HOUR, MINUTE, Subject, Webhook, dead};

fn typed(key: &str, at: i64, event_type: &str) -> Webhook {
    let mut w = Webhook::new("pagarme", key, at);
    w.event_type = Some(event_type.into());
    w
}

async fn ids(s: &Subject, f: ListFilter) -> Vec<i64> {
    let listed = s.store.list_events(f).await.unwrap();
    listed.iter().map(|e| e.id).collect()
}

async fn a_window_a_glob_and_a_route_narrow_the_list(s: &Subject) {
    let now = s.now;
    let mut id = Vec::new();
    for (n, t) in [
        "charge.paid",
        "charge_paid",
        "100%off",
        "a[1]",
        "back\\slash",
        "CHARGE.PAID",
    ]
    .into_iter()
    .enumerate()
    {
        let at = now - (6 - n as i64) * HOUR;
        id.push(s.new_event(typed(&format!("k{n}"), at, t)).await);
    }
    let glob = |g: &str| ListFilter {
        event_type: Some(g.into()),
        ..ListFilter::default()
    };
    assert_eq!(ids(s, glob("charge.*")).await, [id[0]]);
    assert_eq!(ids(s, glob("charge?paid")).await, [id[1], id[0]]);
    assert_eq!(ids(s, glob("charge_paid")).await, [id[1]], "`_` is itself");
    assert_eq!(ids(s, glob("%")).await, Vec::<i64>::new(), "`%` is itself");
    assert_eq!(ids(s, glob("100%*")).await, [id[2]]);
    assert_eq!(ids(s, glob("a[1]")).await, [id[3]], "`[` is itself");
    assert_eq!(ids(s, glob("back\\*")).await, [id[4]], "`\\` is itself");
    assert_eq!(ids(s, glob("*")).await.len(), 6);
    assert_eq!(ids(s, glob("CHARGE*")).await, [id[5]], "case counts");

    // received at or after `since`, before `until`.
    let window = ListFilter {
        since: Some(now - 5 * HOUR),
        until: Some(now - 2 * HOUR),
        ..ListFilter::default()
    };
    assert_eq!(ids(s, window).await, [id[3], id[2], id[1]]);

    // A route: events with a delivery to it; with a status, that delivery's.
    let routes = [("audit", None), ("erp", None), ("mail", None)];
    let both = s
        .new_event(Webhook::new("pagarme", "r", now - MINUTE).to(&routes))
        .await;
    s.attempt("pagarme", "mail", now, dead()).await;
    s.attempt("pagarme", "audit", now, AfterAttempt::Delivered)
        .await;
    let route = |r: &str, status: Option<Status>| ListFilter {
        route: Some(r.into()),
        status,
        ..ListFilter::default()
    };
    assert_eq!(ids(s, route("mail", None)).await, [both]);
    assert_eq!(ids(s, route("mail", Some(Status::Dead))).await, [both]);
    assert_eq!(
        ids(s, route("erp", Some(Status::Dead))).await,
        Vec::<i64>::new()
    );
    assert_eq!(ids(s, route("erp", Some(Status::Pending))).await, [both]);
    assert_eq!(
        ids(s, route("mail", Some(Status::Pending))).await,
        Vec::<i64>::new()
    );
    assert_eq!(
        ids(s, route("audit", Some(Status::Delivered))).await,
        [both]
    );
    assert_eq!(
        ids(s, route("erp", Some(Status::Delivered))).await,
        Vec::<i64>::new()
    );
    assert_eq!(ids(s, route("default", None)).await.len(), 6);
}

async fn a_replay_by_filters_puts_back_what_its_count_said(s: &Subject) {
    let now = s.now;
    let mut old = Vec::new();
    for n in 0..3 {
        let w = typed(&format!("o{n}"), now - 3 * HOUR, "order.paid").to(&[("erp", None)]);
        old.push(s.new_event(w).await);
        s.attempt("pagarme", "erp", now - 2 * HOUR, dead()).await;
    }
    let recent = s
        .new_event(typed("new", now - MINUTE, "order.paid").to(&[("erp", None)]))
        .await;
    s.attempt("pagarme", "erp", now, dead()).await;
    let other = s
        .new_event(typed("chg", now - 3 * HOUR, "charge.paid").to(&[("erp", None)]))
        .await;
    let filter = ListFilter {
        event_type: Some("order.*".into()),
        until: Some(now - HOUR),
        status: Some(Status::Dead),
        ..ListFilter::default()
    };
    assert_eq!(
        s.store.replay_matching(filter.clone(), None).await.unwrap(),
        3
    );
    assert_eq!(
        s.store
            .replay_matching(filter.clone(), Some(now))
            .await
            .unwrap(),
        3
    );
    for id in &old {
        assert_eq!(s.detail(*id).await.routes[0].status, Status::Pending);
    }
    assert_eq!(
        s.detail(recent).await.routes[0].status,
        Status::Dead,
        "not in the window"
    );
    assert_eq!(
        s.detail(other).await.routes[0].attempts,
        0,
        "not of the type"
    );
    assert_eq!(s.store.replay_matching(filter, None).await.unwrap(), 0);
    // One being delivered is neither counted nor put back.
    let claimed = s.claim_one("pagarme", "erp", now).await;
    let all = ListFilter::default();
    let n = s.store.replay_matching(all.clone(), None).await.unwrap();
    assert_eq!(n, 4, "five with deliveries, one being delivered");
    assert_eq!(s.store.replay_matching(all, Some(now)).await.unwrap(), n);
    assert_eq!(
        s.detail(claimed.event_id).await.routes[0].status,
        Status::Delivering
    );
}

async fn an_export_reads_every_event_once_a_page_at_a_time(s: &Subject) {
    let now = s.now;
    let mut expected = Vec::new();
    // Several in one millisecond, and one received before the others but stored after.
    for n in 0..7 {
        let at = now - HOUR + (n / 3) * MINUTE;
        let mut w = Webhook::new("pagarme", &format!("e{n}"), at);
        w.body = format!("{{\"n\":{n}}}").into_bytes();
        expected.push(s.new_event(w).await);
    }
    let late = s
        .new_event(Webhook::new("pagarme", "late", now - 2 * HOUR))
        .await;
    s.new_event(Webhook::new("asaas", "x", now)).await;
    let pages = |f: ListFilter, bodies: bool| async move {
        let (mut after, mut pages, mut rows) = (None, 0, Vec::new());
        loop {
            let page = s.store.export_page(&f, after, 3, bodies).await.unwrap();
            assert!(page.len() <= 3);
            pages += 1;
            after = page.last().map(|e| ExportCursor::of(&e.summary));
            let done = page.len() < 3;
            rows.extend(page);
            if done {
                return (pages, rows);
            }
        }
    };
    // Any endpoint: by id.
    let (n, rows) = pages(ListFilter::default(), false).await;
    assert_eq!(rows.len(), 9);
    assert_eq!(n, 4, "three full pages and an empty one");
    assert!(rows.windows(2).all(|w| w[0].summary.id < w[1].summary.id));
    assert!(rows.iter().all(|e| e.body.is_none()));
    // One endpoint: by received time, then id; its bodies along.
    let pagarme = ListFilter {
        endpoint: Some("pagarme".into()),
        ..ListFilter::default()
    };
    let (n, rows) = pages(pagarme, true).await;
    assert_eq!(n, 3);
    let order: Vec<i64> = rows.iter().map(|e| e.summary.id).collect();
    let mut want = vec![late];
    want.extend(&expected);
    assert_eq!(order, want);
    assert_eq!(rows[1].body.as_deref(), Some(&b"{\"n\":0}"[..]));
    // The window and type filters are the list's.
    let window = ListFilter {
        endpoint: Some("pagarme".into()),
        since: Some(now - HOUR + MINUTE),
        ..ListFilter::default()
    };
    let (_, rows) = pages(window, false).await;
    assert_eq!(rows.len(), 4);
}

engines!(
    a_window_a_glob_and_a_route_narrow_the_list,
    a_replay_by_filters_puts_back_what_its_count_said,
    an_export_reads_every_event_once_a_page_at_a_time,
);
