//! The hand-over of an intake insert between the request waiting for it and the backend that
//! commits it (SQLite's writer thread, PostgreSQL's committers): a request that gave up and
//! answered 503 must never have its event committed afterwards, and a request whose event
//! the backend already took must not answer 503 while the event may yet commit (issue 23).
//!
//! Each insert carries one atomic state, [`WAITING`] until one side moves it, once, by
//! compare-exchange: the backend to [`TAKEN`] ([`Claim::take`]) at the last moment before
//! the insert can run in a transaction (SQLite: once `BEGIN IMMEDIATE` holds the write lock;
//! PostgreSQL: once the group has its connection, before `BEGIN`), or the request to
//! [`ABANDONED`] ([`Waiter::answer`] at its deadline, or the waiting future dropped). The
//! loser learns the winner's move: a backend finding the insert abandoned drops it unrun; a
//! request finding it taken waits for the real answer, however long past its deadline.
//!
//! What bounds that wait is what the taken insert still has to go through: on SQLite the
//! batch's own statements and its COMMIT, with the write lock already held (no busy wait,
//! except one more `BEGIN IMMEDIATE` when a batch run without savepoints is rolled back and
//! run again: at most the busy timeout, 3 s); on PostgreSQL the group's statements, each
//! under the session's `statement_timeout` and `lock_timeout` (4 s), and its COMMIT. Neither
//! COMMIT is bounded by portaria: a disk (or a synchronous standby) that stops answering
//! holds it, and the request with it, without an answer; under systemd the watchdog restarts
//! a process whose writer stops answering (`WatchdogSec=`). No answer is not a 503: the
//! gateway retries, and the retry is a duplicate of the event if it did commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use super::StoreError;

/// Neither side has moved yet.
const WAITING: u8 = 0;
/// The backend runs the insert: the request waits for its answer.
const TAKEN: u8 = 1;
/// The request gave up: the backend never runs the insert.
const ABANDONED: u8 = 2;

/// One insert's two ends: the backend's [`Claim`] and the request's [`Waiter`].
pub(super) fn handover() -> (Claim, Waiter) {
    let state = Arc::new(AtomicU8::new(WAITING));
    (Claim(state.clone()), Waiter(state))
}

/// The backend's end.
pub(super) struct Claim(Arc<AtomicU8>);

impl Claim {
    /// Takes the insert for a transaction; false: the request gave up, do not run it.
    pub(super) fn take(&self) -> bool {
        self.0
            .compare_exchange(WAITING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The request's end. Dropped before the backend took the insert (the request's future was
/// dropped: its client went away), it abandons it.
pub(super) struct Waiter(Arc<AtomicU8>);

impl Waiter {
    /// The insert's answer on `rx`; or, when `deadline` passes before the backend took it,
    /// [`StoreError::NotTaken`], and the insert never runs.
    pub(super) async fn answer<T>(
        self,
        mut rx: oneshot::Receiver<Result<T, StoreError>>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        // A sender dropped unanswered: the store closed, or the backend dropped the insert.
        let closed = |_| Err(StoreError::Closed);
        tokio::select! {
            answer = &mut rx => answer.unwrap_or_else(closed),
            () = tokio::time::sleep(deadline) => {
                if self.abandon() {
                    return Err(StoreError::NotTaken(deadline));
                }
                rx.await.unwrap_or_else(closed)
            }
        }
    }

    /// Gives the insert up unless the backend took it first; true: it will never run.
    fn abandon(&self) -> bool {
        match self
            .0
            .compare_exchange(WAITING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == ABANDONED,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_side_wins_and_the_other_learns_it() {
        let (claim, waiter) = handover();
        assert!(claim.take());
        assert!(!waiter.abandon(), "taken: the request must wait");
        assert!(!claim.take(), "taken once");

        let (claim, waiter) = handover();
        assert!(waiter.abandon());
        assert!(!claim.take(), "abandoned: never run");
        assert!(waiter.abandon(), "abandoned stays abandoned");

        let (claim, waiter) = handover();
        drop(waiter);
        assert!(!claim.take(), "a dropped request abandons its insert");
    }

    #[test]
    fn the_two_sides_racing_on_threads_agree_every_time() {
        for _ in 0..2000 {
            let (claim, waiter) = handover();
            let taker = std::thread::spawn(move || claim.take());
            let abandoned = waiter.abandon();
            let taken = taker.join().unwrap();
            assert!(taken != abandoned, "taken {taken}, abandoned {abandoned}");
        }
    }

    #[tokio::test]
    async fn a_request_waits_past_its_deadline_for_an_insert_taken_in_time() {
        let (claim, waiter) = handover();
        let (tx, rx) = oneshot::channel::<Result<u8, StoreError>>();
        let backend = async {
            assert!(claim.take());
            tokio::time::sleep(Duration::from_millis(80)).await;
            tx.send(Ok(7)).unwrap();
        };
        let (answer, ()) = tokio::join!(waiter.answer(rx, Duration::from_millis(10)), backend);
        assert_eq!(answer.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_request_whose_insert_waits_past_the_deadline_gives_it_up() {
        let (claim, waiter) = handover();
        let (_tx, rx) = oneshot::channel::<Result<u8, StoreError>>();
        let answer = waiter.answer(rx, Duration::from_millis(10)).await;
        assert!(matches!(answer, Err(StoreError::NotTaken(_))), "{answer:?}");
        assert!(!claim.take(), "the backend finds it abandoned");
    }
}
