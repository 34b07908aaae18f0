//! Test configs written a table at a time: `[server]` on free loopback ports, `[storage]`, then
//! the endpoints and whatever else a test adds, so that a test file spells only what its
//! config has of its own. (`base_config` stays the contract tests' fixed text: some tests read
//! its line numbers in messages.)

use std::path::Path;

use super::signing::PAGARME_SECRET;

/// A config's text, built up; [`ConfigText::text`] writes it out.
pub struct ConfigText {
    admin: &'static str,
    server: String,
    storage: String,
    rest: String,
}

/// A config on the SQLite file `db`, both listeners on free loopback ports.
pub fn sqlite_config(db: &Path) -> ConfigText {
    storage_config(&format!("path = \"{}\"", db.display()))
}

/// A config whose `[storage]` table says `keys` (PostgreSQL's `url = "..."`, say), both
/// listeners on free loopback ports.
pub fn storage_config(keys: &str) -> ConfigText {
    ConfigText {
        admin: "127.0.0.1:0",
        server: String::new(),
        storage: format!("{keys}\n"),
        rest: String::new(),
    }
}

impl ConfigText {
    /// More `[server]` keys.
    pub fn server(mut self, keys: &str) -> Self {
        self.server.push_str(keys);
        self.server.push('\n');
        self
    }

    /// No admin listener (`admin_listen = "off"`).
    pub fn without_admin(mut self) -> Self {
        self.admin = "off";
        self
    }

    /// More `[storage]` keys.
    pub fn storage(mut self, keys: &str) -> Self {
        self.storage.push_str(keys);
        self.storage.push('\n');
        self
    }

    /// An `[[endpoint]]` at `path` with `provider`, and `keys` (its secret, forward, ...).
    pub fn endpoint(mut self, path: &str, provider: &str, keys: &str) -> Self {
        self.rest.push_str(&format!(
            "[[endpoint]]\npath = \"{path}\"\nprovider = \"{provider}\"\n{keys}\n\n"
        ));
        self
    }

    /// The pagarme endpoint with its test secret, and `keys`.
    pub fn pagarme(self, keys: &str) -> Self {
        self.endpoint(
            "/webhooks/pagarme",
            "pagarme",
            &format!("secret = \"{PAGARME_SECRET}\"\n{keys}"),
        )
    }

    /// Text after all that: more keys of the last endpoint, or tables of their own.
    pub fn then(mut self, text: &str) -> Self {
        self.rest.push_str(text);
        self.rest.push('\n');
        self
    }

    pub fn text(&self) -> String {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"{}\"\n{}\n[storage]\n{}\n{}",
            self.admin, self.server, self.storage, self.rest
        )
    }
}
