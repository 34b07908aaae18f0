//! `[storage] url` / `url_env` / `url_file`: the PostgreSQL backend's connection URL
//! ([`DatabaseUrl`], redacted in `Debug`), how it is given (a password only from the
//! environment or a file, never in the config in clear).

use std::path::Path;
use std::str::FromStr;

use super::raw::RawStorage;
use super::validate::Validator;

/// A PostgreSQL connection string (a `postgres://` URL or `key=value` pairs). It may hold a
/// password, so `Debug` shows none of it and no message quotes it.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// The connection string itself: only for the store, which hands it to the client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
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
            0 => return None,
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
            match std::env::var(var) {
                Ok(value) => ("storage.url_env", value),
                Err(_) => {
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
        // The parser's own message may quote the text: it is not repeated here.
        let parsed = match tokio_postgres::Config::from_str(&text) {
            Ok(parsed) if !text.is_empty() => parsed,
            _ => {
                self.problem(format!(
                    "{key}: not a PostgreSQL connection URL like postgres://portaria@127.0.0.1/portaria"
                ));
                return None;
            }
        };
        if key == "storage.url" && parsed.get_password().is_some() {
            self.problem(
                "storage.url: holds a password; a password may come only from the environment \
                 (url_env) or a file (url_file), never from the config in clear",
            );
            return None;
        }
        Some(DatabaseUrl(text))
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
        assert_eq!(url.expose(), "postgres://portaria@127.0.0.1/portaria");
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
        std::fs::write(&file, "postgres://portaria:pw-in-file@db.lan/portaria\n").unwrap();
        let config = parse(&storage(&format!("url_file = \"{}\"", file.display()))).unwrap();
        assert_eq!(
            config.storage.postgres.unwrap().expose(),
            "postgres://portaria:pw-in-file@db.lan/portaria"
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
}
