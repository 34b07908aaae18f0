//! Reading the file into the raw types with every mistake found in one pass, not the first.
//!
//! serde's `deny_unknown_fields` stops at the first unknown key, and a value of the wrong type
//! stops the whole file: one typo hid every other problem. So the text is parsed into TOML's
//! own spanned tables first; each table is walked against the keys its raw type takes (asked
//! of serde's derive itself, [`fields_of`], so a key added to `raw` needs no list kept here),
//! and each unknown key is reported with its line and the closest known key, then dropped.
//! A value serde refuses is reported the same way and dropped, and the rest is read again, so
//! the validator still sees every other key and reports its problems in the same run.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::raw::{
    RawAlerts, RawConfig, RawEndpoint, RawForward, RawLog, RawReconcile, RawRoute, RawServer,
    RawStatus, RawStorage, RawTls,
};
use super::toml_error::{line_of, toml_message};
use crate::verify::HmacOptions;

/// More refused values than this in one file is not a file to read further.
const MAX_REFUSED_VALUES: usize = 64;

/// The raw config and the problems found on the way (unknown keys, refused values); or, when
/// the text is not TOML at all or nothing could be read, only the problems.
pub(super) fn read(text: &str) -> Result<(RawConfig, Vec<String>), Vec<String>> {
    let mut root = DeTable::parse(text).map_err(|e| vec![toml_message(text, &e)])?;
    let mut unknown = Vec::new();
    walk(root.get_mut(), Table::Root, "", &mut unknown);
    unknown.sort_unstable_by_key(|u| u.offset);
    let mut problems: Vec<String> = unknown.into_iter().map(|u| u.message(text)).collect();
    for _ in 0..MAX_REFUSED_VALUES {
        let attempt = RawConfig::deserialize(toml::de::Deserializer::from(root.clone()));
        let e = match attempt {
            Ok(raw) => return Ok((raw, problems)),
            Err(e) => e,
        };
        problems.push(toml_message(text, &e));
        // Drop the refused value and read again; a refusal with no place to drop ends here.
        match e.span() {
            Some(span) if drop_at(root.get_mut(), span.start) => {}
            _ => return Err(problems),
        }
    }
    Err(problems)
}

/// Each table of the file, by the raw type it is read into.
#[derive(Clone, Copy)]
enum Table {
    Root,
    Server,
    Tls,
    Storage,
    Endpoint,
    Signature,
    Route,
    Forward,
    Log,
    Alerts,
    Status,
    Reconcile,
}

impl Table {
    /// The keys serde reads for this table.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Table::Root => fields_of::<RawConfig>(),
            Table::Server => fields_of::<RawServer>(),
            Table::Tls => fields_of::<RawTls>(),
            Table::Storage => fields_of::<RawStorage>(),
            Table::Endpoint => fields_of::<RawEndpoint>(),
            Table::Signature => fields_of::<HmacOptions>(),
            Table::Route => fields_of::<RawRoute>(),
            Table::Forward => fields_of::<RawForward>(),
            Table::Log => fields_of::<RawLog>(),
            Table::Alerts => fields_of::<RawAlerts>(),
            Table::Status => fields_of::<RawStatus>(),
            Table::Reconcile => fields_of::<RawReconcile>(),
        }
    }

    /// The table that `key` of this one holds, if it holds one (or an array of them).
    fn child(self, key: &str) -> Option<Table> {
        Some(match (self, key) {
            (Table::Root, "server") => Table::Server,
            (Table::Root, "storage") => Table::Storage,
            (Table::Root, "endpoint") => Table::Endpoint,
            (Table::Root, "log") => Table::Log,
            (Table::Root, "alerts") => Table::Alerts,
            (Table::Root, "status") => Table::Status,
            (Table::Server, "tls") => Table::Tls,
            (Table::Endpoint, "signature") => Table::Signature,
            (Table::Endpoint, "route") => Table::Route,
            (Table::Endpoint, "reconcile") => Table::Reconcile,
            (Table::Endpoint | Table::Route, "forward") => Table::Forward,
            _ => return None,
        })
    }
}

