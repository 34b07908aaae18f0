//! Log output off the request path. Every webhook logs a line, and writing it to stderr (a
//! pipe to journald) is a system call; here a line is only appended to a shared buffer, and a
//! background thread writes whatever has gathered, so a burst of requests costs one `write`
//! per millisecond rather than one per request. A quiet server writes each line at once (no
//! timer, no wake-up while nothing is logged), and [`FlushOnDrop`] writes what is left when
//! the program ends.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writer thread lets lines gather after the first one arrives.
const GATHER: Duration = Duration::from_millis(1);

/// Past this many buffered bytes, a line is written by its own thread rather than queued:
/// the log never holds much memory, whatever the rate.
const MAX_BUFFERED: usize = 256 * 1024;

/// A `MakeWriter` for the fmt subscriber; clones share one buffer and one writer thread.
#[derive(Clone)]
pub struct Buffered {
    shared: Arc<Shared>,
}

/// Lock order, everywhere: `lines`, then `sink`. Whoever takes a chunk out of `lines` locks
/// `sink` before letting go of `lines`, so chunks reach the sink in the order they were logged.
struct Shared {
    lines: Mutex<Vec<u8>>,
    arrived: Condvar,
    sink: Mutex<Box<dyn Write + Send>>,
    /// No writer thread could be started: every line is written by its caller.
    direct: AtomicBool,
}

/// Writes out what is still buffered when dropped (at the end of `main`).
#[must_use = "dropping it at once loses the last log lines at exit"]
pub struct FlushOnDrop {
    shared: Arc<Shared>,
}

impl Buffered {
    /// Starts the writer thread for `sink` (stderr in the binary).
    pub fn start(sink: Box<dyn Write + Send>) -> (Buffered, FlushOnDrop) {
        let shared = Arc::new(Shared::new(sink));
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("portaria-log".into())
            .spawn(move || thread_shared.run());
        if spawned.is_err() {
            shared.direct.store(true, Ordering::Relaxed);
        }
        (
            Buffered {
                shared: shared.clone(),
            },
            FlushOnDrop { shared },
        )
    }
}

impl Shared {
    fn new(sink: Box<dyn Write + Send>) -> Shared {
        Shared {
            lines: Mutex::new(Vec::with_capacity(8192)),
            arrived: Condvar::new(),
            sink: Mutex::new(sink),
            direct: AtomicBool::new(false),
        }
    }

    fn run(&self) {
        loop {
            {
                let Ok(mut lines) = self.lines.lock() else {
                    return;
                };
                while lines.is_empty() {
                    lines = match self.arrived.wait(lines) {
                        Ok(lines) => lines,
                        Err(_) => return,
                    };
                }
            }
            // Let the rest of a burst arrive, then take it all in one go.
            std::thread::sleep(GATHER);
            self.flush();
        }
    }

    /// Takes everything buffered and writes it, in order (see the lock order above).
    fn flush(&self) {
        let Ok(mut lines) = self.lines.lock() else {
            return;
        };
        if lines.is_empty() {
            return;
        }
        let taken = std::mem::take(&mut *lines);
        let Ok(mut sink) = self.sink.lock() else {
            return;
        };
        drop(lines);
        // Nowhere to report a failure to write the log; drop it as stderr would.
        let _ = sink.write_all(&taken).and_then(|()| sink.flush());
    }
}

impl FlushOnDrop {
    /// Writes out what is buffered now, from anywhere (the panic hook, before it exits).
    pub fn flusher(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.flush()
    }
}

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        self.shared.flush();
    }
}

/// One log line's writer: appends to the shared buffer.
pub struct Line<'a> {
    shared: &'a Shared,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut lines = self
            .shared
            .lines
            .lock()
            .map_err(|_| io::Error::other("log buffer poisoned"))?;
        let was_empty = lines.is_empty();
        lines.extend_from_slice(bytes);
        let full = lines.len() > MAX_BUFFERED || self.shared.direct.load(Ordering::Relaxed);
        drop(lines);
        if full {
            // The writer thread is behind (or absent): this caller writes, in order.
            self.shared.flush();
        } else if was_empty {
            self.shared.arrived.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffered {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_come_out_whole_and_in_order_and_a_quiet_line_comes_out_at_once() {
        let captured = Captured::default();
        let (writer, _flush) = Buffered::start(Box::new(captured.clone()));
        for n in 0..10_000 {
            writeln!(writer.make_writer(), "line {n}").unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let expected: String = (0..10_000).map(|n| format!("line {n}\n")).collect();
        while captured.0.lock().unwrap().len() < expected.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer thread writes it all"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            String::from_utf8(captured.0.lock().unwrap().clone()).unwrap(),
            expected
        );

        // A lone line on a quiet logger is written within milliseconds, without a flush.
        writeln!(writer.make_writer(), "alone").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while !String::from_utf8_lossy(&captured.0.lock().unwrap()).ends_with("alone\n") {
            assert!(
                std::time::Instant::now() < deadline,
                "a lone line is not held back"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn what_is_left_is_written_when_the_guard_drops() {
        // No writer thread here: only the guard can get the line out.
        let captured = Captured::default();
        let shared = Arc::new(Shared::new(Box::new(captured.clone())));
        let writer = Buffered {
            shared: shared.clone(),
        };
        writeln!(writer.make_writer(), "last words").unwrap();
        assert!(captured.0.lock().unwrap().is_empty(), "still buffered");
        drop(FlushOnDrop { shared });
        assert_eq!(
            String::from_utf8(captured.0.lock().unwrap().clone()).unwrap(),
            "last words\n"
        );
    }

    #[test]
    fn past_the_buffer_limit_or_without_a_thread_the_caller_writes_in_order() {
        // No writer thread: the buffer only empties when a caller finds it full.
        let captured = Captured::default();
        let shared = Arc::new(Shared::new(Box::new(captured.clone())));
        let writer = Buffered {
            shared: shared.clone(),
        };
        let line = |n: usize| format!("line {n:06} {}\n", "x".repeat(100));
        let mut n = 0;
        while captured.0.lock().unwrap().is_empty() {
            write!(writer.make_writer(), "{}", line(n)).unwrap();
            n += 1;
            assert!(n * 110 < 2 * MAX_BUFFERED, "the caller never wrote");
        }
        assert!(
            n * line(0).len() > MAX_BUFFERED,
            "written only past the limit"
        );
        // With no thread at all, every line goes out at once, after what was buffered.
        shared.direct.store(true, Ordering::Relaxed);
        write!(writer.make_writer(), "{}", line(n)).unwrap();
        let expected: String = (0..=n).map(line).collect();
        assert_eq!(
            String::from_utf8(captured.0.lock().unwrap().clone()).unwrap(),
            expected
        );
    }
}
