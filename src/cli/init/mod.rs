//! `portaria init`: a first config from a few answers (or flags), written where `check` and
//! `serve` will find it, and the next three commands to run.
//!
//! It asks for what its flags do not give: where to write (`./portaria.toml`, which the
//! lookup reads from the current directory; `/etc/portaria/portaria.toml`, the packaged
//! service's, offered instead where the package is installed and this user may write there),
//! the gateway, where its secret comes from (an environment variable, a file, a systemd
//! credential, or the file itself) and where events go (a command, a local URL, or nowhere).
//! Answers are lines of stdin, so a script can pipe them in; at the end of stdin a question
//! with a default takes it, one without is an error naming its flag. What it writes is
//! validated first (everything but the secret's value, which may not be set yet), and an
//! existing file is never replaced without `--force`. Its sentences are in `text`, in
//! English or Brazilian Portuguese; what the answers are, in `answers`; the next steps it
//! prints, in `next`.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

mod answers;
mod next;
mod text;

use crate::config::{Config, HERE_FILE, Secrets, Source};
use crate::verify::{PROVIDERS, Settings, Verifier};
use answers::{Answers, SYSTEM_DIR, SecretFrom, Target};
use next::next_steps;
use text::{Text, text};

/// The packaged service's database (its `StateDirectory=`).
const SYSTEM_DB: &str = "/var/lib/portaria/portaria.db";

/// Wrong answers to one question before `init` gives up.
const TRIES: usize = 3;

#[derive(Args, Debug)]
pub(super) struct InitArgs {
    /// Where to write it (else --config; else asked, offering ./portaria.toml, which a plain
    /// `check` and `serve` in this folder read, or /etc/portaria/portaria.toml where the
    /// package is installed).
    path: Option<PathBuf>,
    /// The gateway that sends the webhooks, e.g. pagarme, mercadopago, stripe.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// Its secret comes from this environment variable.
    #[arg(long, value_name = "VAR", group = "secret")]
    secret_env: Option<String>,
    /// Its secret is in this file (one secret per line).
    #[arg(long, value_name = "FILE", group = "secret")]
    secret_file: Option<PathBuf>,
    /// Its secret is this systemd credential (LoadCredential=NAME:FILE in the unit).
    #[arg(long, value_name = "NAME", group = "secret")]
    secret_credential: Option<String>,
    /// Its secret goes into the config file itself, read from the first line of stdin (never
    /// from the command line, where `ps` shows it).
    #[arg(long, group = "secret")]
    secret_inline: bool,
    /// Run this command for each event (the program and its arguments, split at spaces).
    #[arg(long, value_name = "COMMAND", group = "target")]
    forward_command: Option<String>,
    /// POST each event to this local http:// URL.
    #[arg(long, value_name = "URL", group = "target")]
    forward_url: Option<String>,
    /// Forward nothing: events wait for `portaria events list`.
    #[arg(long, group = "target")]
    no_forward: bool,
    /// Replace the file if it exists.
    #[arg(long)]
    force: bool,
}