/// An unknown key, where it is.
struct Unknown {
    offset: usize,
    key: String,
    /// `[server]`, `endpoint[0].forward`, ...; empty at the top level.
    table: String,
    known: &'static [&'static str],
}

impl Unknown {
    /// `line 4, column 1 (`secert`): unknown key in endpoint[0]; did you mean `secret`?`, in
    /// the words of [`toml_message`]. A key is a name, safe to show; one that is not a plain
    /// name is not echoed (it could be a pasted secret).
    fn message(&self, text: &str) -> String {
        let plain = self
            .key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        let shown = if plain {
            format!(" (`{}`)", self.key)
        } else {
            String::new()
        };
        let place = if self.table.is_empty() {
            " at the top level".to_string()
        } else {
            format!(" in {}", self.table)
        };
        let line = line_of(text, self.offset);
        let column = text[..self.offset.min(text.len())]
            .rsplit('\n')
            .next()
            .map_or(1, |l| l.chars().count() + 1);
        let known = self.known.iter().copied();
        let hint = match crate::suggest::closest(&self.key, known.clone()) {
            Some(name) if plain => format!("; did you mean `{name}`?"),
            _ => format!(" (known here: {})", crate::suggest::list(known)),
        };
        format!("line {line}, column {column}{shown}: unknown key{place}{hint}")
    }
}

/// Drops every key of `table` that `kind` does not take, noting it in `found`, and walks into
/// the tables it holds.
fn walk(table: &mut DeTable<'_>, kind: Table, at: &str, found: &mut Vec<Unknown>) {
    let known = kind.keys();
    let unknown: Vec<(usize, String)> = table
        .keys()
        .filter(|key| !known.contains(&key.get_ref().as_ref()))
        .map(|key| (key.span().start, key.get_ref().to_string()))
        .collect();
    for (offset, key) in unknown {
        table.remove(key.as_str());
        found.push(Unknown {
            offset,
            key,
            table: at.to_string(),
            known,
        });
    }
    for (key, value) in table.iter_mut() {
        let name: &str = key.get_ref().as_ref();
        let Some(child) = kind.child(name) else {
            continue;
        };
        let here = match kind {
            Table::Root if matches!(child, Table::Endpoint) => name.to_string(),
            Table::Root => format!("[{name}]"),
            Table::Server => format!("[server.{name}]"),
            _ => format!("{at}.{name}"),
        };
        match value.get_mut() {
            DeValue::Table(inner) => walk(inner, child, &here, found),
            DeValue::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let DeValue::Table(inner) = item.get_mut() {
                        walk(inner, child, &format!("{here}[{i}]"), found);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Drops the innermost key whose value holds byte `offset` (where serde refused a value);
/// false if no key does.
fn drop_at(table: &mut DeTable<'_>, offset: usize) -> bool {
    for (_, value) in table.iter_mut() {
        let dropped = match value.get_mut() {
            DeValue::Table(inner) => drop_at(inner, offset),
            DeValue::Array(items) => items.iter_mut().any(|item| match item.get_mut() {
                DeValue::Table(inner) => drop_at(inner, offset),
                _ => false,
            }),
            _ => false,
        };
        if dropped {
            return true;
        }
    }
    let holds = |key: &Spanned<_>, value: &Spanned<DeValue<'_>>| {
        value.span().contains(&offset) || (key.span().start..value.span().end).contains(&offset)
    };
    let Some(key) = table
        .iter()
        .find(|(key, value)| holds(key, value))
        .map(|(key, _)| key.get_ref().to_string())
    else {
        return false;
    };
    table.remove(key.as_str()).is_some()
}

/// The field names serde's derive hands `deserialize_struct` for `T`: the keys of its table,
/// caught by a deserializer that does nothing else.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(Caught(fields)) => fields,
        Ok(_) => &[],
    }
}

struct FieldNames;

#[derive(Debug)]
struct Caught(&'static [&'static str]);

impl std::fmt::Display for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names caught")
    }
}

impl std::error::Error for Caught {}

impl serde::de::Error for Caught {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Caught(&[])
    }
}

