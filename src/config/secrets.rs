//! Secrets: reading an endpoint's secrets from exactly one of the ways to give them (inline,
//! a list, environment variables, files with one secret per line, which may be systemd
//! credentials: `credentials`), the variables they came from (kept out of forward commands'
//! environment), and the warning for a secret file that others can read. A secret's value
//! never reaches a message. An endpoint without its secret does not load: every way of
//! giving secrets that yields none (`secrets = []` included) is a config error, and the
//! stand-in secret the commands that skip secrets get never verifies a request.

use std::path::Path;

use super::credentials;
use super::raw::{OneOrMany, RawSecret};
use super::validator::Validator;
use super::{Secrets, Source};

/// Stands in for every secret under [`Secrets::Skip`], so that "no secret given" and "not
/// loaded" stay apart. An endpoint's verifier is then built by `Verifier::without_secrets`
/// (a key of whatever form its provider needs); this string itself only reaches a forward's
/// signing key, hence a valid `whsec_` key, which matches no real signature.
pub(super) const PLACEHOLDER_SECRET: &str = "whsec_cG9ydGFyaWE6IHNlY3JldHMgbm90IGxvYWRlZA==";

impl Validator<'_> {
    /// Collects the secrets given by exactly one of the ways to give them.
    pub(super) fn secrets(
        &mut self,
        at: &str,
        raw: RawSecret,
        list: Option<Vec<String>>,
        required: bool,
    ) -> Vec<String> {
        let given = [
            raw.secret.is_some(),
            list.is_some(),
            raw.secret_env.is_some(),
            raw.secret_file.is_some(),
        ];
        match given.iter().filter(|g| **g).count() {
            0 if required => {
                self.problem(format!(
                    "{at}: no secret; set exactly one of secret, secrets, secret_env, secret_file"
                ));
                return Vec::new();
            }
            0 => return Vec::new(),
            1 => {}
            _ => {
                self.problem(format!(
                    "{at}: set exactly one of secret, secrets, secret_env, secret_file"
                ));
                return Vec::new();
            }
        }
        // `secrets = []` and the like: given, yet nothing to verify (or sign) with.
        let empty =
            |many: &Option<OneOrMany>| matches!(many, Some(OneOrMany::Many(v)) if v.is_empty());
        if list.as_ref().is_some_and(Vec::is_empty)
            || empty(&raw.secret_env)
            || empty(&raw.secret_file)
        {
            self.problem(format!(
                "{at}: the list of secrets is empty; give at least one"
            ));
            return Vec::new();
        }
        self.inline_secrets |= raw.secret.is_some() || list.is_some();
        let problems_before = self.problems.len();
        let env_vars = raw.secret_env.map(OneOrMany::into_vec).unwrap_or_default();
        self.secret_variables.extend(env_vars.iter().cloned());
        if self.secrets == Secrets::Skip {
            return vec![PLACEHOLDER_SECRET.to_string()];
        }
        let mut secrets = Vec::new();
        if let Some(s) = raw.secret {
            secrets.push(s);
        }
        secrets.extend(list.unwrap_or_default());
        for var in env_vars {
            match self.var(&var) {
                Some(value) if !value.trim().is_empty() => secrets.push(value.trim().to_string()),
                Some(_) => self.problem(format!(
                    "{at}.secret_env: environment variable {var} is empty"
                )),
                None => self.problem(format!(
                    "{at}.secret_env: environment variable {var} is not set"
                )),
            }
        }
        for file in raw.secret_file.map(OneOrMany::into_vec).unwrap_or_default() {
            let path = match credentials::credential_name(&file) {
                None => self.resolve(Path::new(&file)),
                Some(name) => {
                    let dir = std::env::var_os(credentials::VARIABLE);
                    match name.and_then(|n| credentials::resolve(n, dir.as_deref().map(Path::new)))
                    {
                        Ok(path) => path,
                        Err(why) => {
                            self.problem(format!("{at}.secret_file: {why}"));
                            continue;
                        }
                    }
                }
            };
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    if readable_by_others(&path) {
                        self.warnings.push(format!(
                            "{at}.secret_file: {} is readable by group or others; chmod 600 it",
                            path.display()
                        ));
                    }
                    let before = secrets.len();
                    secrets.extend(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(String::from),
                    );
                    if secrets.len() == before {
                        self.problem(format!("{at}.secret_file: {} is empty", path.display()));
                    }
                }
                Err(e) => self.problem(format!(
                    "{at}.secret_file: cannot read {}: {e}",
                    path.display()
                )),
            }
        }
        if secrets.iter().any(|s| s.is_empty()) {
            self.problem(format!("{at}: a secret is empty"));
        }
        // Whatever the way, no secret means no endpoint: the caller's stand-in secret (used to
        // check the other options) must never end up verifying requests.
        if secrets.is_empty() && self.problems.len() == problems_before {
            self.problem(format!("{at}: no secret could be read"));
        }
        self.weak_secrets(at, &secrets);
        secrets
    }

    /// Warnings, never quoting the value: a secret short enough to guess (whoever guesses it
    /// signs webhooks), and one with whitespace at an end (`secret_env` and `secret_file`
    /// trim theirs; `secret` and `secrets` keep it, as part of the secret).
    fn weak_secrets(&mut self, at: &str, secrets: &[String]) {
        let which = |n: usize| match secrets.len() {
            1 => "the secret".to_string(),
            count => format!("secret {} of {count}", n + 1),
        };
        for (n, secret) in secrets.iter().enumerate() {
            if !secret.is_empty() && secret.len() < MIN_SECRET_BYTES {
                self.warnings.push(format!(
                    "{at}: {} is {} bytes long; a secret shorter than {MIN_SECRET_BYTES} bytes \
                     can be guessed, and whoever guesses it can sign webhooks: use the one the \
                     provider generates, or a random one (openssl rand -hex 32)",
                    which(n),
                    secret.len()
                ));
            }
            if secret.trim() != secret {
                self.warnings.push(format!(
                    "{at}: {} starts or ends with whitespace, which is part of the secret as \
                     written (a copy-paste slip?); remove it unless the provider's secret has \
                     it too",
                    which(n)
                ));
            }
        }
    }
}

