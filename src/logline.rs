//! The plain-text log line (`[log] format = "text"` without colour: a pipe, a file,
//! journald). Byte for byte the line of `tracing-subscriber`'s default format with ANSI off
//! (`2026-12-01T13:59:11.918236Z  INFO portaria::ingest: webhook endpoint="pagarme" ...`),
//! written with a few `write_str` calls: the default formatter goes through `core::fmt` and
//! its colour wrappers for every field even with colour off, about 20,000 instructions per
//! request line (issue 17). What it has no fast path for (errors, floats, a string that
//! needs escaping, the message, spans) it hands to the visitor of `logescape`, the default
//! formatter's with control characters escaped in every value (issue 23): the line is the
//! default one but for those.

use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::VisitOutput;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::logescape::FieldVisitor;

/// The event format: timestamp (unless journald stamps the lines), level, spans, target,
/// fields.
#[derive(Debug, Clone, Copy)]
pub struct PlainLine {
    timestamp: bool,
}

impl PlainLine {
    /// `timestamp`: start each line with the UTC time, to the microsecond.
    pub fn new(timestamp: bool) -> PlainLine {
        PlainLine { timestamp }
    }
}

impl<S, N> FormatEvent<S, N> for PlainLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if self.timestamp {
            write_timestamp(&mut writer, SystemTime::now())?;
            writer.write_char(' ')?;
        }
        writer.write_str(match *meta.level() {
            Level::TRACE => "TRACE ",
            Level::DEBUG => "DEBUG ",
            Level::INFO => " INFO ",
            Level::WARN => " WARN ",
            Level::ERROR => "ERROR ",
        })?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(writer, "{{{fields}}}")?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        let mut fields = Fields {
            writer: writer.by_ref(),
            empty: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_char('\n')
    }
}

