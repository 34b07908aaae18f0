//! Control characters in log lines, escaped once, at the formatter, so that no call site can
//! forget: a field that quotes a request (an event type, a verifier's or the dedup rule's
//! reason, a pipe handler's stderr line, a command's output) can neither start a line of its
//! own nor move a terminal's cursor or change its colours (issue 23).
//!
//! - The text formats (`logline::PlainLine`, and the default formatter on a terminal) write
//!   every field, of events and of spans, through [`EscapedFields`]: the default formatter's
//!   field visitor, `name=value` separated by spaces, with each value written through
//!   [`Escaping`]. A control character (C0, DEL, C1: `char::is_control`) becomes its Rust
//!   escape (`\n`, `\u{1b}`), as `Debug` of a string writes it: string fields were quoted and
//!   escaped that way already; messages, `%` (Display) fields, `?` fields whose `Debug` writes
//!   raw text, and errors are now too.
//! - JSON ([`JsonLine`]): serde_json escapes what JSON requires (everything below 0x20, `"`,
//!   `\`) and leaves DEL and the C1 controls raw; the line is written through a filter that
//!   spells those as `\u007f`..`\u009f`, the same string to any JSON reader.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// A `fmt::Write` that writes control characters as their Rust escapes.
pub struct Escaping<W>(pub W);

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Nearly every value has none: one pass over the bytes, one write. 0xC2 leads the
        // two-byte UTF-8 form of the C1 controls (and of other Latin-1 characters).
        if !s.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2) {
            return self.0.write_str(s);
        }
        let mut start = 0;
        for (at, c) in s.char_indices() {
            if c.is_control() {
                self.0.write_str(s.get(start..at).unwrap_or_default())?;
                write!(self.0, "{}", c.escape_debug())?;
                start = at + c.len_utf8();
            }
        }
        self.0.write_str(s.get(start..).unwrap_or_default())
    }
}

/// The field format of the text lines: the default formatter's, every value escaped.
#[derive(Debug, Default, Clone, Copy)]
pub struct EscapedFields;

impl<'w> MakeVisitor<Writer<'w>> for EscapedFields {
    type Visitor = FieldVisitor<'w>;

    fn make_visitor(&self, target: Writer<'w>) -> FieldVisitor<'w> {
        FieldVisitor::new(target, true)
    }
}

/// Writes fields as the default formatter's visitor does (names in italics and `=` dimmed on
/// a terminal), each value through [`Escaping`].
pub struct FieldVisitor<'w> {
    writer: Writer<'w>,
    /// Nothing written yet: no separating space before the next field.
    is_empty: bool,
    result: fmt::Result,
}

impl<'w> FieldVisitor<'w> {
    /// `is_empty`: whether the line has no field yet (no space before the first one).
    pub fn new(writer: Writer<'w>, is_empty: bool) -> FieldVisitor<'w> {
        FieldVisitor {
            writer,
            is_empty,
            result: Ok(()),
        }
    }

    fn pad(&mut self) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    /// `name=`, styled as the default formatter styles it on a terminal. The message has none.
    fn name(&mut self, name: &str, suffix: &str) -> fmt::Result {
        if name == "message" {
            return Ok(());
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        if self.writer.has_ansi_escapes() {
            // nu-ansi-term's italic and dimmed, as tracing-subscriber paints them.
            self.writer.write_str("\x1b[3m")?;
            self.writer.write_str(name)?;
            self.writer.write_str("\x1b[0m")?;
            if !suffix.is_empty() {
                self.writer.write_str("\x1b[3m")?;
                self.writer.write_str(suffix)?;
                self.writer.write_str("\x1b[0m")?;
            }
            self.writer.write_str("\x1b[2m=\x1b[0m")
        } else {
            self.writer.write_str(name)?;
            self.writer.write_str(suffix)?;
            self.writer.write_char('=')
        }
    }

    fn escaped(&mut self, value: fmt::Arguments<'_>) -> fmt::Result {
        Escaping(&mut self.writer).write_fmt(value)
    }

    /// `error=outer error.sources=[inner, innermost]`, as the default formatter writes it.
    fn error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) -> fmt::Result {
        self.pad()?;
        self.name(field.name(), "")?;
        self.escaped(format_args!("{value}"))?;
        let Some(source) = value.source() else {
            return Ok(());
        };
        self.writer.write_char(' ')?;
        self.name(field.name(), ".sources")?;
        self.writer.write_char('[')?;
        let mut next = Some(source);
        while let Some(error) = next {
            self.escaped(format_args!("{error}"))?;
            next = error.source();
            if next.is_some() {
                self.writer.write_str(", ")?;
            }
        }
        self.writer.write_char(']')
    }
}

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_ok() {
            self.result = self.error(field, value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .pad()
            .and_then(|()| self.name(field.name(), ""))
            .and_then(|()| self.escaped(format_args!("{value:?}")));
    }
}

impl VisitOutput<fmt::Result> for FieldVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for FieldVisitor<'_> {
    fn writer(&mut self) -> &mut dyn Write {
        &mut self.writer
    }
}

