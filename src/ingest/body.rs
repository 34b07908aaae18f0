//! Reading a request's body: into one buffer of at most `max_body_bytes`, within
//! `body_timeout` and the minimum rate, against the budget of body bytes buffered across all
//! requests, and stopped when the connection cap needs the slot.
//!
//! Memory. A body is one buffer: the first frame as hyper hands it (a body that arrives with
//! its head, the usual case, is never copied), and from a second frame on, one `Vec` sized
//! once (the Content-Length, else `max_body_bytes`; capacity never written costs no resident
//! memory) that each frame is copied into and then dropped. A body sent in one-byte chunks
//! thus costs its bytes, not a frame per byte (`Limited::collect` kept every frame: about 34
//! bytes of memory per byte received, issue 23). Every byte received is first taken from the
//! [`Budget`] all requests share; a request that finds it spent is answered 503, and what a
//! request took goes back when it ends ([`Held`]). The budget counts bytes received, not
//! bytes declared: a client that declares a large Content-Length and sends nothing holds none.
//!
//! Time. The body must be whole within `body_timeout`, and after [`RATE_GRACE`] keep up
//! `min_body_bytes_per_sec`: at `t` after it began, at least `rate × (t − grace)` bytes in.
//! Else 408. The timer is polled only when the next frame is not already there.
//!
//! Room. While a body is read, its connection's [`BodyWatch`] shows since when and how much;
//! the make-room rule at the connection cap (`server::connections`) may cut the slowest body,
//! which the reader hears at once and answers 503.

use std::fmt::Display;
use std::pin::pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::sync::Notify;

use super::Outcome;

/// How long a body may take before the minimum rate applies: a client's first bytes may wait
/// for a round trip (`Expect: 100-continue`) and a slow start.
pub const RATE_GRACE: Duration = Duration::from_secs(2);

/// The body limits in force (`[server]`; a reload replaces them).
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    pub(super) max_bytes: usize,
    pub(super) timeout: Duration,
    /// Bytes per second after [`RATE_GRACE`]; 0: none.
    pub(super) min_rate: u64,
}

impl BodyLimits {
    /// When a body begun at `begin` that has `received` bytes so far is too late.
    fn deadline(&self, begin: tokio::time::Instant, received: usize) -> tokio::time::Instant {
        let whole = begin + self.timeout;
        if self.min_rate == 0 {
            return whole;
        }
        let micros = (received as u64).saturating_mul(1_000_000) / self.min_rate;
        whole.min(begin + RATE_GRACE + Duration::from_micros(micros))
    }
}

/// The body bytes buffered across all requests, and the most there may be
/// (`body_budget_bytes`; a reload changes the most, never what is held).
#[derive(Debug)]
pub struct Budget {
    limit: AtomicUsize,
    used: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize) -> Budget {
        Budget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        }
    }

    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Takes `bytes` if they fit; false (nothing taken) if they do not.
    fn take(&self, bytes: usize) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    /// The bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// What one request took from the [`Budget`]; it goes back when the request ends (this drops).
pub(super) struct Held<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

const IDLE: u8 = 0;
const READING: u8 = 1;
const CUT: u8 = 2;

/// One connection's body in progress, between its reader (here) and the make-room rule of
/// the connection cap (`server::connections`), which reads how it goes and may cut it.
#[derive(Debug)]
pub struct BodyWatch {
    state: AtomicU8,
    /// Bytes of the body in progress received so far.
    received: AtomicU64,
    /// When it began, in microseconds since `origin`.
    since_us: AtomicU64,
    origin: Instant,
    cut: Notify,
}

impl BodyWatch {
    pub fn new(origin: Instant) -> BodyWatch {
        BodyWatch {
            state: AtomicU8::new(IDLE),
            received: AtomicU64::new(0),
            since_us: AtomicU64::new(0),
            origin,
            cut: Notify::new(),
        }
    }

