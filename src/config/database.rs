//! `[storage] url` / `url_env` / `url_file`: the PostgreSQL backend's connection URL
//! ([`DatabaseUrl`], redacted in `Debug`), how it is given (a password only from the
//! environment or a file, never in the config in clear), and its TLS keys (`sslmode`,
//! `sslrootcert`, or `[storage] ca_file`: `database_tls`), taken out of the text here since
//! the client knows `sslmode` only up to `require`. `path` (SQLite) and a URL are exclusive.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use super::database_tls::{DatabaseTls, SslMode, on_this_machine};
use super::raw::RawStorage;
use super::validator::Validator;

/// A PostgreSQL connection string (a `postgres://` URL or `key=value` pairs), validated, and
/// how its connections use TLS. It may hold a password, so `Debug` shows none of it and no
/// message quotes it.
#[derive(Clone)]
pub struct DatabaseUrl {
    /// As given: what a reload compares.
    text: String,
    /// What the client is given: the text without the TLS keys, `sslmode` set from `tls`.
    settings: tokio_postgres::Config,
    pub tls: DatabaseTls,
}

impl PartialEq for DatabaseUrl {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.tls == other.tls
    }
}

impl Eq for DatabaseUrl {}

impl DatabaseUrl {
    /// The client's settings (password included): only for the store, which connects.
    pub fn settings(&self) -> tokio_postgres::Config {
        self.settings.clone()
    }

    /// The rustls configuration of its connections; None: no TLS (`sslmode=disable`).
    pub fn tls_client(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.tls.client()
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
    }
}

