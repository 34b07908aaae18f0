//! One delivery attempt from the worker's side: run it on the route's target, work out what
//! it came to for the store ([`AfterAttempt`]), log it, count it.
//!
//! What a target's [`Outcome`] means for the schedule lives here and nowhere else: a failure
//! waits the schedule's next gap (jittered), a permanent one is dead at once, one that came
//! with a time (`Retry-After`) waits that long instead, bounded by the schedule's longest
//! step; past the schedule's end every failure is dead.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant, SystemTime};

use super::{Delivery, LaneShared, Outcome, SLOW_DELIVERY};
use crate::store::{AfterAttempt, Counted, RoutePause, StoreError, Tried};
use crate::time::{now_ms, unix_millis};

/// One attempt: run it, and work out what it came to and what happens next.
pub(super) async fn attempt(lane: &LaneShared, delivery: &Delivery) -> (Tried, AfterAttempt) {
    let started_at = SystemTime::now();
    let clock = Instant::now();
    let outcome = match &lane.fetch {
        Some(fetcher) => super::fetch::deliver(lane, fetcher, delivery).await,
        None => lane.runner.deliver(delivery).await,
    };
    let elapsed = clock.elapsed();
    let finished_ms = now_ms();

    let after = match outcome {
        Outcome::Gone(error) => match pause_route(lane, &error, finished_ms).await {
            // Due at once, whatever the schedule: it goes first when the route resumes.
            Ok(()) => AfterAttempt::RetryAt {
                at_ms: finished_ms,
                error,
            },
            Err(e) => {
                tracing::error!(endpoint = %lane.endpoint, route = %lane.route, error = %e, "cannot pause the route; the delivery is retried on its schedule");
                after_attempt(Outcome::Failed(error), &lane.retry, delivery, finished_ms)
            }
        },
        outcome => after_attempt(outcome, &lane.retry, delivery, finished_ms),
    };
    log_attempt(delivery, &after, elapsed);
    lane.metrics
        .delivery(&delivery.endpoint, &delivery.route, after.label(), elapsed);
    let counted = match after {
        AfterAttempt::Delivered => Counted::Delivered,
        AfterAttempt::RetryAt { .. } | AfterAttempt::Dead { .. } => Counted::Failed,
    };
    lane.store.count(&delivery.endpoint, counted, now_ms());
    let tried = Tried {
        attempt: delivery.attempt,
        started_at_ms: unix_millis(started_at),
        duration_ms: elapsed.as_millis() as i64,
    };
    (tried, after)
}

/// Pauses `lane`'s route in the store, until resumed, because its target is gone; its slots
/// claim nothing more from now on.
async fn pause_route(lane: &LaneShared, reason: &str, now_ms: i64) -> Result<(), StoreError> {
    let pause = RoutePause {
        endpoint: lane.endpoint.clone(),
        route: lane.route.clone(),
        paused_at_ms: now_ms,
        until_ms: None,
        reason: Some(reason.to_string()),
    };
    lane.store.pause_route(pause).await?;
    lane.paused
        .store(true, std::sync::atomic::Ordering::Relaxed);
    lane.metrics.route_paused(&lane.endpoint, &lane.route, true);
    tracing::warn!(
        endpoint = %lane.endpoint,
        route = %lane.route,
        reason,
        "route paused: its target is gone; events are stored and wait (`portaria route resume`)"
    );
    Ok(())
}

fn log_attempt(d: &Delivery, after: &AfterAttempt, elapsed: Duration) {
    let error = after.error().unwrap_or("");
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    let (event_id, endpoint, attempt) = (d.event_id, d.endpoint.as_str(), d.attempt);
    let route = d.route.as_str();
    if elapsed > SLOW_DELIVERY {
        tracing::warn!(
            event_id,
            endpoint,
            attempt,
            route,
            latency_ms,
            "slow delivery (over 5 s)"
        );
    }
    match after {
        AfterAttempt::Delivered => {
            tracing::info!(
                event_id,
                endpoint,
                attempt,
                route,
                latency_ms,
                outcome = after.label(),
                "delivery"
            )
        }
        AfterAttempt::RetryAt { at_ms, .. } => tracing::warn!(
            event_id,
            endpoint,
            attempt,
            route,
            latency_ms,
            outcome = after.label(),
            retry_in_ms = at_ms - now_ms(),
            error,
            "delivery"
        ),
        AfterAttempt::Dead { .. } => tracing::error!(
            event_id,
            endpoint,
            attempt,
            route,
            latency_ms,
            outcome = after.label(),
            error,
            "delivery failed for the last time; event is dead (replay with `portaria events replay`)"
        ),
    }
}

/// What the store does after an attempt of `delivery` that came to `outcome` and ended at
/// `finished_ms`, on a route retried after the gaps of `retry`.
fn after_attempt(
    outcome: Outcome,
    retry: &[Duration],
    delivery: &Delivery,
    finished_ms: i64,
) -> AfterAttempt {
    // Attempt n failed: wait the n-th gap of the schedule; past its end, the event is dead.
    let gap = retry.get(delivery.attempt as usize - 1).copied();
    match (outcome, gap) {
        (Outcome::Delivered, _) => AfterAttempt::Delivered,
        (Outcome::Permanent(error), _) => AfterAttempt::Dead { error },
        (
            Outcome::Failed(error) | Outcome::RetryAfter { error, .. } | Outcome::Gone(error),
            None,
        ) => AfterAttempt::Dead { error },
        // Gone is [`attempt`]'s to handle; here only when the route could not be paused.
        (Outcome::Failed(error) | Outcome::Gone(error), Some(gap)) => AfterAttempt::RetryAt {
            at_ms: finished_ms + jittered(gap, delivery.event_id),
            error,
        },
        // The target knows best when it can take the event again, up to a point: a server
        // asking for a day is not left alone longer than the schedule ever waits.
        (Outcome::RetryAfter { error, wait }, Some(_)) => {
            let longest = retry.iter().max().copied().unwrap_or_default();
            AfterAttempt::RetryAt {
                at_ms: finished_ms + wait.min(longest).as_millis() as i64,
                error,
            }
        }
    }
}

