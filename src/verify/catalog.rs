//! The provider catalog: every `provider = "..."` name, and the [`Preset`] each one builds.
//!
//! A preset is declarative: a [`Scheme`] (how the signature is read and checked, usually a few
//! builder calls on a generic scheme), the default dedup rule, the event-type header, the
//! replay window, how the secret string becomes key bytes, which request headers carry a
//! credential (redacted before the headers are stored), and what an accepted event is
//! answered with. Each provider's rules live in its own file; this one only lists them.

use std::fmt;

use http::HeaderName;

use super::hmac_scheme::HmacScheme;
use super::{
    DEFAULT_TOLERANCE_SECS, Reply, Request, Secret, Settings, VerifyError, discord, github,
    pagarme, pagarme_v5, plowf, relya, standard_webhooks, stripe,
};
use crate::dedup::DedupRule;

/// Every provider name the config accepts, in the order the README lists them.
pub const PROVIDERS: &[&str] = &[
    // Brazilian gateways.
    "plowf",
    "pagarme",
    "relya",
    // (Brazilian gateways: new names above this line.)
    //
    // SaaS and international gateways.
    "stripe",
    "standard-webhooks",
    "svix",
    "github",
    // (SaaS: new names above this line.)
    //
    // Asymmetric signatures.
    "discord",
    "pagarme-v5",
    // (Asymmetric: new names above this line.)
    //
    // Your own description of a scheme.
    "hmac",
];

/// The providers whose senders sign with a private key: an endpoint of theirs holds the public
/// key (its preset says which setting), never a shared secret.
pub const PUBLIC_KEY_PROVIDERS: &[&str] = &["discord", "pagarme-v5"];

/// Whether an endpoint of `provider` is given a shared secret (an unknown name: yes, so that
/// a missing secret is reported beside the unknown provider).
pub fn takes_secret(provider: &str) -> bool {
    !PUBLIC_KEY_PROVIDERS.contains(&provider)
}

/// The preset of `provider`, or why there is none.
pub(super) fn preset(provider: &str, settings: &Settings<'_>) -> Result<Preset, String> {
    if provider != "hmac" && settings.hmac.is_some() {
        return Err(format!(
            "a `signature` table is only allowed with provider `hmac`, not `{provider}`"
        ));
    }
    for (key, value, owner) in [
        ("public_key", settings.public_key, "discord"),
        ("jwks_file", settings.jwks, "pagarme-v5"),
    ] {
        if value.is_some() && provider != owner {
            return Err(format!(
                "`{key}` is only for provider `{owner}`, not `{provider}`"
            ));
        }
    }
    match provider {
        "plowf" => Ok(plowf::preset()),
        "pagarme" => Ok(pagarme::preset()),
        "relya" => Ok(relya::preset()),
        "stripe" => Ok(stripe::preset()),
        "standard-webhooks" => Ok(standard_webhooks::preset(false)),
        "svix" => Ok(standard_webhooks::preset(true)),
        // (Brazilian gateways: new arms above this line.)
        //
        "github" => Ok(github::preset()),
        // (SaaS: new arms above this line.)
        //
        "discord" => discord::preset(settings.public_key),
        "pagarme-v5" => pagarme_v5::preset(settings.jwks),
        // (Asymmetric: new arms above this line.)
        //
        "hmac" => {
            let options = settings.hmac.ok_or_else(|| {
                "provider `hmac` needs a `signature` table (at least `header = \"...\"`)"
                    .to_string()
            })?;
            Ok(Preset::new(
                "hmac",
                HmacScheme::from_options(options)?,
                DedupRule::BodySha256,
            ))
        }
        other => Err(format!(
            "unknown provider `{other}` (known: {})",
            PROVIDERS.join(", ")
        )),
    }
}

/// How one provider signs. A scheme holds no secret: the keys are passed in.
pub(super) trait Scheme: fmt::Debug + Send + Sync {
    /// The index of the first key that verifies the request. See the module `verify` for the
    /// order of errors.
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<usize, VerifyError>;

    /// What a sender adds to a request for `body`, signed with `key` at `now`, with
    /// `delivery_id` where the scheme carries one. None: it cannot be signed with a shared
    /// secret (an asymmetric scheme).
    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed>;

    /// Whether a timestamp is part of what is signed, so that a tolerance means something.
    fn signs_timestamp(&self) -> bool {
        false
    }

