//! The open connections of one listener, for the connection cap: which are idle and since
//! when, so that a new connection arriving at the cap makes room by closing the longest-idle
//! one instead of waiting in the kernel's queue behind clients that send nothing.
//!
//! A connection is *idle* when no request is being answered on it and not one byte has arrived
//! since its last answer (or since it was accepted): a kept-alive connection between requests,
//! or one that has not begun its first. One idle for less than [`IDLE_GRACE`] is left alone:
//! its client has just connected or just had its answer, and is likely sending. Closing one
//! is asked of hyper with
//! `graceful_shutdown`, which closes an idle connection at once and lets one that is in fact
//! mid-request (a head that arrived after the choice) finish its answer first.
//!
//! A connection whose client has sent part of a request head is never chosen while it is
//! young; once its head has been arriving for [`SLOW_HEAD`] without reaching the handler, it is
//! *stalled*, and when no connection is idle the one stalled longest is cut (dropped: hyper's
//! graceful close would wait for the head). So clients that trickle their heads cannot hold
//! every slot until the header deadline (`header_timeout_secs`, which still ends each of them)
//! and starve the webhooks behind them.
//!
//! A request that reached the handler is never closed for room, but its body may be *cut*:
//! with none idle and no head stalled, the body that has been arriving for [`SLOW_BODY`] or
//! more at the lowest rate so far is stopped (its [`BodyWatch`]; the reader answers 503 with
//! `Connection: close`). So clients that trickle bodies cannot hold every slot until the body
//! deadline either. A request whose body is in (verifying, storing) is never cut.
//! On HTTPS the bytes counted are the TLS records: a connection mid-handshake is busy like one
//! mid-head (and stalled like one past [`SLOW_HEAD`]), and one whose handshake is done and that
//! has sent nothing since is idle (`Tracked::settled`).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::ingest::BodyWatch;

/// How long a connection must have been idle before it may be closed to make room: a client
/// that connected or had its answer a moment ago is about to send (closing it then would cut
/// the request it is writing).
pub(super) const IDLE_GRACE: Duration = Duration::from_millis(250);

/// How long a request head may be arriving before its connection may be cut to make room
/// (when none is idle). An honest client sends its head in one go, in milliseconds.
pub(super) const SLOW_HEAD: Duration = Duration::from_secs(1);

/// How long a body may be arriving before it may be cut to make room (when nothing is idle
/// and no head stalled). An honest client's body follows its head at once, in milliseconds.
pub(super) const SLOW_BODY: Duration = Duration::from_secs(1);

/// Every open connection of one listener, by the order it was accepted in.
pub(super) struct Live {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Tracked>>>,
    /// [`IDLE_GRACE`] and [`SLOW_HEAD`], in microseconds, and [`SLOW_BODY`] (shorter in
    /// unit tests).
    idle_grace_us: u64,
    slow_head_us: u64,
    slow_body: Duration,
}

/// What the accept loop knows of one connection.
pub(super) struct Tracked {
    /// Reads that returned bytes.
    reads: AtomicU64,
    /// `reads` when the last answer was handed to hyper (0 at accept): more reads than this
    /// mean the client has begun another request.
    answered: AtomicU64,
    /// A request is being answered.
    busy: AtomicBool,
    /// When it last became idle (accepted, or answered), in microseconds since `origin`.
    idle_since_us: AtomicU64,
    /// When the first bytes after the last answer arrived, in microseconds since `origin`.
    head_since_us: AtomicU64,
    origin: Instant,
    /// Asked to close (once); the connection task listens.
    pub(super) close: Notify,
    closing: AtomicBool,
    /// Chosen as a stalled head: to be cut, not closed gracefully.
    cut: AtomicBool,
    /// The body of the request in the handler, as its reader receives it.
    pub(super) body: BodyWatch,
}

impl Tracked {
    fn is_idle(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
            && self.reads.load(Ordering::Acquire) == self.answered.load(Ordering::Acquire)
    }

    /// Part of a request head has arrived, and the request has not reached the handler.
    fn is_mid_head(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
            && self.reads.load(Ordering::Acquire) != self.answered.load(Ordering::Acquire)
    }

    /// Since when its head has been arriving, if it has been for `slow_us` or longer.
    fn stalled_since(&self, now_us: u64, slow_us: u64) -> Option<u64> {
        let since = self.head_since_us.load(Ordering::Acquire);
        (self.is_mid_head() && now_us.saturating_sub(since) >= slow_us).then_some(since)
    }

    /// It was chosen as a stalled head and still is one: the connection task drops it rather
    /// than waiting for the head. (Checked by that task, which alone polls the connection, so
    /// the answer cannot change under it.)
    pub(super) fn is_to_be_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire) && self.is_mid_head()
    }

    fn mark_idle(&self) {
        self.idle_since_us
            .store(micros(self.origin), Ordering::Release);
    }

    /// A request reached the handler.
    pub(super) fn begin(&self) {
        self.busy.store(true, Ordering::Release);
    }

    /// What was read so far was not a request (a TLS handshake): idle again from now.
    pub(super) fn settled(&self) {
        self.answered
            .store(self.reads.load(Ordering::Acquire), Ordering::Release);
        self.mark_idle();
    }

    /// Its answer was handed to hyper.
    pub(super) fn end(&self) {
        self.answered
            .store(self.reads.load(Ordering::Acquire), Ordering::Release);
        self.mark_idle();
        self.busy.store(false, Ordering::Release);
    }
}