/// The gap plus or minus up to 10 %, so retries of many events spread out.
fn jittered(gap: Duration, seed: i64) -> i64 {
    let ms = gap.as_millis() as i64;
    let spread = ms / 10;
    if spread == 0 {
        return ms;
    }
    let random = RandomState::new().hash_one((seed, now_ms())) as i64;
    ms + random.rem_euclid(2 * spread + 1) - spread
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        for seed in 0..200 {
            let ms = jittered(Duration::from_secs(10), seed);
            assert!((9_000..=11_000).contains(&ms), "{ms}");
        }
        assert_eq!(jittered(Duration::from_millis(5), 1), 5);
    }

    /// What `f` logs, as the fmt subscriber writes it.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    fn delivery() -> Delivery {
        Delivery {
            origin: crate::store::Origin::Webhook,
            event_id: 7,
            endpoint: "pagarme".into(),
            route: "default".into(),
            dedup_key: "k".into(),
            event_type: None,
            event_type_signed: false,
            signed_id: None,
            content_type: None,
            received_at_ms: 0,
            attempt: 1,
            headers: bytes::Bytes::new(),
            body: bytes::Bytes::new(),
            fetched: None,
        }
    }

    #[test]
    fn a_delivery_slower_than_five_seconds_gets_a_warning_of_its_own() {
        let d = delivery();
        let slow = logged(|| log_attempt(&d, &AfterAttempt::Delivered, SLOW_DELIVERY * 2));
        assert!(
            slow.lines().any(|l| l.contains("WARN")
                && l.contains("slow delivery")
                && l.contains("event_id=7")),
            "{slow}"
        );
        assert!(slow.contains("outcome=\"delivered\""), "{slow}");
        let quick = logged(|| log_attempt(&d, &AfterAttempt::Delivered, Duration::from_millis(40)));
        assert!(!quick.contains("slow delivery"), "{quick}");
        assert!(quick.contains("outcome=\"delivered\""), "{quick}");
        // The last failure of the schedule is an error, with the way out in it.
        let dead = logged(|| {
            log_attempt(
                &d,
                &AfterAttempt::Dead {
                    error: "exit status 3".into(),
                },
                Duration::from_millis(40),
            )
        });
        assert!(
            dead.lines().any(|l| l.contains("ERROR")
                && l.contains("outcome=\"dead\"")
                && l.contains("events replay")),
            "{dead}"
        );
    }

    #[test]
    fn permanent_is_dead_now_and_retry_after_replaces_the_gap_within_the_schedule() {
        let schedule = [Duration::from_secs(10), Duration::from_secs(60)];
        let at = |attempt: u32| Delivery {
            attempt,
            ..delivery()
        };
        let err = || "no".to_string();
        let now = 1_000_000;
        // Dead on the first attempt, with the schedule's steps unused.
        assert_eq!(
            after_attempt(Outcome::Permanent(err()), &schedule, &at(1), now),
            AfterAttempt::Dead { error: err() }
        );
        let retry_after = |secs| Outcome::RetryAfter {
            error: err(),
            wait: Duration::from_secs(secs),
        };
        // Sooner than the gap (10 s), and later: the target's word, not the gap's.
        assert_eq!(
            after_attempt(retry_after(1), &schedule, &at(1), now),
            AfterAttempt::RetryAt {
                at_ms: now + 1_000,
                error: err()
            }
        );
        assert_eq!(
            after_attempt(retry_after(30), &schedule, &at(1), now),
            AfterAttempt::RetryAt {
                at_ms: now + 30_000,
                error: err()
            }
        );
        // A day is bounded by the longest step.
        assert_eq!(
            after_attempt(retry_after(86_400), &schedule, &at(1), now),
            AfterAttempt::RetryAt {
                at_ms: now + 60_000,
                error: err()
            }
        );
        // The schedule's last attempt is still the last.
        assert_eq!(
            after_attempt(retry_after(1), &schedule, &at(3), now),
            AfterAttempt::Dead { error: err() }
        );
        let AfterAttempt::RetryAt { at_ms, .. } =
            after_attempt(Outcome::Failed(err()), &schedule, &at(2), now)
        else {
            panic!("a failure with steps left is retried")
        };
        assert!((now + 54_000..=now + 66_000).contains(&at_ms), "{at_ms}");
        assert_eq!(
            after_attempt(Outcome::Failed(err()), &schedule, &at(3), now),
            AfterAttempt::Dead { error: err() }
        );
    }

    #[test]
    fn every_delivery_label_has_a_series_from_the_start() {
        for after in [
            AfterAttempt::Delivered,
            AfterAttempt::RetryAt {
                at_ms: 0,
                error: String::new(),
            },
            AfterAttempt::Dead {
                error: String::new(),
            },
        ] {
            assert!(
                crate::metrics::DELIVERY_OUTCOMES.contains(&after.label()),
                "{after:?}"
            );
        }
    }
}
