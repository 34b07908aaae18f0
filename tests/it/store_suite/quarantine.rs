//! Rejected requests kept (`quarantine`): the newest `keep` per endpoint, each endpoint on its
//! own; rows past `for` dropped by the next insert and by the prune pass; listed newest
//! first, of one endpoint or all, whole or as a page of summaries below a cursor; counted per
//! endpoint; read back whole by id; `keep = 0` writes nothing. Never an
//! event: `events list` stays empty.

use portaria::store::{ListFilter, QuarantineKeep, RejectedSummary, ToQuarantine};

use super::{HOUR, MINUTE, Subject};

fn forged(endpoint: &str, at: i64, n: usize) -> ToQuarantine {
    ToQuarantine {
        endpoint: endpoint.into(),
        received_at_ms: at,
        reason: "bad_signature".into(),
        detail: format!("signature mismatch {n}"),
        content_type: Some("application/json".into()),
        headers: format!("x-hub-signature: sha256=00\r\nauthorization: [redacted]\r\nn: {n}\r\n")
            .into_bytes(),
        body: format!("{{\"n\":{n}}}").into_bytes(),
        truncated: false,
    }
}

const KEEP: QuarantineKeep = QuarantineKeep {
    keep: 3,
    for_ms: 48 * HOUR,
};

async fn the_newest_keep_of_each_endpoint_are_kept(s: &Subject) {
    let now = s.now;
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = s
            .store
            .quarantine(forged("pagarme", now + n as i64, n), KEEP)
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }
    s.store
        .quarantine(forged("stripe", now, 9), KEEP)
        .await
        .unwrap();
    let kept = s.store.rejected_list(Some("pagarme"), 100).await.unwrap();
    let kept_ids: Vec<i64> = kept.iter().map(|r| r.id).collect();
    assert_eq!(
        kept_ids,
        [ids[4], ids[3], ids[2]],
        "newest first, three kept"
    );
    assert_eq!(kept[0].detail, "signature mismatch 4");
    // The other endpoint kept its own, and the list of all holds both, newest first.
    assert_eq!(
        s.store
            .rejected_list(Some("stripe"), 100)
            .await
            .unwrap()
            .len(),
        1
    );
    let all = s.store.rejected_list(None, 100).await.unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0].endpoint, "stripe");
    assert!(all.windows(2).all(|w| w[0].id > w[1].id));
    // A limit cuts the list.
    assert_eq!(s.store.rejected_list(None, 2).await.unwrap().len(), 2);
    // A trimmed one is gone; a kept one comes back whole.
    assert_eq!(s.store.rejected_get(ids[0]).await.unwrap(), None);
    let one = s.store.rejected_get(ids[3]).await.unwrap().unwrap();
    let sent = forged("pagarme", now + 3, 3);
    assert_eq!(
        (
            one.endpoint,
            one.received_at_ms,
            one.reason,
            one.content_type,
            one.headers,
            one.body,
            one.truncated
        ),
        (
            sent.endpoint,
            sent.received_at_ms,
            sent.reason,
            sent.content_type,
            sent.headers,
            sent.body,
            false
        )
    );
    // Never an event.
    let events = s.store.list_events(ListFilter::default()).await.unwrap();
    assert!(events.is_empty());
}

async fn rows_past_their_time_are_dropped_by_an_insert_and_by_pruning(s: &Subject) {
    let now = s.now;
    let keep = QuarantineKeep {
        keep: 100,
        for_ms: HOUR,
    };
    let old = s
        .store
        .quarantine(forged("pagarme", now, 1), keep)
        .await
        .unwrap()
        .unwrap();
    let mut cut = forged("pagarme", now + 30 * MINUTE, 2);
    cut.reason = "too_large".into();
    cut.body = b"{\"n\":".to_vec();
    cut.truncated = true;
    let middle = s.store.quarantine(cut, keep).await.unwrap().unwrap();
    assert!(
        s.store
            .rejected_get(middle)
            .await
            .unwrap()
            .unwrap()
            .truncated
    );
    // An hour and a minute later: the first is past `for`, the second is not.
    let new = s
        .store
        .quarantine(forged("pagarme", now + HOUR + MINUTE, 3), keep)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.store.rejected_get(old).await.unwrap(), None);
    let ids: Vec<i64> = s
        .store
        .rejected_list(Some("pagarme"), 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [new, middle]);
    // The prune pass drops what is past its time without a new insert.
    let dropped = s.store.prune_rejected("pagarme", now + HOUR).await.unwrap();
    assert_eq!(dropped, 1);
    assert_eq!(s.store.rejected_get(middle).await.unwrap(), None);
    assert!(s.store.rejected_get(new).await.unwrap().is_some());
}

async fn a_page_lists_summaries_with_a_cursor_and_each_endpoint_counts_its_own(s: &Subject) {
    let now = s.now;
    assert!(s.store.rejected_kept().await.unwrap().is_empty());
    assert!(
        s.store
            .rejected_page(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut ids = Vec::new();
    for n in 0..4 {
        let mut r = forged("pagarme", now + n as i64, n);
        if n == 2 {
            // Not UTF-8, and cut: the size is the bytes kept.
            r.body = vec![0xff, 0xfe, 0x00];
            r.truncated = true;
            r.reason = "too_large".into();
        }
        ids.push(s.store.quarantine(r, KEEP).await.unwrap().unwrap());
    }
    let stripe = s
        .store
        .quarantine(forged("stripe", now, 9), KEEP)
        .await
        .unwrap()
        .unwrap();
    // pagarme keeps its newest 3 (KEEP), stripe its one.
    assert_eq!(
        s.store.rejected_kept().await.unwrap(),
        [("pagarme".to_string(), 3), ("stripe".to_string(), 1)]
    );
    let page = s
        .store
        .rejected_page(Some("pagarme"), None, 2)
        .await
        .unwrap();
    let got: Vec<i64> = page.iter().map(|r| r.id).collect();
    assert_eq!(got, [ids[3], ids[2]], "newest first, two of three");
    let whole = s.store.rejected_get(ids[3]).await.unwrap().unwrap();
    assert_eq!(page[0], RejectedSummary::from(&whole));
    assert_eq!(page[0].body_bytes, b"{\"n\":3}".len() as u64);
    assert_eq!(
        (
            page[1].body_bytes,
            page[1].truncated,
            page[1].reason.as_str()
        ),
        (3, true, "too_large")
    );
    // The next page: below the last id shown.
    let next = s
        .store
        .rejected_page(Some("pagarme"), Some(ids[2]), 2)
        .await
        .unwrap();
    assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[1]]);
    // Every endpoint: stripe's came last, so first.
    let all = s.store.rejected_page(None, None, 10).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        [stripe, ids[3], ids[2], ids[1]]
    );
    assert_eq!(all[0].endpoint, "stripe");
    assert!(
        s.store
            .rejected_page(Some("github"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn keep_zero_keeps_nothing(s: &Subject) {
    let none = QuarantineKeep {
        keep: 0,
        for_ms: HOUR,
    };
    assert_eq!(
        s.store
            .quarantine(forged("pagarme", s.now, 1), none)
            .await
            .unwrap(),
        None
    );
    assert!(s.store.rejected_list(None, 10).await.unwrap().is_empty());
}

engines!(
    the_newest_keep_of_each_endpoint_are_kept,
    rows_past_their_time_are_dropped_by_an_insert_and_by_pruning,
    a_page_lists_summaries_with_a_cursor_and_each_endpoint_counts_its_own,
    keep_zero_keeps_nothing,
);