fn micros(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Removes its connection from [`Live`] when the connection task ends (or is aborted).
pub(super) struct Registration {
    live: Arc<Live>,
    id: u64,
    pub(super) tracked: Arc<Tracked>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.live
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Live {
    pub(super) fn new(idle_grace: Duration, slow_head: Duration, slow_body: Duration) -> Live {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Live {
            next_id: AtomicU64::new(0),
            open: Mutex::default(),
            idle_grace_us: us(idle_grace),
            slow_head_us: us(slow_head),
            slow_body,
        }
    }

    /// Registers a connection just accepted (idle from now).
    pub(super) fn register(self: &Arc<Self>, origin: Instant) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tracked = Arc::new(Tracked {
            reads: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            idle_since_us: AtomicU64::new(0),
            head_since_us: AtomicU64::new(0),
            origin,
            close: Notify::new(),
            closing: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            body: BodyWatch::new(origin),
        });
        tracked.mark_idle();
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tracked.clone());
        Registration {
            live: self.clone(),
            id,
            tracked,
        }
    }

    /// Asks one connection to close to make room: the one idle the longest (past the idle
    /// grace), else the one whose head has been stalled the longest (past the slow-head
    /// bound), else cuts the body arriving at the lowest rate (past the slow-body bound);
    /// never one already asked. False if none is any of these (yet).
    pub(super) fn close_one(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let candidates = || open.values().filter(|t| !t.closing.load(Ordering::Acquire));
        let idle = candidates()
            .filter(|t| t.is_idle())
            .map(|t| (t.idle_since_us.load(Ordering::Acquire), t))
            .filter(|(since, t)| micros(t.origin).saturating_sub(*since) >= self.idle_grace_us)
            .min_by_key(|(since, _)| *since)
            .map(|(_, t)| t);
        let chosen = match idle {
            Some(tracked) => tracked,
            None => {
                let stalled = candidates()
                    .filter_map(|t| {
                        Some((t.stalled_since(micros(t.origin), self.slow_head_us)?, t))
                    })
                    .min_by_key(|(since, _)| *since);
                match stalled {
                    Some((_, tracked)) => {
                        tracked.cut.store(true, Ordering::Release);
                        tracked
                    }
                    None => return self.cut_slowest_body(candidates()),
                }
            }
        };
        chosen.closing.store(true, Ordering::Release);
        chosen.close.notify_one();
        true
    }
}

impl Live {
    /// Cuts the body that has been arriving for [`SLOW_BODY`] or more at the lowest rate.
    fn cut_slowest_body<'a>(&self, candidates: impl Iterator<Item = &'a Arc<Tracked>>) -> bool {
        let rate = |(age, received): (Duration, u64)| received as f64 / age.as_secs_f64();
        let slowest = candidates
            .filter_map(|t| Some((t.body.reading()?, t)))
            .filter(|((age, _), _)| *age >= self.slow_body)
            .min_by(|(a, _), (b, _)| rate(*a).total_cmp(&rate(*b)));
        match slowest {
            // The body may have ended in between: then nothing was cut.
            Some((_, tracked)) if tracked.body.cut() => {
                tracked.closing.store(true, Ordering::Release);
                true
            }
            _ => false,
        }
    }
}

