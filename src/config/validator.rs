//! What validation carries while it reads the file: the problems and warnings found so far,
//! the secrets it may read, and how far it looks at this machine and its environment. The
//! rules themselves sit beside the part of the file they check (`validate.rs` for the core
//! tables, `readiness.rs` for what `serve` will need of the machine, `tls.rs`, `route.rs`,
//! ...), each an `impl Validator` block; this file is what they all share.

use std::path::PathBuf;

use super::Secrets;
use super::environment::EnvAtStart;

pub(super) struct Validator<'a> {
    pub(super) text: &'a str,
    pub(super) base_dir: Option<PathBuf>,
    pub(super) secrets: Secrets,
    /// Variables `serve` took out of its environment at start (`environment`).
    pub(super) env_at_start: Option<&'a EnvAtStart>,
    /// The one endpoint whose secrets are read although `secrets` skips the others (`send`
    /// and `verify` need only theirs).
    pub(super) secrets_of: Option<&'a str>,
    /// How far to look at this machine beyond the file (`readiness`).
    pub(super) machine: Machine,
    pub(super) problems: Vec<String>,
    pub(super) warnings: Vec<String>,
    pub(super) secret_variables: Vec<String>,
    /// A secret is written in the file itself (`secret`, `secrets`): then nobody else should
    /// be able to read it (`secrets::warn_if_others_read`).
    pub(super) inline_secrets: bool,
}

/// How far validation looks at this machine beyond the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Machine {
    /// Not at all: the commands that only read or replay the database.
    Ignore,
    /// A missing program is a warning: `serve` (and its reloads).
    Warn,
    /// Everything `serve` will need is a problem when missing: `portaria check`.
    Require,
}

impl Validator<'_> {
    pub(super) fn problem(&mut self, msg: impl Into<String>) {
        self.problems.push(msg.into());
    }

    /// The value of environment variable `name`: the environment's, else the one taken out of
    /// it at start; None if neither has it (or it is not UTF-8).
    pub(super) fn var(&self, name: &str) -> Option<String> {
        std::env::var(name)
            .ok()
            .or_else(|| self.env_at_start?.get(name).cloned())
    }
}
