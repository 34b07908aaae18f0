//! Where validation reads an environment variable (`secret_env`, `[status] token_env`,
//! `[storage] url_env`): `Validator::var` (`validator.rs`), the one way it does. `serve` takes the variables
//! the config read secrets from out of its environment once it has read them
//! (the `hardening` module), and keeps their values in an [`EnvAtStart`]; a reload reads a
//! variable from there once the environment no longer has it. A running process's environment
//! cannot change from outside, so a reload sees the values it would have read anyway.

use std::collections::HashMap;
use std::fmt;

/// The values of the variables `serve` took out of its environment at start, by name. Its
/// `Debug` shows the names only.
#[derive(Clone, Default)]
pub struct EnvAtStart(HashMap<String, String>);

impl EnvAtStart {
    pub fn new(taken: impl IntoIterator<Item = (String, String)>) -> EnvAtStart {
        EnvAtStart(taken.into_iter().collect())
    }

    /// How many variables were taken.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for EnvAtStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_tuple("EnvAtStart").field(&names).finish()
    }
}

impl EnvAtStart {
    /// The value taken of variable `name`, if it was.
    pub(super) fn get(&self, name: &str) -> Option<&String> {
        self.0.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Secrets, Source};

    #[test]
    fn a_variable_taken_at_start_is_read_from_what_was_kept_and_never_shown() {
        let text = "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/g\"\n\
                    provider = \"github\"\nsecret_env = \"PORTARIA_TEST_TAKEN_AT_START\"\n";
        let source = Source::File("/tmp/p.toml".into());
        let missing = Config::parse(text, source.clone()).unwrap_err().to_string();
        assert!(
            missing.contains("PORTARIA_TEST_TAKEN_AT_START is not set"),
            "{missing}"
        );
        let kept = EnvAtStart::new([(
            "PORTARIA_TEST_TAKEN_AT_START".to_string(),
            "kept-secret-value".to_string(),
        )]);
        let config = Config::parse_keeping(text, source, Secrets::Load, &kept).unwrap();
        assert_eq!(config.secret_variables, ["PORTARIA_TEST_TAKEN_AT_START"]);
        let shown = format!("{kept:?}");
        assert!(shown.contains("PORTARIA_TEST_TAKEN_AT_START"), "{shown}");
        assert!(!shown.contains("kept-secret-value"), "{shown}");
    }
}