/// The connection's stream, counting the reads that return bytes.
pub(super) struct Counted<S> {
    pub(super) inner: S,
    pub(super) tracked: Arc<Tracked>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let tracked = &self.tracked;
            let earlier = tracked.reads.fetch_add(1, Ordering::AcqRel);
            if earlier == tracked.answered.load(Ordering::Acquire) {
                // The first bytes of a new request.
                tracked
                    .head_since_us
                    .store(micros(tracked.origin), Ordering::Release);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_idle_connection_is_chosen_and_busy_ones_never() {
        let live = Arc::new(Live::new(Duration::ZERO, SLOW_HEAD, SLOW_BODY));
        let origin = Instant::now();
        let first = live.register(origin);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = live.register(origin);
        let third = live.register(origin);
        // The first is answering a request; the second has begun sending one.
        first.tracked.begin();
        second.tracked.reads.fetch_add(1, Ordering::AcqRel);
        assert!(live.close_one());
        assert!(third.tracked.closing.load(Ordering::Acquire));
        // Nothing else is idle; once the first is answered, it is.
        assert!(!live.close_one());
        first.tracked.end();
        assert!(live.close_one());
        assert!(first.tracked.closing.load(Ordering::Acquire));
        assert!(!second.tracked.closing.load(Ordering::Acquire));
        drop(second);
        assert_eq!(live.open.lock().unwrap().len(), 2);
    }

    /// The first bytes of a request arrive on `tracked`, as `Counted` counts them.
    fn head_begins(tracked: &Tracked) {
        tracked.reads.fetch_add(1, Ordering::AcqRel);
        tracked
            .head_since_us
            .store(micros(tracked.origin), Ordering::Release);
    }

    #[test]
    fn with_none_idle_the_head_stalled_longest_is_cut_and_a_young_or_handled_one_never() {
        let live = Arc::new(Live::new(
            Duration::ZERO,
            Duration::from_millis(30),
            SLOW_BODY,
        ));
        let origin = Instant::now();
        let handled = live.register(origin);
        let older = live.register(origin);
        let newer = live.register(origin);
        handled.tracked.begin();
        head_begins(&older.tracked);
        std::thread::sleep(Duration::from_millis(5));
        head_begins(&newer.tracked);
        // Nothing idle, and no head has been arriving for the bound yet.
        assert!(!live.close_one());
        std::thread::sleep(Duration::from_millis(40));
        let young = live.register(origin);
        head_begins(&young.tracked);
        assert!(live.close_one());
        assert!(older.tracked.closing.load(Ordering::Acquire));
        assert!(older.tracked.is_to_be_cut());
        assert!(live.close_one());
        assert!(newer.tracked.is_to_be_cut());
        // The young head and the request in the handler are left alone.
        assert!(!live.close_one());
        assert!(!young.tracked.closing.load(Ordering::Acquire));
        assert!(!handled.tracked.closing.load(Ordering::Acquire));
        // An idle connection goes before any stalled head, and gracefully.
        std::thread::sleep(Duration::from_millis(40));
        handled.tracked.end();
        assert!(live.close_one());
        assert!(handled.tracked.closing.load(Ordering::Acquire));
        assert!(!handled.tracked.is_to_be_cut());
        assert!(live.close_one());
        assert!(young.tracked.is_to_be_cut());
    }

    #[test]
    fn a_connection_idle_for_less_than_the_grace_is_left_alone() {
        let live = Arc::new(Live::new(Duration::from_millis(30), SLOW_HEAD, SLOW_BODY));
        let origin = Instant::now();
        let fresh = live.register(origin);
        assert!(!live.close_one(), "just connected");
        std::thread::sleep(Duration::from_millis(40));
        fresh.tracked.begin();
        fresh.tracked.end();
        assert!(!live.close_one(), "just answered");
        std::thread::sleep(Duration::from_millis(40));
        assert!(live.close_one());
        assert!(fresh.tracked.closing.load(Ordering::Acquire));
    }

    #[test]
    fn with_none_idle_or_stalled_the_slowest_body_past_the_bound_is_cut_and_never_twice() {
        let live = Arc::new(Live::new(
            Duration::ZERO,
            SLOW_HEAD,
            Duration::from_millis(30),
        ));
        // The clock of the listener started before the bodies began.
        let origin = Instant::now() - Duration::from_secs(10);
        let (fast, slow, young, stored) = (
            live.register(origin),
            live.register(origin),
            live.register(origin),
            live.register(origin),
        );
        for request in [&fast, &slow, &young, &stored] {
            request.tracked.begin();
        }
        let long_ago = Instant::now() - Duration::from_secs(2);
        fast.tracked.body.pretend_reading(long_ago, 5000);
        slow.tracked.body.pretend_reading(long_ago, 10);
        // A body just begun is left alone, however slow; one whose body is in (being
        // verified or stored: its watch shows nothing) is never cut.
        young.tracked.body.pretend_reading(Instant::now(), 0);
        assert!(live.close_one());
        assert!(slow.tracked.closing.load(Ordering::Acquire));
        assert!(
            slow.tracked.body.reading().is_none(),
            "cut: its reader answers 503"
        );
        assert!(live.close_one());
        assert!(fast.tracked.closing.load(Ordering::Acquire));
        assert!(!live.close_one());
        assert!(!young.tracked.closing.load(Ordering::Acquire));
        assert!(!stored.tracked.closing.load(Ordering::Acquire));
        // An idle connection still goes first, and gracefully.
        std::thread::sleep(Duration::from_millis(40));
        stored.tracked.end();
        assert!(live.close_one());
        assert!(stored.tracked.closing.load(Ordering::Acquire));
        assert!(live.close_one(), "the young body is now past the bound");
        assert!(young.tracked.closing.load(Ordering::Acquire));
    }

    #[test]
    fn a_connection_mid_handshake_is_busy_and_idle_once_it_is_done() {
        let live = Arc::new(Live::new(Duration::ZERO, SLOW_HEAD, SLOW_BODY));
        let tls = live.register(Instant::now());
        // Handshake records arrived: not to be closed for room.
        tls.tracked.reads.fetch_add(2, Ordering::AcqRel);
        assert!(!live.close_one());
        // Handshake done, no request yet: idle.
        tls.tracked.settled();
        assert!(live.close_one());
    }
}
