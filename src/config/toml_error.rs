//! TOML parse errors, told without echoing a secret: a message names the line, the column and
//! the key, never quotes the line itself or a string value (either may be a secret, and the
//! message goes to stderr and the journal).

/// The TOML parser's message with where it happened, but never the offending line itself (the
/// parser's own `Display` quotes it): that line may be `secert = "whsec_…"`, and this message
/// goes to stderr and the journal. A string value that serde quotes in a type error
/// (`secrets = "whsec_…"`) is left out for the same reason.
pub(super) fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = without_quoted_strings(e.message().trim_end());
    let Some(span) = e.span() else {
        return message;
    };
    let (line, column) = (line_of(text, span.start), column_of(text, span.start));
    match key_on_line(text, span.start) {
        Some(key) => format!("line {line}, column {column} (`{key}`): {message}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

/// The key of the `key = value` line holding byte `offset`: a name is safe to show, where the
/// rest of the line may not be.
fn key_on_line(text: &str, offset: usize) -> Option<&str> {
    let end = floor_char_boundary(text, offset);
    let start = text[..end].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let key = line.split_once('=')?.0.trim();
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    (!key.is_empty() && key.chars().all(plain)).then_some(key)
}

/// Replaces each `string "…"` (serde's way of quoting an unexpected string value, with Rust
/// escapes inside) with `a string`.
fn without_quoted_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(QUOTED) {
        out.push_str(&rest[..start]);
        out.push_str("a string");
        let mut chars = rest[start + QUOTED.len()..].char_indices();
        let mut end = rest.len() - start - QUOTED.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &rest[start + QUOTED.len() + end..];
    }
    out.push_str(rest);
    out
}

/// The 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = floor_char_boundary(text, offset);
    text[..end].matches('\n').count() + 1
}

/// The 1-based column (in characters) of byte `offset` in `text`.
fn column_of(text: &str, offset: usize) -> usize {
    let end = floor_char_boundary(text, offset);
    let line_start = text[..end].rfind('\n').map_or(0, |i| i + 1);
    text[line_start..end].chars().count() + 1
}

fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{MINIMAL, problems};

    #[test]
    fn unknown_keys_are_refused_with_line_and_column() {
        let msg = problems(&format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n{MINIMAL}"
        ));
        assert!(msg.contains("/srv/portaria/portaria.toml"), "{msg}");
        assert!(msg.contains("lisen"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        let msg = problems(&format!("{MINIMAL}secert = \"x\"\n"));
        assert!(msg.contains("secert"), "{msg}");
    }

    #[test]
    fn a_parse_error_never_echoes_a_secret() {
        let head = "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n";
        for (line, place) in [
            // A misspelt key: the parser's own message would quote the whole line.
            (
                r#"secert = "whsec_TOPSECRET""#,
                "line 4, column 1 (`secert`)",
            ),
            // A syntax error on the secret's line.
            (
                r#"secret = "whsec_TOPSECRET" junk"#,
                "line 4, column 28 (`secret`)",
            ),
            // The right key with the wrong type: serde quotes the value (escapes and all).
            (
                r#"secrets = "whsec_TOP\"SECRET""#,
                "line 4, column 11 (`secrets`)",
            ),
        ] {
            let msg = problems(&format!("{head}{line}\n"));
            assert!(!msg.contains("whsec") && !msg.contains("TOP"), "{msg}");
            assert!(msg.contains(place), "{place}: {msg}");
        }
        assert_eq!(
            without_quoted_strings(r#"invalid type: string "a\"b", expected a sequence"#),
            "invalid type: a string, expected a sequence"
        );
    }
}
