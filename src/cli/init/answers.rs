//! What `init` writes a config from: the owner's answers (the gateway, where its secret comes
//! from, where events go, whether it is the packaged service's file). The questions that fill
//! them are `init`'s; the next steps printed from them, `next`'s.

/// The packaged service's config directory.
pub(super) const SYSTEM_DIR: &str = "/etc/portaria";

/// Where the endpoint's secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SecretFrom {
    Env(String),
    File(String),
    Credential(String),
    Inline(String),
}

/// Where its events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Command(Vec<String>),
    Url(String),
    Nowhere,
}

/// Everything the config is written from.
#[derive(Debug)]
pub(super) struct Answers {
    pub(super) provider: String,
    pub(super) secret: SecretFrom,
    pub(super) target: Target,
    /// The packaged service's file: its database in /var/lib/portaria, its commands `sudo`.
    pub(super) system: bool,
}
