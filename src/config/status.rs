//! `[status]`: the credential of the status page on the admin listener (`token_env`, or
//! `token_file`, which may be a systemd credential `credential:NAME`), and the rule that an
//! admin listener beyond loopback needs one. The token's value never reaches a message.

use std::net::SocketAddr;
use std::path::Path;

use super::raw::RawStatus;
use super::validator::Validator;
use super::{StatusPage, credentials, secrets};
use crate::verify::Secret;

/// Stands in for the token under `Secrets::Skip` (the database commands never serve the page).
const PLACEHOLDER_TOKEN: &[u8] = b"portaria: status token not loaded";

impl Validator<'_> {
    /// Reads the status page's token, and refuses an admin listener off loopback without one:
    /// the page shows every stored event and can replay them.
    pub(super) fn status(&mut self, raw: RawStatus, admin: Option<SocketAddr>) -> StatusPage {
        let token = self.status_token(raw);
        if let Some(addr) = admin.filter(|a| !a.ip().is_loopback())
            && token.is_none()
        {
            self.problem(format!(
                "server.admin_listen: `{addr}` is not loopback, and no status page token is set: \
                 the status page (every stored event, and its replay buttons) would be open to \
                 that network. Set [status] token_env or token_file, or keep admin_listen on 127.0.0.1"
            ));
        }
        StatusPage { token }
    }

    fn status_token(&mut self, raw: RawStatus) -> Option<Secret> {
        let (env, file) = match (raw.token_env, raw.token_file) {
            (None, None) => return None,
            (Some(_), Some(_)) => {
                self.problem("status: set one of token_env, token_file, not both");
                return None;
            }
            pair => pair,
        };
        if let Some(var) = &env {
            self.secret_variables.push(var.clone());
        }
        if self.secrets == super::Secrets::Skip {
            return Some(Secret::new(PLACEHOLDER_TOKEN.to_vec()));
        }
        let value = match (env, file) {
            (Some(var), _) => match self.var(&var) {
                Some(value) => value,
                None => {
                    self.problem(format!(
                        "status.token_env: environment variable {var} is not set"
                    ));
                    return None;
                }
            },
            (None, Some(file)) => self.read_secret_file("status.token_file", &file)?,
            (None, None) => return None,
        };
        let value = value.trim();
        if value.len() < 12 {
            self.problem(
                "status: the token is shorter than 12 characters; a phone on the LAN can try many",
            );
            return None;
        }
        Some(Secret::new(value.as_bytes().to_vec()))
    }

    /// The text of a one-secret file (`token_file`, reconcile's `api_key_file`), which may be
    /// a systemd credential; `key` names it in messages.
    pub(super) fn read_secret_file(&mut self, key: &str, file: &str) -> Option<String> {
        let path = match credentials::credential_name(file) {
            None => self.resolve(Path::new(file)),
            Some(name) => {
                let dir = std::env::var_os(credentials::VARIABLE);
                match name.and_then(|n| credentials::resolve(n, dir.as_deref().map(Path::new))) {
                    Ok(path) => path,
                    Err(why) => {
                        self.problem(format!("{key}: {why}"));
                        return None;
                    }
                }
            }
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                if secrets::readable_by_others(&path) {
                    self.warnings.push(format!(
                        "{key}: {} is readable by group or others; chmod 600 it",
                        path.display()
                    ));
                }
                Some(text)
            }
            Err(e) => {
                self.problem(format!("{key}: cannot read {}: {e}", path.display()));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Source};

    const MINIMAL: &str = "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/g\"\nprovider = \"github\"\nsecret = \"s\"\n";

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Source::Embedded).map_err(|e| e.to_string())
    }

    #[test]
    fn an_admin_listener_off_loopback_needs_a_token() {
        let open = format!("[server]\nadmin_listen = \"0.0.0.0:9464\"\n{MINIMAL}");
        let err = parse(&open).unwrap_err();
        assert!(
            err.contains("is not loopback, and no status page token"),
            "{err}"
        );
        assert!(
            parse(&format!(
                "[server]\nadmin_listen = \"127.0.0.1:9464\"\n{MINIMAL}"
            ))
            .is_ok()
        );
        assert!(
            parse(&format!(
                "[server]\nadmin_listen = \"[::1]:9464\"\n{MINIMAL}"
            ))
            .is_ok()
        );
        assert!(parse(&format!("[server]\nadmin_listen = \"off\"\n{MINIMAL}")).is_ok());
    }

    #[test]
    fn a_token_file_opens_the_lan_and_its_value_stays_out_of_messages() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "correct-horse-battery\n").unwrap();
        let text = format!(
            "[server]\nadmin_listen = \"0.0.0.0:9464\"\n[status]\ntoken_file = \"{}\"\n{MINIMAL}",
            file.display()
        );
        let config = parse(&text).unwrap();
        let token = config.status.token.as_ref().unwrap();
        assert_eq!(token.expose(), b"correct-horse-battery");
        assert!(!format!("{config:?}").contains("correct-horse"));

        std::fs::write(&file, "short\n").unwrap();
        let err = parse(&text).unwrap_err();
        assert!(err.contains("shorter than 12"), "{err}");
        assert!(!err.contains("short\n"));
    }

    #[test]
    fn token_env_and_token_file_are_one_or_the_other() {
        let text = format!("[status]\ntoken_env = \"A\"\ntoken_file = \"/x\"\n{MINIMAL}");
        assert!(parse(&text).unwrap_err().contains("not both"));
        let unset = format!("[status]\ntoken_env = \"PORTARIA_TEST_NEVER_SET_TOKEN\"\n{MINIMAL}");
        assert!(
            parse(&unset)
                .unwrap_err()
                .contains("PORTARIA_TEST_NEVER_SET_TOKEN is not set")
        );
    }
}
