//! The next three commands `portaria init` prints after writing a config: where the secret
//! goes (unless the file holds it), `check`, then `serve` or starting the service, each with
//! what it is for. For the packaged service's file they are `sudo` commands that name it and
//! load its environment file; elsewhere they name the file only when the lookup would not find
//! it from the current directory.

use std::path::{Path, PathBuf};

use super::answers::{Answers, SYSTEM_DIR, SecretFrom};
use super::text::Text;
use crate::config::{SYSTEM_PATH, Source, here_config_path, locate, user_config_path};

/// The next three commands, each with what it is for.
pub(super) fn next_steps(a: &Answers, path: &Path, t: &Text) -> Vec<(String, String)> {
    let endpoint = &a.provider;
    let send = format!(
        "portaria send --endpoint {endpoint} --data '{{\"id\":\"test_1\",\"type\":\"test\"}}'"
    );
    let why_send = t.send.replace("{provider}", endpoint);
    if a.system {
        let env = Path::new(SYSTEM_DIR).join("portaria.env");
        let config = format!("--config {}", path.display());
        let check =
            |prefix: &str, user: &str| format!("sudo {prefix}portaria check{user} {config}");
        let with_env =
            |command: &str| format!("sudo sh -c 'set -a; . {}; {command}'", env.display());
        let start = (
            "sudo systemctl enable portaria && sudo systemctl restart portaria".to_string(),
            t.start.to_string(),
        );
        return match &a.secret {
            SecretFrom::Env(var) => {
                let edit = if env.exists() {
                    format!("sudoedit {}", env.display())
                } else {
                    format!(
                        "sudo install -m 600 /dev/null {env} && sudoedit {env}",
                        env = env.display()
                    )
                };
                vec![
                    (edit, t.put_env_file.replace("{var}", var)),
                    (
                        with_env(&format!("portaria check --user portaria {config}")),
                        t.check.to_string(),
                    ),
                    start,
                ]
            }
            SecretFrom::File(file) => vec![
                (
                    format!(
                        "systemd-ask-password | sudo install -m 600 -o portaria -g portaria /dev/stdin {file}"
                    ),
                    t.put_env.to_string(),
                ),
                (check("", " --user portaria"), t.check.to_string()),
                start,
            ],
            SecretFrom::Credential(name) => {
                let file = format!("{SYSTEM_DIR}/credentials/{name}");
                vec![
                    (
                        format!("systemd-ask-password | sudo install -D -m 600 /dev/stdin {file}"),
                        t.put_credential
                            .replace("{name}", name)
                            .replace("{file}", &file),
                    ),
                    (
                        check(
                            &format!("env CREDENTIALS_DIRECTORY={SYSTEM_DIR}/credentials "),
                            "",
                        ),
                        t.check.to_string(),
                    ),
                    start,
                ]
            }
            SecretFrom::Inline(_) => vec![
                (check("", " --user portaria"), t.check.to_string()),
                start,
                (
                    format!(
                        "sudo portaria {config} send --endpoint {endpoint} --data '{{\"id\":\"test_1\",\"type\":\"test\"}}'"
                    ),
                    why_send,
                ),
            ],
        };
    }
    // Plain commands when the lookup finds the file from here; else they name it.
    let found = locate(
        None,
        std::env::var_os("PORTARIA_CONFIG").map(PathBuf::from),
        here_config_path(),
        user_config_path(),
        Path::new(SYSTEM_PATH),
    );
    let named = match found {
        Source::File(found) if same_file(&found, path) => String::new(),
        _ => format!(" --config {}", path.display()),
    };
    let check = (format!("portaria check{named}"), t.check.to_string());
    let serve = (format!("portaria serve{named}"), t.serve.to_string());
    let send = (
        send.replacen("portaria send", &format!("portaria send{named}"), 1),
        why_send,
    );
    match &a.secret {
        SecretFrom::Env(var) => vec![
            (format!("export {var}='...'"), t.put_env.to_string()),
            check,
            serve,
        ],
        SecretFrom::File(file) => {
            let file = match path.parent() {
                Some(dir) if Path::new(file).is_relative() => dir.join(file),
                _ => PathBuf::from(file),
            };
            vec![
                (
                    format!("(umask 077; cat > {})", file.display()),
                    t.put_file.to_string(),
                ),
                check,
                serve,
            ]
        }
        SecretFrom::Credential(name) => vec![
            (
                "export CREDENTIALS_DIRECTORY=...".to_string(),
                t.put_credential_dir.replace("{name}", name),
            ),
            check,
            serve,
        ],
        SecretFrom::Inline(_) => vec![check, serve, send],
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::init::answers::Target;
    use crate::cli::init::text::EN;

    fn answers(secret: SecretFrom, system: bool) -> Answers {
        Answers {
            provider: "pagarme".into(),
            secret,
            target: Target::Nowhere,
            system,
        }
    }

    #[test]
    fn the_packaged_service_gets_sudo_commands_that_name_its_files() {
        let path = Path::new(SYSTEM_PATH);
        let env = answers(SecretFrom::Env("PAGARME_WEBHOOK_SECRET".into()), true);
        let steps = next_steps(&env, path, &EN);
        assert_eq!(steps.len(), 3);
        assert!(
            steps[0].0.contains("sudoedit /etc/portaria/portaria.env"),
            "{steps:?}"
        );
        assert!(steps[0].1.contains("PAGARME_WEBHOOK_SECRET=<"), "{steps:?}");
        assert_eq!(
            steps[1].0,
            "sudo sh -c 'set -a; . /etc/portaria/portaria.env; portaria check --user portaria \
             --config /etc/portaria/portaria.toml'"
        );
        assert_eq!(
            steps[2].0,
            "sudo systemctl enable portaria && sudo systemctl restart portaria"
        );
        let credential = answers(SecretFrom::Credential("pagarme".into()), true);
        let steps = next_steps(&credential, path, &EN);
        assert!(
            steps[0]
                .1
                .contains("LoadCredential=pagarme:/etc/portaria/credentials/pagarme"),
            "{steps:?}"
        );
        assert!(
            steps[1].0.starts_with(
                "sudo env CREDENTIALS_DIRECTORY=/etc/portaria/credentials portaria check"
            ),
            "{steps:?}"
        );
        let file = answers(
            SecretFrom::File("/etc/portaria/pagarme.secret".into()),
            true,
        );
        let steps = next_steps(&file, path, &EN);
        assert!(
            steps[0]
                .0
                .ends_with("-o portaria -g portaria /dev/stdin /etc/portaria/pagarme.secret"),
            "readable by the service's user only: {steps:?}"
        );
    }

    #[test]
    fn elsewhere_the_file_is_named_when_the_lookup_would_not_find_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("elsewhere.toml");
        std::fs::write(&path, "").unwrap();
        let env = answers(SecretFrom::Env("X".into()), false);
        let steps = next_steps(&env, &path, &EN);
        assert_eq!(steps[0].0, "export X='...'");
        assert_eq!(
            steps[1].0,
            format!("portaria check --config {}", path.display())
        );
        assert_eq!(
            steps[2].0,
            format!("portaria serve --config {}", path.display())
        );
    }
}