    /// A body is being read: for how long, and how many bytes are in.
    pub fn reading(&self) -> Option<(Duration, u64)> {
        if self.state.load(Ordering::Acquire) != READING {
            return None;
        }
        let since = Duration::from_micros(self.since_us.load(Ordering::Acquire));
        let age = self.origin.elapsed().saturating_sub(since);
        Some((age, self.received.load(Ordering::Acquire)))
    }

    /// Stops the body being read: its reader answers 503. False if none is (it just ended).
    pub fn cut(&self) -> bool {
        let cut = self
            .state
            .compare_exchange(READING, CUT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if cut {
            self.cut.notify_one();
        }
        cut
    }

    fn begin(&self, at: Instant) {
        let since = at.saturating_duration_since(self.origin);
        let since = u64::try_from(since.as_micros()).unwrap_or(u64::MAX);
        self.since_us.store(since, Ordering::Release);
        self.received.store(0, Ordering::Release);
        self.state.store(READING, Ordering::Release);
    }

    fn is_cut(&self) -> bool {
        self.state.load(Ordering::Acquire) == CUT
    }

    /// The read ended: idle again. Returns the state it ended in (`CUT` if cut meanwhile).
    fn finish(&self) -> u8 {
        self.state.swap(IDLE, Ordering::AcqRel)
    }

    /// A body begun at `at` with `received` bytes in, as its reader would show it: for the
    /// make-room rule's unit tests.
    #[cfg(test)]
    pub(crate) fn pretend_reading(&self, at: Instant, received: u64) {
        self.begin(at);
        self.received.store(received, Ordering::Release);
    }
}

/// Marks the watch idle when the read ends, however it ends (its future dropped included).
struct Reading<'a>(&'a BodyWatch);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.state.store(IDLE, Ordering::Release);
    }
}

/// The body so far: nothing, the first frame as received, or the one buffer.
enum Buffer {
    Empty,
    One(Bytes),
    Many(Vec<u8>),
}

impl Buffer {
    /// Appends `data`; a second frame moves both into one buffer of `capacity`.
    fn push(&mut self, data: Bytes, capacity: usize) {
        match self {
            Buffer::Empty => *self = Buffer::One(data),
            Buffer::One(first) => {
                let mut all = Vec::with_capacity(capacity.max(first.len() + data.len()));
                all.extend_from_slice(first);
                all.extend_from_slice(&data);
                *self = Buffer::Many(all);
            }
            Buffer::Many(all) => all.extend_from_slice(&data),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Buffer::Empty => Bytes::new(),
            Buffer::One(bytes) => bytes,
            Buffer::Many(all) => Bytes::from(all),
        }
    }
}