/// The event's fields, `name=value` separated by spaces, as the default visitor writes them.
struct Fields<'w> {
    writer: Writer<'w>,
    /// Nothing written yet: no separating space before the next field.
    empty: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    /// Writes ` name=` (no space before the first field).
    fn name(&mut self, field: &Field) -> fmt::Result {
        if self.empty {
            self.empty = false;
        } else {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(field.name())?;
        self.writer.write_char('=')
    }

    /// Hands one field to the escaping visitor.
    fn escaping_visitor(&mut self, record: impl FnOnce(&mut FieldVisitor<'_>)) {
        let mut visitor = FieldVisitor::new(self.writer.by_ref(), self.empty);
        record(&mut visitor);
        self.result = visitor.finish();
        self.empty = false;
    }

    /// Whether the default visitor would write this field as is: a plain name (not the
    /// message, no `r#`).
    fn plain(field: &Field) -> bool {
        let name = field.name();
        name != "message" && !name.starts_with("r#")
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        // `Debug` of a str: quoted, and only `"`, `\` and what is not printable ASCII
        // escaped; a value with none of those is written as it is.
        let verbatim = value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if !(verbatim && Fields::plain(field)) {
            return self.escaping_visitor(|v| v.record_str(field, value));
        }
        self.result = self.name(field).and_then(|()| {
            self.writer.write_char('"')?;
            self.writer.write_str(value)?;
            self.writer.write_char('"')
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.result.is_err() {
            return;
        }
        if !Fields::plain(field) {
            return self.escaping_visitor(|v| v.record_u64(field, value));
        }
        self.result = self
            .name(field)
            .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.result.is_err() {
            return;
        }
        if !Fields::plain(field) {
            return self.escaping_visitor(|v| v.record_i64(field, value));
        }
        self.result = self
            .name(field)
            .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.result.is_err() {
            return;
        }
        if !Fields::plain(field) {
            return self.escaping_visitor(|v| v.record_bool(field, value));
        }
        self.result = self
            .name(field)
            .and_then(|()| self.writer.write_str(if value { "true" } else { "false" }));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_ok() {
            self.escaping_visitor(|v| v.record_error(field, value));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_ok() {
            self.escaping_visitor(|v| v.record_debug(field, value));
        }
    }
}

/// `2026-12-01T13:59:11.918236Z`: the default formatter's UTC time, to the microsecond.
fn write_timestamp(writer: &mut impl Write, at: SystemTime) -> fmt::Result {
    let (secs, nanos) = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        // Before 1970: whole seconds back, then the nanoseconds forward from there.
        Err(e) => {
            let d = e.duration();
            match d.subsec_nanos() {
                0 => (-(d.as_secs() as i64), 0),
                n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
            }
        }
    };
    let (year, month, day) = crate::time::civil_from_days(secs.div_euclid(86_400));
    let in_day = secs.rem_euclid(86_400);
    if !(0..=9999).contains(&year) {
        // The default formatter's way with years it cannot write in four digits.
        if year > 9999 {
            write!(writer, "+{year}")?;
        } else {
            write!(writer, "{year:05}")?;
        }
    } else {
        push_digits(writer, year as u32, 4)?;
    }
    let fields = [
        ('-', month as u32, 2),
        ('-', day as u32, 2),
        ('T', (in_day / 3600) as u32, 2),
        (':', (in_day / 60 % 60) as u32, 2),
        (':', (in_day % 60) as u32, 2),
        ('.', nanos / 1000, 6),
    ];
    for (separator, value, width) in fields {
        writer.write_char(separator)?;
        push_digits(writer, value, width)?;
    }
    writer.write_char('Z')
}

/// `value` in decimal, zero-padded to `width` digits (`width` at most 10).
fn push_digits(writer: &mut impl Write, mut value: u32, width: usize) -> fmt::Result {
    let mut digits = [b'0'; 10];
    for slot in digits[..width].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
    // Only ASCII digits were written.
    writer.write_str(std::str::from_utf8(&digits[..width]).map_err(|_| fmt::Error)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// What a test subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("disk I/O error")
        }
    }
    impl fmt::Display for Inner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("no space left")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    /// Every kind of field the crate logs, and the values that need escaping.
    fn events() {
        let client: std::net::IpAddr = [127, 0, 0, 1].into();
        let id: i64 = -42;
        tracing::info!(
            endpoint = "pagarme",
            outcome = "accepted",
            %client,
            event_id = 1490u64,
            signed = id,
            dedup_key = "9f4272a0",
            event_type = "charge.paid",
            status = 200u16,
            latency_ms = 3.4833160000000003,
            duplicate = false,
            "webhook"
        );
        tracing::warn!(
            quoted = "say \"hi\"",
            backslash = r"C:\dir",
            newline = "a\nb",
            unicode = "ação ✓",
            control = "\u{1b}[31mred",
            empty = "",
            r#type = "raw",
            "webhook rejected"
        );
        let error = Outer(Inner);
        tracing::error!(error = &error as &(dyn std::error::Error + 'static), debug = ?Some(1), "storing failed: {}", "no");
        tracing::debug!(message = "a \"message\" field", n = 7u64);
        tracing::trace!("only a message");
        tracing::info!(first = true);
        let span = tracing::info_span!("lane", route = "default", n = 2u64);
        let _entered = span.enter();
        tracing::info_span!("inner").in_scope(|| tracing::info!(at = "both spans"));
    }

    fn lines_of<E>(format: E) -> String
    where
        E: for<'w> FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::DefaultFields,
            > + Send
            + Sync
            + 'static,
    {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .event_format(format)
            .finish();
        tracing::subscriber::with_default(subscriber, events);
        out.text()
    }

    #[test]
    fn writes_what_the_default_format_writes() {
        let default = lines_of(tracing_subscriber::fmt::format().without_time());
        let plain = lines_of(PlainLine::new(false));
        assert_eq!(plain, default);
        // The fast paths ran on the lines above, the escapes went to the default visitor.
        assert!(plain.contains(r#"webhook endpoint="pagarme" outcome="accepted" client=127.0.0.1 event_id=1490 signed=-42 dedup_key="9f4272a0" event_type="charge.paid" status=200 latency_ms=3.4833160000000003 duplicate=false"#), "{plain}");
        assert!(plain.contains(r#"quoted="say \"hi\"""#), "{plain}");
        assert!(
            plain.contains(
                "lane{route=\"default\" n=2}:inner: portaria::logline::tests: at=\"both spans\""
            ),
            "{plain}"
        );
        assert_eq!(plain.lines().count(), 7);
    }

    #[test]
    fn a_timestamped_line_starts_with_the_time() {
        let default = lines_of(tracing_subscriber::fmt::format());
        let plain = lines_of(PlainLine::new(true));
        for (plain, default) in plain.lines().zip(default.lines()) {
            let (time, rest) = plain.split_at(27);
            assert_eq!(rest, &default[27..]);
            assert_eq!(time.len(), default[..27].len());
            assert!(time.starts_with("20") && time.ends_with('Z') && time.as_bytes()[10] == b'T');
        }
    }

    #[test]
    fn timestamps_are_utc_to_the_microsecond() {
        let at = |secs: u64, nanos: u32| {
            let mut out = String::new();
            write_timestamp(&mut out, UNIX_EPOCH + Duration::new(secs, nanos)).unwrap();
            out
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 999), "2000-02-29T00:00:00.000000Z");
        assert_eq!(
            at(1_796_026_524, 123_456_789),
            "2026-11-30T08:15:24.123456Z"
        );
        assert_eq!(
            at(1_796_083_151, 918_236_999),
            "2026-11-30T23:59:11.918236Z"
        );
        let mut before = String::new();
        write_timestamp(&mut before, UNIX_EPOCH - Duration::new(0, 500_000)).unwrap();
        assert_eq!(before, "1969-12-31T23:59:59.999500Z");
        let mut far = String::new();
        write_timestamp(&mut far, UNIX_EPOCH + Duration::from_secs(253_402_300_800)).unwrap();
        assert_eq!(far, "+10000-01-01T00:00:00.000000Z");
    }
}