impl<'de> serde::Deserializer<'de> for FieldNames {
    type Error = Caught;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Caught> {
        Err(Caught(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Caught> {
        Err(Caught(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{MINIMAL, problems};

    #[test]
    fn the_keys_come_from_the_raw_types_themselves() {
        assert!(Table::Endpoint.keys().contains(&"secret_env"));
        assert!(Table::Root.keys().contains(&"endpoint"), "the renamed name");
        assert!(Table::Signature.keys().contains(&"timestamp_header"));
        assert!(Table::Forward.keys().contains(&"pipe"));
        for table in [
            Table::Root,
            Table::Server,
            Table::Tls,
            Table::Storage,
            Table::Endpoint,
            Table::Signature,
            Table::Route,
            Table::Forward,
            Table::Log,
            Table::Alerts,
            Table::Status,
        ] {
            assert!(!table.keys().is_empty());
        }
    }

    #[test]
    fn every_unknown_key_is_named_with_its_line_and_the_closest_known_one() {
        let text = format!(
            "[server]\nlisen = \"127.0.0.1:1\"\n[storage]\nretention_dys = 3\n{MINIMAL}secert = \"x\"\n\
             forward = {{ comand = [\"/bin/true\"] }}\n[[endpoint.route]]\nname = \"erp\"\nevnts = [\"a\"]\n\
             [log]\nlevle = \"info\"\n"
        );
        let msg = problems(&text);
        for expected in [
            "line 2, column 1 (`lisen`): unknown key in [server]; did you mean `listen`?",
            "line 4, column 1 (`retention_dys`): unknown key in [storage]; did you mean `retention_days`?",
            "line 10, column 1 (`secert`): unknown key in endpoint[0]; did you mean `secret`?",
            "(`comand`): unknown key in endpoint[0].forward; did you mean `command`?",
            "(`evnts`): unknown key in endpoint[0].route[0]; did you mean `events`?",
            "(`levle`): unknown key in [log]; did you mean `level`?",
        ] {
            assert!(msg.contains(expected), "{expected}\n{msg}");
        }
        // What is left is still validated, in the same run.
        assert!(msg.contains("route[0] (line 12).forward: missing"), "{msg}");
    }

    #[test]
    fn a_key_like_nothing_known_lists_what_is_and_a_strange_one_is_not_echoed() {
        let msg = problems(&format!("[server]\nwhatever = 1\n{MINIMAL}"));
        assert!(
            msg.contains("(`whatever`): unknown key in [server] (known here: listen,"),
            "{msg}"
        );
        let msg = problems(&format!("{MINIMAL}\"whsec_TOP SECRET\" = 1\n"));
        assert!(!msg.contains("whsec") && !msg.contains("TOP"), "{msg}");
        assert!(msg.contains("unknown key in endpoint[0]"), "{msg}");
        let msg = problems(&format!("typo = 1\n{MINIMAL}"));
        assert!(msg.contains("unknown key at the top level"), "{msg}");
    }

    #[test]
    fn a_refused_value_does_not_hide_the_problems_after_it() {
        let text = format!(
            "[storage]\nretention_days = \"thirty\"\n[server]\nmax_connections = -1\n{MINIMAL}\
             provider = \"paypal\"\n"
        );
        // A duplicate key is TOML's error: nothing can be read.
        assert!(problems(&text).contains("duplicate key"));
        let text = "[storage]\nretention_days = \"thirty\"\n[server]\nmax_connections = -1\n\
                    [[endpoint]]\npath = \"/a\"\nprovider = \"paypal\"\nsecret = \"x\"\n\
                    retry = [\"1s\", 5]\n";
        let msg = problems(text);
        assert!(
            msg.contains("line 2, column 18 (`retention_days`)"),
            "{msg}"
        );
        assert!(
            msg.contains("line 4, column 19 (`max_connections`)"),
            "{msg}"
        );
        assert!(msg.contains("(`retry`)"), "{msg}");
        assert!(msg.contains("unknown provider `paypal`"), "{msg}");
    }

    #[test]
    fn a_file_that_is_not_toml_says_where() {
        let msg = problems("[server\nlisten = 1\n");
        assert!(msg.contains("line 1"), "{msg}");
    }
}