/// Below this, `check` and `serve` warn that a secret can be guessed.
pub const MIN_SECRET_BYTES: usize = 16;

impl Validator<'_> {
    /// Warns when the config file holds a secret of its own and others can read it (group or
    /// other bits): `check` says it, and `serve` logs it.
    pub(super) fn warn_if_others_read(&mut self, source: &Source) {
        if let Source::File(path) = source
            && self.inline_secrets
            && readable_by_others(path)
        {
            self.warnings.push(format!(
                "{} holds secrets inline (secret, secrets) and is readable by group or others; \
                 chmod 600 it, or give the secrets by secret_env or secret_file",
                path.display()
            ));
        }
    }
}

#[cfg(unix)]
pub(super) fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
pub(super) fn readable_by_others(_: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{MINIMAL, problems};
    use crate::config::{Config, Secrets, Source};

    #[test]
    fn secrets_must_be_given_exactly_once_and_not_empty() {
        let msg = problems("[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n");
        assert!(msg.contains("no secret"), "{msg}");
        let msg = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"x\"\nsecret_env = \"Y\"\n",
        );
        assert!(msg.contains("exactly one of"), "{msg}");
        let msg = problems("[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"\"\n");
        assert!(msg.contains("endpoint[0] (line 1)"), "{msg}");
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn an_empty_list_of_secrets_is_refused_never_replaced() {
        let head = "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n";
        for given in ["secrets = []", "secret_env = []", "secret_file = []"] {
            let msg = problems(&format!("{head}{given}\n"));
            assert!(
                msg.contains("the list of secrets is empty"),
                "{given}: {msg}"
            );
        }
        // A forward target's signing secret, too.
        let msg = problems(&format!(
            "{MINIMAL}forward = {{ url = \"http://127.0.0.1:9/x\", secret_env = [] }}\n"
        ));
        assert!(
            msg.contains("forward: the list of secrets is empty"),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_environment_variable_is_named() {
        let msg = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret_env = \"PORTARIA_TEST_SURELY_UNSET_VAR\"\n",
        );
        assert!(
            msg.contains("PORTARIA_TEST_SURELY_UNSET_VAR is not set"),
            "{msg}"
        );
    }

    #[test]
    fn secret_files_hold_one_secret_per_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s"), "new\n\nold\n").unwrap();
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"s\"\n";
        let config = Config::parse(text, Source::File(dir.path().join("p.toml"))).unwrap();
        let verifier = &config.endpoints[0].verifier;
        let signed = verifier.sign(b"{}", 0, "d");
        let mut headers = http::HeaderMap::new();
        for (k, v) in &signed {
            headers.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        assert_eq!(
            verifier.verify(&headers, b"{}", 0).unwrap().secret_index(),
            0
        );
        let missing = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"/nonexistent/s\"\n",
        );
        assert!(missing.contains("cannot read /nonexistent/s"), "{missing}");
    }

    #[test]
    fn short_secrets_and_whitespace_at_an_end_are_warnings_that_never_quote_the_secret() {
        let warnings = |secrets: &str| {
            let text = format!("[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\n{secrets}\n");
            let config = Config::parse(&text, Source::Embedded).unwrap();
            config.warnings
        };
        let short = warnings("secret = \"hunter2\"");
        assert_eq!(short.len(), 1, "{short:?}");
        assert!(
            short[0].starts_with("endpoint[0] (line 1): the secret is 7 bytes long; a secret shorter than 16 bytes can be guessed"),
            "{short:?}"
        );
        let spaced = warnings("secrets = [\"0123456789abcdef\", \" 0123456789abcdef\\n\"]");
        assert_eq!(spaced.len(), 1, "{spaced:?}");
        assert!(
            spaced[0].contains("secret 2 of 2 starts or ends with whitespace"),
            "{spaced:?}"
        );
        for warning in short.iter().chain(&spaced) {
            assert!(
                !warning.contains("hunter2") && !warning.contains("0123"),
                "{warning}"
            );
        }
        assert!(warnings("secret = \"0123456789abcdef\"").is_empty());
        // From a file (or the environment), the whitespace is trimmed: only the length is left
        // to warn of.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        std::fs::write(&file, " short\n").unwrap();
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"s\"\n";
        let config = Config::parse(text, Source::File(dir.path().join("p.toml"))).unwrap();
        let from_file: Vec<&String> = config
            .warnings
            .iter()
            .filter(|w| !w.contains("chmod"))
            .collect();
        assert_eq!(from_file.len(), 1, "{from_file:?}");
        assert!(
            from_file[0].contains("the secret is 5 bytes long"),
            "{from_file:?}"
        );
    }

    #[test]
    fn a_secret_file_others_can_read_is_a_warning_not_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "0123456789abcdef\n").unwrap();
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"s\"\n";
        let source = Source::File(dir.path().join("p.toml"));
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = Config::parse(text, source.clone()).unwrap();
        assert!(
            config.warnings[0].contains("chmod 600"),
            "{:?}",
            config.warnings
        );
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::parse(text, source).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_config_holding_secrets_that_others_can_read_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let inline = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret = \"a-long-enough-secret\"\n";
        let listed = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecrets = [\"a-long-enough-secret\"]\n";
        let from_env = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\n\
                        secret_env = \"PORTARIA_TEST_OTHERS_READ\"\n";
        let warnings = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let kept = crate::config::EnvAtStart::new([(
                "PORTARIA_TEST_OTHERS_READ".to_string(),
                "a-long-enough-secret".to_string(),
            )]);
            Config::parse_keeping(text, Source::File(path.clone()), Secrets::Load, &kept)
                .unwrap()
                .warnings
        };
        for text in [inline, listed] {
            for mode in [0o644, 0o640, 0o604] {
                let said = warnings(text, mode);
                assert!(
                    said.iter()
                        .any(|w| w.contains("holds secrets inline") && w.contains("chmod 600")),
                    "{mode:o}: {said:?}"
                );
            }
            assert!(warnings(text, 0o600).is_empty());
        }
        assert!(
            warnings(from_env, 0o644).is_empty(),
            "no secret in the file itself"
        );
    }
}