/// `config`: the global `--config`, where to write when no PATH is given.
pub(super) fn run(config: Option<&Path>, args: InitArgs) -> Result<ExitCode, String> {
    let t = text();
    let stdin = std::io::stdin();
    let mut ask = Prompt {
        input: stdin.lock(),
        t,
    };
    // The first line of stdin, before any question reads one.
    let inline = match args.secret_inline {
        true => Some(ask.secret(None)?),
        false => None,
    };
    let path = match args.path.as_deref().or(config) {
        Some(path) => path.to_path_buf(),
        None => {
            let offered = offered_path(Path::new(SYSTEM_DIR), is_root(), writable_dir(SYSTEM_DIR));
            PathBuf::from(ask.line(t.ask_path, Some(&offered.display().to_string()), "PATH")?)
        }
    };
    if path.exists() && !args.force {
        return Err(t.exists.replace("{path}", &path.display().to_string()));
    }
    let absolute = absolute(&path);
    let system = absolute.parent() == Some(Path::new(SYSTEM_DIR));
    let provider = match &args.provider {
        Some(name) => supported(name, t)?,
        None => ask.provider()?,
    };
    let secret = match (&args.secret_env, &args.secret_file, &args.secret_credential) {
        (Some(var), _, _) => SecretFrom::Env(var.clone()),
        (_, Some(file), _) => SecretFrom::File(file.display().to_string()),
        (_, _, Some(name)) => SecretFrom::Credential(name.clone()),
        _ => match inline {
            Some(secret) => SecretFrom::Inline(secret),
            None => ask.secret_from(&provider, system)?,
        },
    };
    let target = match (&args.forward_command, &args.forward_url) {
        (Some(command), _) => Target::Command(split(command)),
        (_, Some(url)) => Target::Url(url.clone()),
        _ if args.no_forward => Target::Nowhere,
        _ => ask.target()?,
    };
    let answers = Answers {
        provider,
        secret,
        target,
        system,
    };
    let config = render(&answers);
    // Validated as `check` will read it, but for the secret itself, which may not be set yet.
    Config::parse_with(&config, Source::File(absolute.clone()), Secrets::Skip)
        .map_err(|e| t.invalid.replace("{problems}", &e.to_string()))?;
    write(&path, &config, args.force, system)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("{}", t.wrote.replace("{path}", &path.display().to_string()));
    println!("{} /webhooks/{}", t.gateway_url, answers.provider);
    println!();
    println!("{}", t.next);
    for (n, (command, why)) in next_steps(&answers, &absolute, t).iter().enumerate() {
        println!("  {}. {command}", n + 1);
        println!("     # {why}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The questions, read from stdin one line each.
struct Prompt<R> {
    input: R,
    t: &'static Text,
}

impl<R: BufRead> Prompt<R> {
    /// One answer: the line typed, the default for an empty line or the end of stdin; with no
    /// default, the end of stdin is an error that names the flag to use instead.
    fn line(
        &mut self,
        question: &str,
        default: Option<&str>,
        flag: &str,
    ) -> Result<String, String> {
        match default.filter(|d| !d.is_empty()) {
            Some(d) => print!("{question} [{d}]: "),
            None => print!("{question}: "),
        }
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let read = self.input.read_line(&mut line).unwrap_or(0);
        if read == 0 {
            println!();
            return default.map(str::to_string).ok_or_else(|| {
                self.t
                    .no_answer
                    .replace("{question}", question)
                    .replace("{flag}", flag)
            });
        }
        let answer = line.trim();
        Ok(match (answer.is_empty(), default) {
            (true, Some(d)) => d.to_string(),
            _ => answer.to_string(),
        })
    }

    fn provider(&mut self) -> Result<String, String> {
        let known = PROVIDERS.join(", ");
        let question = self.t.ask_provider.replace("{known}", &known);
        let mut why = String::new();
        for _ in 0..TRIES {
            let name = self.line(&question, None, "--provider")?;
            match supported(&name, self.t) {
                Ok(name) => return Ok(name),
                Err(e) => {
                    println!("{e}");
                    why = e;
                }
            }
        }
        Err(why)
    }

    fn secret_from(&mut self, provider: &str, system: bool) -> Result<SecretFrom, String> {
        let mut question = self.t.ask_secret_source.to_string();
        for (n, choice) in self.t.secret_choices.iter().enumerate() {
            question.push_str(&format!("\n  {}) {choice}", n + 1));
        }
        let flags = "--secret-env, --secret-file, --secret-credential or --secret-inline";
        let mut choice = None;
        for _ in 0..TRIES {
            let answer = self.line(&question, Some("1"), flags)?;
            choice = match answer.as_str() {
                "1" | "env" => Some(1),
                "2" | "file" => Some(2),
                "3" | "credential" => Some(3),
                "4" | "inline" => Some(4),
                _ => {
                    println!("{}", self.t.bad_choice);
                    None
                }
            };
            if choice.is_some() {
                break;
            }
        }
        let stem = provider.replace('-', "_");
        Ok(match choice.ok_or(self.t.bad_choice)? {
            1 => {
                let var = format!("{}_WEBHOOK_SECRET", stem.to_ascii_uppercase());
                SecretFrom::Env(self.line(self.t.ask_env, Some(&var), "--secret-env")?)
            }
            2 => {
                let file = if system {
                    format!("{SYSTEM_DIR}/{provider}.secret")
                } else {
                    format!("{provider}.secret")
                };
                SecretFrom::File(self.line(self.t.ask_file, Some(&file), "--secret-file")?)
            }
            3 => SecretFrom::Credential(self.line(
                self.t.ask_credential,
                Some(provider),
                "--secret-credential",
            )?),
            _ => SecretFrom::Inline(self.secret(Some(self.t.ask_inline))?),
        })
    }

    /// A secret, read without echo when stdin is a terminal.
    fn secret(&mut self, question: Option<&str>) -> Result<String, String> {
        if let Some(question) = question {
            print!("{question}: ");
            let _ = std::io::stdout().flush();
        }
        let quiet = Quiet::start();
        let mut line = String::new();
        let read = self.input.read_line(&mut line);
        drop(quiet);
        if question.is_some() {
            println!();
        }
        match read {
            Ok(n) if n > 0 && !line.trim().is_empty() => Ok(line.trim().to_string()),
            _ => Err(self.t.no_inline_secret.to_string()),
        }
    }

    fn target(&mut self) -> Result<Target, String> {
        let answer = self.line(
            self.t.ask_forward,
            Some(""),
            "--forward-command, --forward-url or --no-forward",
        )?;
        Ok(if answer.is_empty() {
            Target::Nowhere
        } else if answer.starts_with("http://") || answer.starts_with("https://") {
            Target::Url(answer)
        } else {
            Target::Command(split(&answer))
        })
    }
}

/// `name` if it is a provider whose endpoint needs nothing but a secret (the others have keys
/// of their own to write by hand: a public URL, a key file, header names, a scheme).
fn supported(name: &str, t: &Text) -> Result<String, String> {
    let name = name.trim().to_ascii_lowercase();
    if !PROVIDERS.contains(&name.as_str()) {
        let hint = crate::suggest::closest(&name, PROVIDERS.iter().copied())
            .map(|known| t.did_you_mean.replace("{name}", known))
            .unwrap_or_default();
        return Err(t
            .unknown_provider
            .replace("{name}", &name)
            .replace("{hint}", &hint));
    }
    if !crate::verify::takes_secret(&name) {
        let why = "a public key";
        return Err(t
            .provider_needs_more
            .replace("{name}", &name)
            .replace("{why}", why));
    }
    match Verifier::without_secrets(&name, &Settings::default(), None) {
        // iugu: the address it sends from, which `init` does not ask for.
        Ok(v) if v.needs_allow_ips().is_some() => Err(t
            .provider_needs_more
            .replace("{name}", &name)
            .replace("{why}", "`allow_ips`")),
        Ok(_) => Ok(name),
        Err(why) => Err(t
            .provider_needs_more
            .replace("{name}", &name)
            .replace("{why}", &why)),
    }
}

/// Where `init` offers to write: the packaged service's file where the package made its
/// directory and this user may write there, else `portaria.toml` here.
fn offered_path(system_dir: &Path, root: bool, writable: bool) -> PathBuf {
    if system_dir.is_dir() && (root || writable) {
        system_dir.join("portaria.toml")
    } else {
        PathBuf::from(HERE_FILE)
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn writable_dir(dir: &str) -> bool {
    let Ok(path) = std::ffi::CString::new(dir) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// A command line split at spaces (a program and its arguments; one with spaces inside an
/// argument is written by hand).
fn split(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_string).collect()
}

/// A TOML basic string: JSON's string escapes are TOML's.
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The config text.
fn render(a: &Answers) -> String {
    let name = &a.provider;
    let secret = match &a.secret {
        SecretFrom::Env(var) => format!("secret_env = {}", quoted(var)),
        SecretFrom::File(file) => format!("secret_file = {}", quoted(file)),
        SecretFrom::Credential(credential) => {
            format!(
                "secret_file = {}",
                quoted(&format!("credential:{credential}"))
            )
        }
        SecretFrom::Inline(value) => format!("secret = {}", quoted(value)),
    };
    let forward = match &a.target {
        Target::Command(argv) => {
            let argv: Vec<String> = argv.iter().map(|arg| quoted(arg)).collect();
            format!(
                "forward = {{ command = [{}], timeout_secs = 30 }}\n",
                argv.join(", ")
            )
        }
        Target::Url(url) => format!("forward = {{ url = {}, timeout_secs = 10 }}\n", quoted(url)),
        Target::Nowhere => "# forward = { command = [\"/usr/local/bin/on-payment\"], timeout_secs = 30 }   # events wait for `portaria events list` until then\n".to_string(),
    };
    let storage = if a.system {
        format!(
            "path = {}   # systemd creates /var/lib/portaria (StateDirectory=)",
            quoted(SYSTEM_DB)
        )
    } else {
        "path = \"portaria.db\"                    # next to this file".to_string()
    };
    format!(
        "# portaria's configuration, written by `portaria init`. Every key is described in\n\
         # config.example.toml and docs/configuration.md; `portaria check` reads this file as\n\
         # `serve` will and lists every problem.\n\
         \n\
         [server]\n\
         listen = \"127.0.0.1:8080\"        # loopback only: the tunnel (cloudflared, ngrok) connects here\n\
         # max_connections = 64           # on a Raspberry Pi: each connection may hold a whole body\n\
         \n\
         [storage]\n\
         {storage}\n\
         retention_days = 30                      # delivered and stored events are pruned after this\n\
         \n\
         # The gateway's webhook URL is your public hostname plus `path`.\n\
         [[endpoint]]\n\
         name = {name_q}\n\
         path = {path_q}\n\
         provider = {name_q}\n\
         {secret}\n\
         {forward}\
         # retry = [\"10s\", \"1m\", \"5m\", \"30m\", \"2h\", \"12h\"]   # the gaps between attempts; then the event is dead\n",
        name_q = quoted(name),
        path_q = quoted(&format!("/webhooks/{name}")),
    )
}

/// Writes the new file: owner-only (it may hold a secret), or for the packaged service
/// root's and readable by the `portaria` group, as the package installs it. A replaced file
/// (`--force`) keeps its owner and mode.
fn write(path: &Path, text: &str, force: bool, system: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let existed = path.exists();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(if system { 0o640 } else { 0o600 });
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    if system
        && !existed
        && is_root()
        && let Some(gid) = group_id("portaria")
    {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    Ok(())
}

/// The id of group `name`, if this machine has it.
fn group_id(name: &str) -> Option<u32> {
    let c_name = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero group is a valid value for getgrnam_r to fill.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf.len()` is the buffer's size.
    let rc = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(entry.gr_gid)
}

fn absolute(path: &Path) -> PathBuf {
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    }
}

/// Echo off on a terminal stdin while a secret is typed; restored when dropped.
struct Quiet {
    saved: Option<libc::termios>,
}

impl Quiet {
    fn start() -> Quiet {
        // SAFETY: an all-zero termios is a valid value for tcgetattr to fill; fd 0 is stdin.
        let mut term: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `term` is a valid termios for the call.
        if unsafe { libc::isatty(0) != 1 || libc::tcgetattr(0, &mut term) != 0 } {
            return Quiet { saved: None };
        }
        let saved = term;
        term.c_lflag &= !libc::ECHO;
        // SAFETY: `term` is a valid termios for the call.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &term) };
        Quiet { saved: Some(saved) }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: `saved` is the termios tcgetattr filled.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::text::EN;
    use super::*;

    #[test]
    fn every_provider_init_offers_makes_a_valid_config() {
        let mut offered = 0;
        for provider in PROVIDERS {
            if supported(provider, &EN).is_err() {
                continue;
            }
            offered += 1;
            for secret in [
                SecretFrom::Env("X_SECRET".into()),
                SecretFrom::File("x.secret".into()),
                SecretFrom::Credential("x".into()),
                SecretFrom::Inline("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            ] {
                for system in [false, true] {
                    let answers = Answers {
                        provider: provider.to_string(),
                        secret: secret.clone(),
                        target: Target::Command(vec!["/bin/true".into()]),
                        system,
                    };
                    let text = render(&answers);
                    let source = Source::File(PathBuf::from("/srv/p/portaria.toml"));
                    if let Err(e) = Config::parse_with(&text, source, Secrets::Skip) {
                        panic!("{provider}: {e}\n{text}");
                    }
                }
            }
        }
        assert!(offered >= 20, "{offered}");
        for needs_more in ["twilio", "cielo", "hmac", "discord", "pagarme-v5"] {
            let why = supported(needs_more, &EN).unwrap_err();
            assert!(why.contains("needs more than a secret"), "{why}");
        }
        let typo = supported("mercadopag", &EN).unwrap_err();
        assert!(typo.contains("did you mean `mercadopago`?"), "{typo}");
    }

    #[test]
    fn values_are_quoted_as_toml_strings() {
        let answers = Answers {
            provider: "stripe".into(),
            secret: SecretFrom::Inline("a\"b\\c".into()),
            target: Target::Command(vec!["/srv/on pay\"ment".into(), "--live".into()]),
            system: false,
        };
        let text = render(&answers);
        let config = Config::parse(&text, Source::File("/srv/p.toml".into())).unwrap();
        let route = &config.endpoints[0].routes[0];
        assert!(matches!(
            &route.forward.target,
            crate::config::Target::Command(argv) if argv == &["/srv/on pay\"ment", "--live"]
        ));
    }

    #[test]
    fn the_packaged_file_is_offered_only_where_it_can_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("portaria");
        assert_eq!(offered_path(&etc, true, true), PathBuf::from(HERE_FILE));
        std::fs::create_dir(&etc).unwrap();
        assert_eq!(offered_path(&etc, true, false), etc.join("portaria.toml"));
        assert_eq!(offered_path(&etc, false, true), etc.join("portaria.toml"));
        assert_eq!(offered_path(&etc, false, false), PathBuf::from(HERE_FILE));
    }

    #[test]
    fn answers_come_from_lines_with_defaults_at_the_end() {
        let mut ask = Prompt {
            input: "stirpe\nstripe\n\n".as_bytes(),
            t: &EN,
        };
        assert_eq!(ask.provider().unwrap(), "stripe");
        assert_eq!(
            ask.secret_from("stripe", false).unwrap(),
            SecretFrom::Env("STRIPE_WEBHOOK_SECRET".into()),
            "an empty line takes the default, and so does the end of the input"
        );
        assert_eq!(ask.target().unwrap(), Target::Nowhere);
        let why = ask.provider().unwrap_err();
        assert!(why.contains("give it as --provider"), "{why}");
        let mut ask = Prompt {
            input: "9\nfile\n/srv/s\nhttp://127.0.0.1:3000/x\n".as_bytes(),
            t: &EN,
        };
        assert_eq!(
            ask.secret_from("pagarme", false).unwrap(),
            SecretFrom::File("/srv/s".into())
        );
        assert_eq!(
            ask.target().unwrap(),
            Target::Url("http://127.0.0.1:3000/x".into())
        );
    }
}