/// An event format whose whole line goes through [`JsonEscaping`]: for the JSON format.
#[derive(Debug, Clone)]
pub struct JsonLine<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for JsonLine<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut escaping = JsonEscaping(writer.by_ref());
        self.0.format_event(ctx, Writer::new(&mut escaping), event)
    }
}

/// Writes DEL and the C1 controls, which JSON allows raw in a string and serde_json leaves
/// so, as `\u007f`..`\u009f`. They only ever appear inside a string (JSON's own syntax is
/// ASCII), where the escape means the same character; everything else passes as it is,
/// the line's closing newline included.
pub struct JsonEscaping<W>(pub W);

impl<W: Write> Write for JsonEscaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if !s.bytes().any(|b| b == 0x7f || b == 0xc2) {
            return self.0.write_str(s);
        }
        let mut start = 0;
        for (at, c) in s.char_indices() {
            if matches!(c, '\u{7f}'..='\u{9f}') {
                self.0.write_str(s.get(start..at).unwrap_or_default())?;
                write!(self.0, "\\u{:04x}", u32::from(c))?;
                start = at + c.len_utf8();
            }
        }
        self.0.write_str(s.get(start..).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

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

    /// A request's text, as a hostile one would write it: a terminal title and a bell, a
    /// forged second line, a carriage return, clear-screen, a C1 CSI, DEL.
    const EVIL: &str =
        "charge\u{1b}]0;pwned\u{7}\n2026-01-01T00:00:00Z  INFO forged\r\u{1b}[2J\u{9b}1m\u{7f}";

    /// A `Debug` that writes its text raw, as some types' own `Debug` does.
    struct Raw(&'static str);
    impl fmt::Debug for Raw {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    /// An error quoting its input, with a source that does too.
    #[derive(Debug)]
    struct Quoting(&'static str, Option<Box<Quoting>>);
    impl fmt::Display for Quoting {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "bad input {}", self.0)
        }
    }
    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1
                .as_deref()
                .map(|e| e as &(dyn std::error::Error + 'static))
        }
    }

    /// Three events, every kind of field carrying [`EVIL`] (or `text`), one inside a span.
    fn events(text: &'static str) {
        tracing::warn!(
            event_type = text,
            display = %text,
            debug = ?Raw(text),
            r#type = text,
            n = 3u64,
            "webhook rejected: {text}"
        );
        let error = Quoting(text, Some(Box::new(Quoting(text, None))));
        tracing::error!(
            error = &error as &(dyn std::error::Error + 'static),
            "pipe handler"
        );
        tracing::info_span!("lane", route = %text, raw = ?Raw(text))
            .in_scope(|| tracing::info!(stderr = %text, "inside"));
    }

    /// The output of `events(text)` through the fmt subscriber: the text format (`plain`:
    /// `logline::PlainLine`, else the default event format) with `fields`, colours or not.
    fn text_lines<N>(fields: N, ansi: bool, plain: bool, text: &'static str) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let out = Captured::default();
        let writer = out.clone();
        let builder = tracing_subscriber::fmt()
            .with_ansi(ansi)
            .without_time()
            .with_writer(move || writer.clone())
            .fmt_fields(fields);
        if plain {
            let subscriber = builder
                .event_format(crate::logline::PlainLine::new(false))
                .finish();
            tracing::subscriber::with_default(subscriber, || events(text));
        } else {
            tracing::subscriber::with_default(builder.finish(), || events(text));
        }
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    /// Only the line ends, and on a terminal the formatter's own colours (`ESC [ digits m`).
    fn assert_inert(out: &str) {
        assert_eq!(out.lines().count(), 3, "one line per event: {out}");
        let mut rest = out;
        while let Some(at) = rest.find('\u{1b}') {
            let after = &rest[at + 1..];
            let end = after.find('m').unwrap();
            assert!(
                after.starts_with('[')
                    && after[1..end]
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b';'),
                "a colour, nothing else: {out:?}"
            );
            rest = &after[end..];
        }
        let others = out
            .chars()
            .filter(|&c| c.is_control() && c != '\n' && c != '\u{1b}')
            .count();
        assert_eq!(others, 0, "{out:?}");
        assert!(
            !out.contains("\u{1b}[2J") && !out.contains("\u{1b}]"),
            "{out:?}"
        );
    }

    #[test]
    fn no_text_format_lets_a_control_character_through() {
        for (ansi, plain) in [(false, true), (false, false), (true, false)] {
            let out = text_lines(EscapedFields, ansi, plain, EVIL);
            assert_inert(&out);
            // What was escaped can still be read.
            assert!(
                out.contains(r"webhook rejected: charge\u{1b}]0;pwned\u{7}\n2026-01-01T00:00:00Z  INFO forged\r"),
                "{out}"
            );
        }
        let plain = text_lines(EscapedFields, false, true, EVIL);
        for field in [
            r#"event_type="charge\u{1b}]0;pwned"#,
            r#" display=charge\u{1b}]0;pwned"#,
            r#" debug=charge\u{1b}]0;pwned"#,
            r#" type="charge\u{1b}"#,
            r"error=bad input charge\u{1b}]0;pwned",
            r"error.sources=[bad input charge\u{1b}]0;pwned",
            r"lane{route=charge\u{1b}]0;pwned",
            r"stderr=charge\u{1b}]0;pwned\u{7}\n",
            r"\u{9b}1m\u{7f}",
        ] {
            assert!(plain.contains(field), "{field}: {plain}");
        }
    }

    #[test]
    fn without_control_characters_the_lines_are_the_default_formatters() {
        use tracing_subscriber::fmt::format::DefaultFields;
        let text = "charge.paid \"quoted\" ação";
        for ansi in [false, true] {
            assert_eq!(
                text_lines(EscapedFields, ansi, false, text),
                text_lines(DefaultFields::new(), ansi, false, text),
                "ansi {ansi}"
            );
        }
        assert_eq!(
            text_lines(EscapedFields, false, true, text),
            text_lines(DefaultFields::new(), false, false, text)
        );
    }

    #[test]
    fn a_json_line_holds_the_text_exactly_with_no_raw_control_character() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .json()
            .flatten_event(true)
            .map_event_format(JsonLine)
            .finish();
        tracing::subscriber::with_default(subscriber, || events(EVIL));
        let out = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.lines().count(), 3, "{out}");
        assert!(
            !out.contains(|c: char| c.is_control() && c != '\n'),
            "{out:?}"
        );
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["event_type"], EVIL);
        assert_eq!(lines[0]["display"], EVIL);
        assert_eq!(lines[0]["message"], format!("webhook rejected: {EVIL}"));
        assert_eq!(lines[2]["stderr"], EVIL);
        assert_eq!(lines[2]["span"]["route"], EVIL);
    }

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        Escaping(&mut out).write_str(text).unwrap();
        out
    }

    #[test]
    fn every_control_character_is_escaped_and_nothing_else() {
        assert_eq!(escaped("charge.paid ação ✓ ©"), "charge.paid ação ✓ ©");
        assert_eq!(
            escaped("a\nb\r\tc\0\u{1b}[31mred\u{7}\u{7f}\u{85}\u{9b}2J"),
            r"a\nb\r\tc\0\u{1b}[31mred\u{7}\u{7f}\u{85}\u{9b}2J"
        );
        assert_eq!(escaped("end\n"), r"end\n");
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            let out = escaped(&c.to_string());
            assert!(!out.contains(|c: char| c.is_control()), "{c:?}");
            assert_eq!(out == c.to_string(), !c.is_control(), "{c:?}");
        }
    }

    #[test]
    fn json_keeps_its_meaning_with_del_and_c1_spelled_out() {
        let value = "a\u{7f}b\u{9b}c ç\n";
        let line = format!("{}\n", serde_json::json!({ "f": value }));
        let mut out = String::new();
        JsonEscaping(&mut out).write_str(&line).unwrap();
        assert_eq!(out, "{\"f\":\"a\\u007fb\\u009bc ç\\n\"}\n");
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["f"], value);
    }
}