    /// A verified request that is the provider checking the URL, not an event: answered with
    /// this, never stored or forwarded. `key` is the one that verified it.
    fn handshake(&self, _key: &Secret, _request: &Request<'_>) -> Option<Reply> {
        None
    }

    /// An unsigned request the provider sends while a webhook is set up (WooCommerce's
    /// creation ping), answered without being stored, when it carries no signature at all.
    fn unsigned_handshake(&self, _request: &Request<'_>) -> Option<Reply> {
        None
    }
}

/// What a sender adds to a request: headers, and for schemes that sign a query parameter, the
/// query string to append to the URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub query: Option<String>,
}

impl From<Vec<(String, String)>> for Signed {
    fn from(headers: Vec<(String, String)>) -> Self {
        Signed {
            headers,
            query: None,
        }
    }
}

/// How a configured secret string becomes key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyFormat {
    /// The string's UTF-8 bytes, as given (Stripe's `whsec_` too).
    Utf8,
    /// Hex, decoded (Adyen's HMAC key).
    #[allow(dead_code)] // for presets whose key is hex
    Hex,
    /// `whsec_` and base64 (Standard Webhooks, Svix).
    StandardWebhooks,
}

impl KeyFormat {
    pub(super) fn decode(self, secret: &str) -> Result<Vec<u8>, String> {
        match self {
            KeyFormat::Utf8 => Ok(secret.as_bytes().to_vec()),
            KeyFormat::Hex => hex::decode(secret.trim())
                .map_err(|_| "this provider's key is hex (0-9, a-f), and this is not".to_string()),
            KeyFormat::StandardWebhooks => standard_webhooks::decode_secret(secret),
        }
    }
}

/// Everything a provider name stands for.
#[derive(Debug)]
pub(super) struct Preset {
    /// Canonical provider name.
    pub name: &'static str,
    pub scheme: Box<dyn Scheme>,
    pub dedup: DedupRule,
    /// The header naming the event type, if the provider sends one.
    pub event_type_header: Option<&'static str>,
    /// The replay window when `tolerance_secs` is not set, for schemes that sign a timestamp.
    pub tolerance_secs: u64,
    pub key: KeyFormat,
    /// Request headers that hold a credential; redacted (with `Authorization`) before the
    /// event's headers are stored.
    pub credential_headers: Vec<HeaderName>,
    /// The body of the answer to an accepted event, when the provider expects a particular one
    /// (Adyen's `[accepted]`); else `{"received":true}`.
    pub ack: Option<&'static str>,
    /// For a scheme that verifies with the sender's public key, the setting that holds it (the
    /// endpoint's credential; a shared secret is refused). None: a shared secret is required.
    pub public_key_setting: Option<&'static str>,
}

impl Preset {
    pub(super) fn new(name: &'static str, scheme: impl Scheme + 'static, dedup: DedupRule) -> Self {
        Preset {
            name,
            scheme: Box::new(scheme),
            dedup,
            event_type_header: None,
            tolerance_secs: DEFAULT_TOLERANCE_SECS,
            key: KeyFormat::Utf8,
            credential_headers: Vec::new(),
            ack: None,
            public_key_setting: None,
        }
    }

    pub(super) fn event_type_header(mut self, name: &'static str) -> Self {
        self.event_type_header = Some(name);
        self
    }

    pub(super) fn key(mut self, key: KeyFormat) -> Self {
        self.key = key;
        self
    }

    #[allow(dead_code)] // used by presets with a documented window other than 300 s
    pub(super) fn tolerance_secs(mut self, secs: u64) -> Self {
        self.tolerance_secs = secs;
        self
    }

    #[allow(dead_code)] // used by presets that authenticate with a static credential
    pub(super) fn credential_headers(mut self, names: Vec<HeaderName>) -> Self {
        self.credential_headers = names;
        self
    }

    #[allow(dead_code)] // used by presets whose provider expects a particular answer
    pub(super) fn ack(mut self, body: &'static str) -> Self {
        self.ack = Some(body);
        self
    }

    /// For a scheme that verifies with a public key, given in the setting `name`.
    pub(super) fn without_secret(mut self, name: &'static str) -> Self {
        self.public_key_setting = Some(name);
        self
    }
}

/// A header-based dedup rule for a preset.
pub(super) fn header_rule(name: &'static str) -> DedupRule {
    DedupRule::Header(HeaderName::from_static(name))
}

/// A JSON-pointer dedup rule for a preset.
pub(super) fn json_rule(pointer: &str) -> DedupRule {
    DedupRule::JsonPointer(pointer.to_string())
}
