//! The open connections of one listener, for the connection cap: which are idle and since
//! when, so that a new connection arriving at the cap makes room by closing the longest-idle
//! one instead of waiting in the kernel's queue behind clients that send nothing.
//!
//! A connection is *idle* when no request is being answered on it and not one byte has arrived
//! since its last answer (or since it was accepted): a kept-alive connection between requests,
//! or one that has not begun its first. Closing one is asked of hyper with
//! `graceful_shutdown`, which closes an idle connection at once and lets one that is in fact
//! mid-request (a head that arrived after the choice) finish its answer first. A connection
//! whose client has sent any part of a request is never chosen; the header deadline
//! (`header_timeout_secs`) is what ends a client that trickles its head. On HTTPS the bytes
//! counted are the TLS records: a connection mid-handshake is busy like one mid-head, and one
//! whose handshake is done and that has sent nothing since is idle (`Tracked::settled`).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Every open connection of one listener, by the order it was accepted in.
#[derive(Default)]
pub(super) struct Live {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Tracked>>>,
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
    origin: Instant,
    /// Asked to close (once); the connection task listens.
    pub(super) close: Notify,
    closing: AtomicBool,
}

impl Tracked {
    fn is_idle(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
            && self.reads.load(Ordering::Acquire) == self.answered.load(Ordering::Acquire)
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
    /// Registers a connection just accepted (idle from now).
    pub(super) fn register(self: &Arc<Self>, origin: Instant) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tracked = Arc::new(Tracked {
            reads: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            idle_since_us: AtomicU64::new(0),
            origin,
            close: Notify::new(),
            closing: AtomicBool::new(false),
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

    /// Asks the connection idle the longest (and not yet asked) to close; false if none is idle.
    pub(super) fn close_longest_idle(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = open
            .values()
            .filter(|t| !t.closing.load(Ordering::Acquire) && t.is_idle())
            .min_by_key(|t| t.idle_since_us.load(Ordering::Acquire));
        match oldest {
            Some(tracked) => {
                tracked.closing.store(true, Ordering::Release);
                tracked.close.notify_one();
                true
            }
            None => false,
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
            self.tracked.reads.fetch_add(1, Ordering::AcqRel);
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
        let live = Arc::new(Live::default());
        let origin = Instant::now();
        let first = live.register(origin);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = live.register(origin);
        let third = live.register(origin);
        // The first is answering a request; the second has begun sending one.
        first.tracked.begin();
        second.tracked.reads.fetch_add(1, Ordering::AcqRel);
        assert!(live.close_longest_idle());
        assert!(third.tracked.closing.load(Ordering::Acquire));
        // Nothing else is idle; once the first is answered, it is.
        assert!(!live.close_longest_idle());
        first.tracked.end();
        assert!(live.close_longest_idle());
        assert!(first.tracked.closing.load(Ordering::Acquire));
        assert!(!second.tracked.closing.load(Ordering::Acquire));
        drop(second);
        assert_eq!(live.open.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_connection_mid_handshake_is_busy_and_idle_once_it_is_done() {
        let live = Arc::new(Live::default());
        let tls = live.register(Instant::now());
        // Handshake records arrived: not to be closed for room.
        tls.tracked.reads.fetch_add(2, Ordering::AcqRel);
        assert!(!live.close_longest_idle());
        // Handshake done, no request yet: idle.
        tls.tracked.settled();
        assert!(live.close_longest_idle());
    }
}
