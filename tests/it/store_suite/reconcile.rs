//! What a reconcile run asks of the store: which of the gateway's events portaria never
//! stored, by dedup key, per endpoint, whatever the event's age, status or dedup window.

use super::{DAY, HOUR, Subject, Webhook};

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| k.to_string()).collect()
}

async fn never_stored_names_the_keys_no_event_of_the_endpoint_has(s: &Subject) {
    let now = s.now;
    s.new_event(Webhook::new("pagarme", "hook_1", now - 2 * DAY))
        .await;
    // Stored only, and delivered: both were received.
    s.new_event(Webhook::new("pagarme", "hook_2", now - HOUR).to(&[]))
        .await;
    // Another endpoint's key is not this one's.
    s.new_event(Webhook::new("stripe", "hook_3", now)).await;
    // A window long passed still means the event was received.
    s.new_event(Webhook::new("pagarme", "hook_4", now - 3 * DAY).window(HOUR))
        .await;
    let asked = keys(&["hook_5", "hook_1", "hook_3", "hook_2", "hook_4", "hook_0"]);
    assert_eq!(
        s.store.never_stored("pagarme", asked).await.unwrap(),
        keys(&["hook_5", "hook_3", "hook_0"]),
        "the keys never stored, in the order asked"
    );
    assert!(
        s.store
            .never_stored("pagarme", Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
    // Another handle (a command beside the server) sees the same.
    let other = s.another().await;
    assert_eq!(
        other
            .never_stored("stripe", keys(&["hook_3", "hook_1"]))
            .await
            .unwrap(),
        keys(&["hook_1"])
    );
    super::close(other).await;
}

engines!(never_stored_names_the_keys_no_event_of_the_endpoint_has);