/// Reads the whole body within `limits`, taking every byte from `budget` first and watched
/// through `watch`. A declared Content-Length over the limit is refused before the body is
/// polled (so `Expect: 100-continue` gets no `100 Continue`); a chunked one as soon as it
/// passes it. The bytes stay taken until the [`Held`] is dropped.
pub(super) async fn read<'b, B>(
    mut body: B,
    limits: BodyLimits,
    budget: &'b Budget,
    watch: &BodyWatch,
) -> Result<(Bytes, Held<'b>), Outcome>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Display,
{
    let declared = body.size_hint().exact();
    if declared.is_some_and(|len| len > limits.max_bytes as u64) {
        return Err(Outcome::TooLarge);
    }
    let capacity = declared.map_or(limits.max_bytes, |len| len as usize);
    let begin = tokio::time::Instant::now();
    watch.begin(begin.into_std());
    let _reading = Reading(watch);
    let mut held = Held { budget, bytes: 0 };
    let mut buffer = Buffer::Empty;
    let mut timer = pin!(tokio::time::sleep_until(limits.deadline(begin, 0)));
    let mut cut = pin!(watch.cut.notified());
    let frames = async {
        loop {
            tokio::select! {
                biased;
                frame = body.frame() => {
                    let data = match frame {
                        None => return Ok(()),
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) => data,
                            Err(_trailers) => continue,
                        },
                        Some(Err(e)) => {
                            return Err(Outcome::BadRequest(format!(
                                "could not read the body: {e}"
                            )));
                        }
                    };
                    let received = held.bytes + data.len();
                    if received > limits.max_bytes {
                        return Err(Outcome::TooLarge);
                    }
                    if !budget.take(data.len()) {
                        return Err(Outcome::OverBudget);
                    }
                    held.bytes = received;
                    buffer.push(data, capacity);
                    watch.received.store(received as u64, Ordering::Release);
                }
                () = &mut timer => {
                    let due = limits.deadline(begin, held.bytes);
                    if due <= tokio::time::Instant::now() {
                        return Err(Outcome::BodyTimeout);
                    }
                    timer.as_mut().reset(due);
                }
                () = &mut cut => {
                    if watch.is_cut() {
                        return Err(Outcome::CutForRoom);
                    }
                    // A wake-up left from a cut that came after the last body ended.
                    cut.set(watch.cut.notified());
                }
            }
        }
    };
    let read = frames.await;
    // A cut that came as the read ended still wins: the make-room rule counted on this
    // connection closing (it is no candidate any more), so it is answered 503 and closed.
    if watch.finish() == CUT {
        return Err(Outcome::CutForRoom);
    }
    read?;
    Ok((buffer.into_bytes(), held))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_takes_what_fits_and_gets_it_back_when_the_request_ends() {
        let budget = Budget::new(10);
        assert!(budget.take(6));
        assert!(!budget.take(5), "6 + 5 is past 10");
        assert!(budget.take(4));
        assert_eq!(budget.used(), 10);
        drop(Held {
            budget: &budget,
            bytes: 6,
        });
        assert_eq!(budget.used(), 4);
        // A lower limit refuses new bytes; what is held stays held until given back.
        budget.set_limit(3);
        assert!(!budget.take(1));
        assert_eq!(budget.used(), 4);
    }

    #[test]
    fn the_rate_deadline_grows_with_the_bytes_in_and_never_passes_the_timeout() {
        let limits = BodyLimits {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(20),
            min_rate: 1000,
        };
        let begin = tokio::time::Instant::now();
        assert_eq!(limits.deadline(begin, 0), begin + RATE_GRACE);
        assert_eq!(
            limits.deadline(begin, 3000),
            begin + RATE_GRACE + Duration::from_secs(3)
        );
        assert_eq!(limits.deadline(begin, 1 << 20), begin + limits.timeout);
        let off = BodyLimits {
            min_rate: 0,
            ..limits
        };
        assert_eq!(off.deadline(begin, 0), begin + limits.timeout);
    }

    #[test]
    fn a_cut_reaches_only_a_body_being_read() {
        let watch = BodyWatch::new(Instant::now());
        assert!(watch.reading().is_none());
        assert!(!watch.cut(), "no body: nothing to cut");
        watch.begin(Instant::now());
        watch.received.store(7, Ordering::Release);
        assert_eq!(watch.reading().map(|(_, received)| received), Some(7));
        assert!(watch.cut());
        assert!(watch.is_cut());
        assert!(watch.reading().is_none(), "cut: no longer a candidate");
        assert!(!watch.cut(), "once");
        assert_eq!(watch.finish(), CUT, "a cut as the read ends is seen");
        assert!(watch.reading().is_none());
        watch.begin(Instant::now());
        drop(Reading(&watch));
        assert!(watch.reading().is_none(), "a dropped read is idle");
    }

    #[test]
    fn frames_after_the_first_go_into_one_buffer_of_the_declared_size() {
        let mut buffer = Buffer::Empty;
        let first = Bytes::from_static(b"ab");
        buffer.push(first.clone(), 8);
        // One frame: handed on as received, not copied.
        assert!(matches!(&buffer, Buffer::One(b) if b.as_ptr() == first.as_ptr()));
        buffer.push(Bytes::from_static(b"cd"), 8);
        buffer.push(Bytes::from_static(b"ef"), 8);
        match &buffer {
            Buffer::Many(all) => assert_eq!(all.capacity(), 8),
            _ => panic!("one buffer"),
        }
        assert_eq!(buffer.into_bytes(), Bytes::from_static(b"abcdef"));
    }
}