/// The TLS keys portaria reads itself, taken out of a connection string.
#[derive(Debug, Default, PartialEq)]
struct TlsKeys {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

/// `text` without `sslmode` and `sslrootcert` (in either form), and their values. Err: an
/// `ssl*` key the client does not know either (client certificates, CRLs, ...), named, or
/// (None) a text that does not split into keys and values.
fn take_tls_keys(text: &str) -> Result<(String, TlsKeys), Option<String>> {
    let mut keys = TlsKeys::default();
    let mut take = |key: &str, value: String| -> Result<bool, Option<String>> {
        match key {
            "sslmode" => keys.sslmode = Some(value),
            "sslrootcert" => keys.sslrootcert = Some(value),
            // The client's own: `sslnegotiation`.
            "sslnegotiation" => return Ok(false),
            other if other.starts_with("ssl") => {
                return Err(Some(format!(
                    "{other} is not supported (portaria reads sslmode and sslrootcert; no \
                     client certificate)"
                )));
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    let url = ["postgres://", "postgresql://"]
        .iter()
        .any(|prefix| text.starts_with(prefix));
    // As the client reads a URL: the credentials end at the first `@`, the query starts at
    // the first `?` after them.
    let query_at = text.find('@').map_or(0, |at| at + 1);
    let query_at = text[query_at..].find('?').map(|q| query_at + q);
    let rest = if let (true, Some(at)) = (url, query_at) {
        let (head, query) = (&text[..at], &text[at + 1..]);
        let mut kept = Vec::new();
        for part in query.split('&') {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let (key, value) = (percent_decode(key).ok_or(None)?, percent_decode(value));
            if !take(&key, value.ok_or(None)?)? {
                kept.push(part);
            }
        }
        if kept.is_empty() {
            head.to_string()
        } else {
            format!("{head}?{}", kept.join("&"))
        }
    } else if url {
        text.to_string()
    } else {
        let mut kept = Vec::new();
        for (key, value) in key_values(text).ok_or(None)? {
            if !take(&key, value.clone())? {
                let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                kept.push(format!("{key}='{quoted}'"));
            }
        }
        kept.join(" ")
    };
    Ok((rest, keys))
}

/// `%XX` escapes decoded, as the client decodes a URL's parts (`+` stays `+`).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The pairs of a `key=value` connection string, read as the client reads them (spaces
/// around `=`, values in `'...'`, `\` escaping the next character); None if it does not read.
fn key_values(text: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            return chars.peek().is_none().then_some(pairs);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        loop {
            match chars.peek() {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => {
                    chars.next();
                    break;
                }
                Some(c) if !quoted && c.is_whitespace() => break,
                Some(_) => {}
            }
            match chars.next() {
                Some('\\') => value.extend(chars.next()),
                Some(c) => value.push(c),
                None => break,
            }
        }
        pairs.push((key, value));
    }
}

impl Validator<'_> {
    /// The PostgreSQL URL of `[storage]`, if one is given (None also after a problem).
    pub(super) fn database_url(&mut self, raw: &RawStorage) -> Option<DatabaseUrl> {
        let given = [
            raw.url.is_some(),
            raw.url_env.is_some(),
            raw.url_file.is_some(),
        ];
        match given.iter().filter(|g| **g).count() {
            0 => {
                if raw.ca_file.is_some() {
                    self.problem(
                        "storage.ca_file: is for a PostgreSQL database's certificate; set \
                         url, url_env or url_file, or leave it out",
                    );
                }
                return None;
            }
            1 => {}
            _ => {
                self.problem("storage: set one of url, url_env, url_file, not more");
                return None;
            }
        }
        if raw.path.is_some() {
            self.problem(
                "storage: path (SQLite) and url/url_env/url_file (PostgreSQL) are mutually \
                 exclusive; set one",
            );
            return None;
        }
        let (key, text) = if let Some(url) = &raw.url {
            ("storage.url", url.clone())
        } else if let Some(var) = &raw.url_env {
            self.secret_variables.push(var.clone());
            match self.var(var) {
                Some(value) => ("storage.url_env", value),
                None => {
                    self.problem(format!(
                        "storage.url_env: environment variable {var} is not set"
                    ));
                    return None;
                }
            }
        } else {
            let file = raw.url_file.as_deref().unwrap_or(Path::new(""));
            let path = self.resolve(file);
            match std::fs::read_to_string(&path) {
                Ok(text) => ("storage.url_file", text),
                Err(e) => {
                    self.problem(format!(
                        "storage.url_file: cannot read {}: {e}",
                        path.display()
                    ));
                    return None;
                }
            }
        };
        let text = text.trim().to_string();
        let not_a_url = format!(
            "{key}: not a PostgreSQL connection URL like postgres://portaria@127.0.0.1/portaria"
        );
        // The parser's own message may quote the text: it is not repeated here.
        let (rest, tls_keys) = match take_tls_keys(&text) {
            Ok(split) => split,
            Err(Some(why)) => {
                self.problem(format!("{key}: {why}"));
                return None;
            }
            Err(None) => {
                self.problem(not_a_url);
                return None;
            }
        };
        let mut settings = match tokio_postgres::Config::from_str(&rest) {
            Ok(parsed) if !text.is_empty() => parsed,
            _ => {
                self.problem(not_a_url);
                return None;
            }
        };
        if key == "storage.url" && settings.get_password().is_some() {
            self.problem(
                "storage.url: holds a password; a password may come only from the environment \
                 (url_env) or a file (url_file), never from the config in clear",
            );
            return None;
        }
        let mode = match tls_keys.sslmode.as_deref() {
            None => SslMode::default_for(&settings),
            Some(word) => match SslMode::parse(word) {
                Some(mode) => mode,
                None => {
                    self.problem(format!(
                        "{key}: sslmode must be disable, prefer, require, verify-ca or \
                         verify-full"
                    ));
                    return None;
                }
            },
        };
        let ca = match (&tls_keys.sslrootcert, &raw.ca_file) {
            (Some(_), Some(_)) => {
                self.problem(
                    "storage: the CA is given twice (sslrootcert in the URL and ca_file); set one",
                );
                return None;
            }
            (Some(file), None) if file == "system" => {
                self.problem(format!(
                    "{key}: sslrootcert=system is not supported; give the CA's file \
                     (sslrootcert=/path/ca.pem, or [storage] ca_file)"
                ));
                return None;
            }
            (Some(file), None) => {
                Some((format!("{key}: sslrootcert"), self.resolve(Path::new(file))))
            }
            (None, Some(file)) => Some(("storage.ca_file".to_string(), self.resolve(file))),
            (None, None) => None,
        };
        let tls = match DatabaseTls::load(mode, ca.as_ref().map(|(k, p)| (k.as_str(), p.clone()))) {
            Ok(tls) => tls,
            // A problem with the CA names its key and file.
            Err(why) if ca.is_some() => {
                self.problem(why);
                return None;
            }
            Err(why) => {
                let implied = if tls_keys.sslmode.is_none() {
                    " (the default for a database that is not on this machine; sslmode=require \
                     encrypts without verifying, sslmode=disable is plain, for a network you \
                     trust)"
                } else {
                    ""
                };
                self.problem(format!("{key}: {why}{implied}"));
                return None;
            }
        };
        if matches!(mode, SslMode::Prefer | SslMode::Require)
            && ca.is_none()
            && !on_this_machine(&settings)
        {
            let plain = if mode == SslMode::Prefer {
                ", and prefer goes on in plain text when the server offers no TLS"
            } else {
                ""
            };
            self.warnings.push(format!(
                "{key}: sslmode={} without a CA, to a database that is not on this machine: the \
                 connection is encrypted but nobody checks who answers, so anyone on the way to \
                 it can pose as the database and read every webhook{plain}; give the CA \
                 ([storage] ca_file or sslrootcert) and use sslmode=verify-full",
                mode.word()
            ));
        }
        settings.ssl_mode(mode.wire());
        Some(DatabaseUrl {
            text,
            settings,
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{MINIMAL, parse, problems};

    fn storage(lines: &str) -> String {
        format!("[storage]\n{lines}\n{MINIMAL}")
    }

    #[test]
    fn a_url_without_a_password_is_taken_and_never_shown() {
        let config = parse(&storage("url = \"postgres://portaria@127.0.0.1/portaria\"")).unwrap();
        let url = config.storage.postgres.as_ref().unwrap();
        assert_eq!(url.settings().get_user(), Some("portaria"));
        assert_eq!(url.settings().get_dbname(), Some("portaria"));
        assert_eq!(format!("{url:?}"), "DatabaseUrl(<redacted>)");
        assert!(!format!("{:?}", config.storage).contains("127.0.0.1"));
        assert_eq!(config.storage.path, std::path::PathBuf::new());
    }

    #[test]
    fn a_password_in_clear_is_refused_in_either_form_without_quoting_it() {
        for url in [
            "postgres://portaria:hunter2-pw@127.0.0.1/portaria",
            "host=127.0.0.1 user=portaria password=hunter2-pw",
        ] {
            let msg = problems(&storage(&format!("url = \"{url}\"")));
            assert!(msg.contains("storage.url: holds a password"), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }

    #[test]
    fn the_url_may_come_from_a_file_and_its_problems_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("url");
        // (A host off this machine is verify-full by default: here plain, said explicitly.)
        std::fs::write(
            &file,
            "postgres://portaria:pw-in-file@db.lan/portaria?sslmode=disable\n",
        )
        .unwrap();
        let config = parse(&storage(&format!("url_file = \"{}\"", file.display()))).unwrap();
        let settings = config.storage.postgres.unwrap().settings();
        assert_eq!(settings.get_password(), Some(&b"pw-in-file"[..]));
        assert_eq!(
            settings.get_hosts(),
            [tokio_postgres::config::Host::Tcp("db.lan".into())]
        );
        let msg = problems(&storage("url_env = \"PORTARIA_TEST_NEVER_SET_URL\""));
        assert!(
            msg.contains("storage.url_env: environment variable PORTARIA_TEST_NEVER_SET_URL"),
            "{msg}"
        );
        let msg = problems(&storage("url = \"postgres://a@b/c\"\nurl_env = \"X\""));
        assert!(msg.contains("set one of url, url_env, url_file"), "{msg}");
        std::fs::write(&file, "not a url at all = = =\n").unwrap();
        let msg = problems(&storage(&format!("url_file = \"{}\"", file.display())));
        assert!(
            msg.contains("storage.url_file: not a PostgreSQL connection URL"),
            "{msg}"
        );
        assert!(!msg.contains("at all"), "{msg}");
    }

    use super::{TlsKeys, take_tls_keys};

    fn keys(sslmode: Option<&str>, sslrootcert: Option<&str>) -> TlsKeys {
        TlsKeys {
            sslmode: sslmode.map(str::to_string),
            sslrootcert: sslrootcert.map(str::to_string),
        }
    }

    #[test]
    fn the_tls_keys_are_taken_out_of_either_form_and_the_rest_kept() {
        assert_eq!(
            take_tls_keys(
                "postgres://u:p%3Fw@db.lan:5433/d?application_name=a&sslmode=verify-full\
                 &sslrootcert=%2Fetc%2Fdb%20ca.pem&sslnegotiation=postgres"
            )
            .unwrap(),
            (
                "postgres://u:p%3Fw@db.lan:5433/d?application_name=a&sslnegotiation=postgres"
                    .to_string(),
                keys(Some("verify-full"), Some("/etc/db ca.pem"))
            )
        );
        // A `?` in the password is not the query's start.
        assert_eq!(
            take_tls_keys("postgresql://u:a?b@h/d?sslmode=require").unwrap(),
            (
                "postgresql://u:a?b@h/d".to_string(),
                keys(Some("require"), None)
            )
        );
        assert_eq!(
            take_tls_keys("postgres://u@h/d").unwrap(),
            ("postgres://u@h/d".to_string(), keys(None, None))
        );
        assert_eq!(
            take_tls_keys(
                "host=db.lan user = u password='it\\'s a pw' sslmode=verify-ca \
                 sslrootcert='/a b/ca.pem'"
            )
            .unwrap(),
            (
                "host='db.lan' user='u' password='it\\'s a pw'".to_string(),
                keys(Some("verify-ca"), Some("/a b/ca.pem"))
            )
        );
        // What is kept still means the same to the client.
        let (rest, _) = take_tls_keys("host=h password='it\\'s \\\\ pw' sslmode=disable").unwrap();
        let parsed: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"it's \\ pw"[..]));
        for (text, key) in [
            ("postgres://u@h/d?sslcert=/c.pem", "sslcert"),
            ("host=h sslkey=/k.pem", "sslkey"),
        ] {
            let why = take_tls_keys(text).unwrap_err().unwrap();
            assert!(why.starts_with(&format!("{key} is not supported")), "{why}");
        }
        assert_eq!(take_tls_keys("host=h password='open"), Err(None));
        assert_eq!(take_tls_keys("host h"), Err(None));
    }

    #[test]
    fn tls_problems_are_named_without_quoting_the_url() {
        for (lines, said) in [
            (
                "url = \"postgres://u@db.lan/d?sslmode=sometimes\"",
                "storage.url: sslmode must be disable, prefer",
            ),
            (
                "url = \"postgres://u@db.lan/d?sslcert=/secret/c.pem\"",
                "storage.url: sslcert is not supported",
            ),
            (
                "url = \"postgres://u@db.lan/d?sslrootcert=system\"",
                "sslrootcert=system is not supported",
            ),
            (
                "ca_file = \"/etc/ca.pem\"",
                "storage.ca_file: is for a PostgreSQL database's certificate",
            ),
            (
                "url = \"postgres://u@db.lan/d?sslrootcert=/a.pem\"\nca_file = \"/b.pem\"",
                "the CA is given twice",
            ),
        ] {
            let msg = problems(&storage(lines));
            assert!(msg.contains(said), "{lines}: {msg}");
            assert!(!msg.contains("u@db.lan"), "{msg}");
        }
    }
}
