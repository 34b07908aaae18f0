//! Signature verification: one file per provider, the catalog of their names (`catalog.rs`),
//! and the [`Verifier`] in front of them. The generic pieces the providers' files build on:
//! `preset` (what a provider file fills in: its [`preset::Preset`] and the types a scheme speaks in),
//! `secret` (the key bytes and their keyed HMAC states), `hmac_scheme`, `credential` (static
//! credentials), `keyed_list` (a `t=..,v1=..` header), `public_url` (Twilio's and Square's
//! signed URL), `rsa` (RSA public keys for `ring`: Pagar.me v5's, Woovi's), `shape` (what a
//! provider's requests look like besides their signature: Efí's appended `/pix`, Rede's GET
//! probe, where the event type and object id are, [`Field`]) and `patience` (a gateway's
//! documented give-up rule, which its preset carries).
//!
//! A verifier is a pure function of (secrets, request, now). It runs on the raw bytes before
//! anything parses them, compares decoded MAC bytes (or credentials) in constant time, and
//! tries every configured secret, so a key can be rotated without downtime. [`Verified`] can
//! only be built here: holding one is the proof that a request passed. It carries what the
//! scheme signed besides the body: a signed id and a dedup key built from signed material
//! ([`Verified::signed_key`], for [`DedupRule::Signed`]); a body that contradicts them is
//! refused ([`VerifyError::Contradicts`]). A verified request that is the provider checking
//! the URL (Slack's `url_verification`, Zoom's URL validation, Discord's PING, WooCommerce's
//! creation ping) is answered with the preset's [`Reply`], and nothing is stored.
//!
//! Error order, for schemes that sign a timestamp: a timestamp that is not a number is
//! `Malformed` before any MAC is computed; then the MAC is checked; only a request whose MAC
//! matches is told `StaleTimestamp`. Anyone without the secret gets `Mismatch` whatever the
//! timestamp, and a `StaleTimestamp` in the log means a genuine delivery that came late or was
//! replayed (usually clock skew), which is worth telling apart from a forgery.
//!
//! Adding a provider (`tests/it/provider_checklist.rs` checks the steps marked "checked"):
//! 1. (checked) `NAME.rs` here, with its `mod` line above: the scheme (usually a few builder calls on
//!    `hmac_scheme`, `credential` or `keyed_list`) and `preset()`, built from `preset.rs`'s
//!    types, with unit tests on the provider's published vectors (or vectors built from its
//!    documentation, cited). What the signature covers ([`preset::Coverage`]) decides which
//!    dedup rules and event-type fields are signed: declare it truthfully.
//! 2. Its name in `catalog.rs`: `PROVIDERS` (the README's order) and an arm of `preset()`
//!    (`PUBLIC_KEY_PROVIDERS` too when it verifies with a public key, not a secret).
//! 3. Its gateway's give-up rule (`patience.rs`) where documented; else it is said unknown.
//! 4. Credential headers redacted before storage (the preset's `credential_headers`), and its
//!    dedup key from signed bytes only (`docs/guarantees/input.md`).
//! 5. (checked) A row in README.md's provider table and in docs/providers.md (where the secret is,
//!    what is checked, the dedup key, the quirks).
//! 6. (checked) An end-to-end test in `tests/it/` (`providers_br.rs`, `providers_saas.rs`,
//!    `providers_asym.rs`) against the real server, verified by the provider's own library
//!    where one exists (`tests/oracle/`, listed in docs/development.md); `portaria send` signs
//!    for it when the scheme can sign (`Scheme::sign`), else the docs say it cannot.

pub mod adyen;
pub mod asaas;
pub mod calendly;
pub mod catalog;
pub mod cielo;
pub mod credential;
pub mod discord;
pub mod efi;
pub mod github;
pub mod hmac_scheme;
pub mod intercom;
pub mod iugu;
pub mod keyed_list;
pub mod linear;
pub mod mercadopago;
pub mod paddle;
pub mod pagarme;
pub mod pagarme_v5;
pub mod pagbank;
pub mod patience;
pub mod picpay;
pub mod plowf;
mod preset;
pub mod public_url;
pub mod rede;
pub mod relya;
mod rsa;
mod secret;
mod shape;
pub mod shopify;
pub mod slack;
pub mod square;
pub mod standard_webhooks;
pub mod stripe;
pub mod twilio;
pub mod typeform;
pub mod vindi;
pub mod woocommerce;
pub mod woovi;
pub mod zoom;

#[cfg(test)]
mod saas_contract;

use http::{HeaderMap, HeaderName};
use subtle::{Choice, ConstantTimeEq};

use crate::dedup::DedupRule;
pub use catalog::{PROVIDERS, takes_secret};
pub use hmac_scheme::HmacOptions;
pub use patience::Patience;
pub use preset::Field;
use preset::Preset;
pub use preset::{Ack, Carried, Signed};
pub use secret::Secret;

/// The replay window for schemes that sign a timestamp, as in Stripe's and Svix's SDKs.
const DEFAULT_TOLERANCE_SECS: u64 = 300;

/// The key of [`Verifier::without_secrets`].
const PLACEHOLDER_KEY: &[u8] = b"portaria: secrets not loaded";

/// What a verifier may read of a request: all of it, as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub headers: &'a HeaderMap,
    /// The query string as sent, without the `?`, percent-encoding untouched.
    pub query: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// A request with no query string.
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Request {
            headers,
            query: None,
            body,
        }
    }

    pub fn with_query(self, query: Option<&'a str>) -> Self {
        Request { query, ..self }
    }

    /// The values of query parameter `name`, percent-decoded, in order.
    pub fn query_values(&self, name: &str) -> Vec<String> {
        self.query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The direct answer (200) to a request that is a provider checking the URL, not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(value: &serde_json::Value) -> Reply {
        Reply {
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }
}

/// What an endpoint's table says about its provider besides the secrets.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings<'a> {
    /// The `[endpoint.signature]` table, for `provider = "hmac"` only.
    pub hmac: Option<&'a HmacOptions>,
    /// `public_url`: the URL the provider calls, as it calls it (scheme, host, path, and any
    /// query the provider was given), for providers that sign it (Twilio, Square). Behind a
    /// tunnel the local request's host is not it.
    pub public_url: Option<&'a str>,
    /// `credential_headers`: the headers holding a merchant-chosen credential, one secret each
    /// in the same order (Cielo).
    pub credential_headers: Option<&'a [String]>,
    /// `query_param`: the query parameter holding the secret, for providers that put it in
    /// the URL (Vindi's default `token`, Efí's `hmac`).
    pub query_param: Option<&'a str>,
    /// `public_key`: Discord's application public key (hex), for provider `discord`.
    pub public_key: Option<&'a str>,
    /// The text of the JWKS that `jwks_file` names, for provider `pagarme-v5`.
    pub jwks: Option<&'a str>,
    /// The text of `public_key_file` (PEM, or Woovi's public-keys JSON), for provider `woovi`.
    pub public_key_pem: Option<&'a str>,
}

/// Checks requests for one endpoint. Built once from the config; `Debug` shows no secret.
#[derive(Debug)]
pub struct Verifier {
    preset: Preset,
    /// Keys in configured order, already decoded the way the preset wants (the base64 part of
    /// a Standard Webhooks `whsec_` secret, hex for Adyen, the UTF-8 bytes of the string
    /// otherwise). Never empty, except for a scheme that verifies with a public key (which
    /// its preset holds): then always empty.
    keys: Vec<Secret>,
    /// Allowed |now - timestamp|, for schemes that sign a timestamp.
    tolerance_secs: u64,
}

/// Proof that a request's signature checked out. Only this module can build one.
#[derive(Debug)]
pub struct Verified {
    secret_index: usize,
    /// The id of the object the signature covers, where the scheme signs one apart from the
    /// body (Mercado Pago's query `data.id`); None where the scheme signs the whole body (the
    /// body is then the signed fact) or signs no id.
    signed_id: Option<String>,
    /// The dedup key the scheme derived from what it signed, where the signed material is not
    /// simply the body's bytes (see [`Checked::signed_key`]).
    signed_key: Option<String>,
}

/// What a scheme's check established: which key matched, and what of the request its
/// signature covers that a dedup key or a target may rely on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Checked {
    pub(super) index: usize,
    /// See [`Verified::signed_id`].
    pub(super) signed_id: Option<String>,
    /// A key built only from signed material, for the preset's [`DedupRule::Signed`]: Mercado
    /// Pago's manifest (its body is not signed), the Standard Webhooks id of the header family
    /// that verified, Twilio's form parameters in canonical order, Linear's body without its
    /// per-attempt `webhookTimestamp`. None for the schemes that need none.
    pub(super) signed_key: Option<String>,
}

impl From<usize> for Checked {
    fn from(index: usize) -> Self {
        Checked {
            index,
            ..Checked::default()
        }
    }
}

impl Verified {
    /// The id the provider signed, apart from the body, for targets to trust instead of the
    /// body's (`PORTARIA_SIGNED_ID`): the body of such a scheme is not proof of anything.
    pub fn signed_id(&self) -> Option<&str> {
        self.signed_id.as_deref()
    }

    /// Which configured secret matched (0 = first): after a rotation, a request still signed
    /// with the old secret shows up here.
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }

    /// The dedup key the scheme built from signed material, if it builds one (read by
    /// [`DedupRule::Signed`]).
    pub fn signed_key(&self) -> Option<&str> {
        self.signed_key.as_deref()
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum VerifyError {
    #[error("missing signature header `{0}`")]
    MissingHeader(String),
    /// A scheme that reads a secret from the query string found no such parameter.
    #[error("missing query parameter `{0}`")]
    MissingQuery(String),
    #[error("malformed signature header: {0}")]
    Malformed(String),
    #[error("signature does not match")]
    Mismatch,
    /// `skew_secs` is now minus the signed timestamp: positive when the request is old,
    /// negative when it claims to come from the future.
    #[error("timestamp outside the allowed window ({skew_secs} s off)")]
    StaleTimestamp { skew_secs: i64 },
    /// The request names a public key (a JWKS `kid`) that the endpoint does not hold.
    #[error("no key in the JWKS has the request's `kid` (a new key? refresh the JWKS file)")]
    UnknownKey,
    /// The signature checked out, but an unsigned part of the request says something else than
    /// the signed part (Mercado Pago: the body's `data.id` is not the signed query `data.id`):
    /// refused (400), nothing stored, since what is stored and forwarded would not be what the
    /// provider signed.
    #[error("the body contradicts what is signed: {0}")]
    Contradicts(String),
}

impl Verifier {
    /// `provider` is one of [`PROVIDERS`]. `options` is required for, and only allowed with,
    /// "hmac". `secrets` are the configured secret strings; any one of them verifies. A
    /// provider that verifies with a public key takes none (the key is in `settings`).
    /// `tolerance_secs` overrides the preset's window for schemes that sign a timestamp, and is
    /// ignored by the others.
    pub fn new(
        provider: &str,
        options: Option<&HmacOptions>,
        secrets: &[String],
        tolerance_secs: Option<u64>,
    ) -> Result<Verifier, String> {
        let settings = Settings {
            hmac: options,
            ..Settings::default()
        };
        Verifier::with_settings(provider, &settings, secrets, tolerance_secs)
    }

    /// [`Verifier::new`] with every provider setting.
    pub fn with_settings(
        provider: &str,
        settings: &Settings<'_>,
        secrets: &[String],
        tolerance_secs: Option<u64>,
    ) -> Result<Verifier, String> {
        let preset = catalog::preset(provider, settings)?;
        // The public key is the credential: the preset has checked it is there (or, for a
        // scheme that takes secrets too, `check_keys` says whether it may go without).
        if let Some(setting) = preset.public_key_setting
            && (secrets.is_empty() || !preset.secret_too)
        {
            if !secrets.is_empty() {
                return Err(format!(
                    "provider `{provider}` verifies with a public key (`{setting}`), not a \
                     shared secret: remove the secret"
                ));
            }
            preset.scheme.check_keys(0)?;
            let tolerance_secs = tolerance_secs.unwrap_or(preset.tolerance_secs);
            return Ok(Verifier {
                preset,
                keys: Vec::new(),
                tolerance_secs,
            });
        }
        if secrets.is_empty() {
            return Err("at least one secret is required".to_string());
        }
        let label = |i: usize| match secrets.len() {
            1 => "the secret".to_string(),
            _ => format!("secret {}", i + 1),
        };
        let mut keys = Vec::with_capacity(secrets.len());
        for (i, secret) in secrets.iter().enumerate() {
            if secret.is_empty() {
                return Err(format!("{} is empty", label(i)));
            }
            let key = match preset.key.decode(secret) {
                Ok(key) => key,
                Err(why) if secrets.len() == 1 => return Err(why),
                Err(why) => return Err(format!("{}: {why}", label(i))),
            };
            keys.push(Secret::new(key));
        }
        preset.scheme.check_keys(keys.len())?;
        let tolerance_secs = tolerance_secs.unwrap_or(preset.tolerance_secs);
        Ok(Verifier {
            preset,
            keys,
            tolerance_secs,
        })
    }

    /// A verifier for a config loaded without its secrets (the commands that only read the
    /// database): the provider and its settings are checked as by [`Verifier::with_settings`],
    /// and the one key is a placeholder that matches no real signature, whatever form the
    /// provider's keys take (hex, `whsec_`, one per header).
    pub fn without_secrets(
        provider: &str,
        settings: &Settings<'_>,
        tolerance_secs: Option<u64>,
    ) -> Result<Verifier, String> {
        let preset = catalog::preset(provider, settings)?;
        let tolerance_secs = tolerance_secs.unwrap_or(preset.tolerance_secs);
        Ok(Verifier {
            preset,
            keys: vec![Secret::new(PLACEHOLDER_KEY.to_vec())],
            tolerance_secs,
        })
    }

    /// A verifier whose credential is the connection's verified client certificate (Efí's
    /// mTLS mode, `efi::mtls_preset`): for an endpoint that requires one, which config
    /// checks. Other providers have no such mode.
    pub fn by_client_certificate(
        provider: &str,
        settings: &Settings<'_>,
    ) -> Result<Verifier, String> {
        if provider != "efi" {
            return Err(format!(
                "provider `{provider}` has no mutual-TLS mode: give its secret"
            ));
        }
        if settings.query_param.is_some() {
            return Err(
                "`query_param` is for the `?hmac=` mode; the mTLS mode takes no secret".into(),
            );
        }
        let preset = efi::mtls_preset();
        Ok(Verifier {
            tolerance_secs: preset.tolerance_secs,
            preset,
            keys: Vec::new(),
        })
    }

    /// Checks the signature on the raw body alone (no query string).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        self.verify_request(&Request::new(headers, body), now_unix)
    }

    /// Checks the request, on the raw bytes, before any parsing, against every secret.
    pub fn verify_request(
        &self,
        request: &Request<'_>,
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        let checked =
            self.preset
                .scheme
                .verify(&self.keys, request, now_unix, self.tolerance_secs)?;
        Ok(Verified {
            secret_index: checked.index,
            signed_id: checked.signed_id,
            signed_key: checked.signed_key,
        })
    }

    /// The answer to a verified request that is the provider checking the URL rather than an
    /// event (Slack's `url_verification`, Zoom's `endpoint.url_validation`, Discord's PING).
    pub fn handshake(&self, proof: &Verified, request: &Request<'_>) -> Option<Reply> {
        // A public-key scheme has no shared key to give its handshake.
        static NO_KEY: Secret = Secret::empty();
        let key = match self.preset.public_key_setting {
            Some(_) => &NO_KEY,
            None => self.keys.get(proof.secret_index)?,
        };
        self.preset.scheme.handshake(key, request)
    }

    /// The answer to an unsigned set-up request of the provider (WooCommerce's creation ping),
    /// for a request that failed verification.
    pub fn unsigned_handshake(&self, request: &Request<'_>) -> Option<Reply> {
        self.preset.scheme.unsigned_handshake(request)
    }

    /// The preset's default dedup rule.
    pub fn default_dedup(&self) -> DedupRule {
        self.preset.dedup.clone()
    }

    /// Refuses a configured dedup `rule` that reads a part of the request this provider's
    /// signature does not cover, saying why: a replay changing that part would be a new event,
    /// or take the key of one still to come. The endpoint's `dedup_unsigned = true` accepts it.
    pub fn refuse_unsigned_dedup(&self, rule: &DedupRule) -> Result<(), String> {
        let Some(part) = self.preset.scheme.coverage().unsigned_part(rule) else {
            return Ok(());
        };
        Err(format!(
            "`{rule}` reads {part}, which the {} signature does not cover: whoever holds one \
             captured request could send it again with another value there, a new event, or \
             take the key of an event still to come; dedup on what is signed (the provider's \
             default, `{}`), or set `dedup_unsigned = true` on the endpoint to accept that",
            self.preset.name, self.preset.dedup
        ))
    }

    /// Whether the scheme signs a timestamp, so that `tolerance_secs` means something.
    pub fn signs_timestamp(&self) -> bool {
        self.preset.scheme.signs_timestamp()
    }

    /// Whether requests carry the configured secret itself (Asaas's, Cielo's, Vindi's and
    /// Efí's `?hmac=` static credentials) instead of a signature: over plain HTTP, anyone who
    /// sees one request can forge the next.
    pub fn static_credential(&self) -> bool {
        matches!(self.preset.scheme.coverage(), preset::Coverage::Credential)
    }

    /// Whether the scheme signs `public_url`, so that setting it means something.
    pub fn signs_public_url(&self) -> bool {
        self.preset.signs_public_url
    }

    /// The replay window in force (the preset's, or the configured override).
    pub fn tolerance_secs(&self) -> u64 {
        self.tolerance_secs
    }

    /// Request headers that carry a credential of this provider, which must not be stored.
    pub fn credential_headers(&self) -> &[HeaderName] {
        &self.preset.credential_headers
    }

    /// The body the provider expects in the answer to an accepted event, if a particular one.
    pub fn ack(&self) -> Option<&'static str> {
        self.preset.ack.map(|ack| ack.body)
    }

    /// That answer with its content type.
    pub fn ack_reply(&self) -> Option<Ack> {
        self.preset.ack
    }

    /// Canonical provider name.
    pub fn provider(&self) -> &'static str {
        self.preset.name
    }

    /// How long the gateway keeps retrying a failed delivery: its documented rule, or
    /// [`patience::Rule::Unknown`] under the provider's name.
    pub fn patience(&self) -> Patience {
        self.preset.patience.unwrap_or(Patience {
            gateway: self.preset.name,
            rule: patience::Rule::Unknown,
        })
    }

    /// How many secrets are configured (for a report of what was tried).
    pub fn secret_count(&self) -> usize {
        self.keys.len()
    }

    /// The headers this provider would send for `body`, signed with the first secret at
    /// `now_unix`, with `delivery_id` where the scheme carries one (Stripe's has none). Header
    /// names are lowercase. Empty for a scheme that cannot be signed with a shared secret.
    pub fn sign(&self, body: &[u8], now_unix: i64, delivery_id: &str) -> Vec<(String, String)> {
        self.sign_request(body, now_unix, delivery_id)
            .map(|signed| signed.headers)
            .unwrap_or_default()
    }

    /// What a sender adds to a request (headers and, for some schemes, a query string); None
    /// when the scheme cannot be signed with a shared secret.
    pub fn sign_request(&self, body: &[u8], now_unix: i64, delivery_id: &str) -> Option<Signed> {
        // `new` refuses an empty list, so there is always a first key.
        self.preset
            .scheme
            .sign_with_keys(&self.keys, body, now_unix, delivery_id)
    }
}

/// Reads one header a scheme needs, trimmed. A header given twice is refused: which copy was
/// signed would be a guess, and the dedup key might read the other one.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let value = values
        .next()
        .ok_or_else(|| VerifyError::MissingHeader(name.to_string()))?;
    if values.next().is_some() {
        return Err(VerifyError::Malformed(format!(
            "header `{name}` appears more than once"
        )));
    }
    let text = value
        .to_str()
        .map_err(|_| VerifyError::Malformed(format!("header `{name}` is not visible ASCII")))?
        .trim();
    if text.is_empty() {
        return Err(VerifyError::Malformed(format!("header `{name}` is empty")));
    }
    Ok(text)
}

/// Parses unix seconds. Digits only: a sign or spaces would let two spellings of one instant
/// carry different MACs.
fn parse_timestamp(text: &str, what: &str) -> Result<i64, VerifyError> {
    let bad = || VerifyError::Malformed(format!("`{what}` is not a unix timestamp in seconds"));
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

/// Refuses a timestamp more than `tolerance_secs` away from `now`, in either direction.
fn check_window(timestamp: i64, now: i64, tolerance_secs: u64) -> Result<(), VerifyError> {
    let skew_secs = now.saturating_sub(timestamp);
    if skew_secs.unsigned_abs() > tolerance_secs {
        return Err(VerifyError::StaleTimestamp { skew_secs });
    }
    Ok(())
}

/// Returns the index of the first key whose MAC equals one of the `received` ones. Every key
/// is tried against every signature with no early exit, so the time taken does not tell which
/// key matched, and the bytes are compared in constant time. `expected_mac` gets the
/// [`Secret`] itself, so that an HMAC starts from its keyed state ([`Secret::mac`]).
fn find_secret(
    keys: &[Secret],
    received: &[Vec<u8>],
    expected_mac: impl Fn(&Secret) -> Vec<u8>,
) -> Result<usize, VerifyError> {
    let mut found = None;
    for (index, key) in keys.iter().enumerate() {
        let expected = expected_mac(key);
        let mut hit = Choice::from(0);
        for signature in received {
            hit |= expected.as_slice().ct_eq(signature.as_slice());
        }
        if bool::from(hit) && found.is_none() {
            found = Some(index);
        }
    }
    found.ok_or(VerifyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;
    const ALL: [&str; 8] = [
        "plowf",
        "pagarme",
        "relya",
        "stripe",
        "standard-webhooks",
        "svix",
        "github",
        "hmac",
    ];

    /// A valid secret for each provider, and a second, different one.
    fn secrets_for(provider: &str) -> [String; 2] {
        match provider {
            "standard-webhooks" | "svix" => [
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string(),
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_string(),
            ],
            _ => ["first-secret".to_string(), "second-secret".to_string()],
        }
    }

    fn options_for(provider: &str) -> Option<HmacOptions> {
        (provider == "hmac").then(|| HmacOptions {
            header: "X-Signature".to_string(),
            algorithm: Some("sha512".to_string()),
            encoding: Some("base64".to_string()),
            prefix: Some("v1=".to_string()),
            timestamp_header: Some("X-Timestamp".to_string()),
            template: Some("{header:x-timestamp}.{header:x-delivery}.{body}".to_string()),
        })
    }

    fn verifier(provider: &str, secrets: &[String]) -> Verifier {
        Verifier::new(provider, options_for(provider).as_ref(), secrets, None).unwrap()
    }

    pub(super) fn headers(pairs: &[(impl AsRef<str>, impl AsRef<str>)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_ref().as_bytes()).unwrap(),
                value.as_ref().parse().unwrap(),
            );
        }
        map
    }

    const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;

    #[test]
    fn every_provider_verifies_what_it_signs() {
        for provider in ALL {
            let v = verifier(provider, &secrets_for(provider));
            let signed = headers(&v.sign(BODY, NOW, "dlv_1"));
            let verified = v.verify(&signed, BODY, NOW);
            assert_eq!(verified.map(|v| v.secret_index()), Ok(0), "{provider}");
        }
    }

    #[test]
    fn every_provider_accepts_the_second_secret_and_reports_it() {
        for provider in ALL {
            let [old, new] = secrets_for(provider);
            let sender = verifier(provider, std::slice::from_ref(&new));
            let receiver = verifier(provider, &[old, new]);
            let signed = headers(&sender.sign(BODY, NOW, "dlv_1"));
            let verified = receiver.verify(&signed, BODY, NOW);
            assert_eq!(verified.map(|v| v.secret_index()), Ok(1), "{provider}");
        }
    }

    #[test]
    fn every_provider_rejects_a_tampered_body_and_a_wrong_secret() {
        for provider in ALL {
            let [right, wrong] = secrets_for(provider);
            let v = verifier(provider, &[right]);
            let signed = headers(&v.sign(BODY, NOW, "dlv_1"));
            let tampered = br#"{"id":"evt_2","object":"event"}"#;
            assert_eq!(
                v.verify(&signed, tampered, NOW).unwrap_err(),
                VerifyError::Mismatch
            );
            let other = verifier(provider, &[wrong]);
            assert_eq!(
                other.verify(&signed, BODY, NOW).unwrap_err(),
                VerifyError::Mismatch
            );
        }
    }

    #[test]
    fn every_provider_reports_a_missing_header() {
        for provider in ALL {
            let v = verifier(provider, &secrets_for(provider));
            let err = v.verify(&HeaderMap::new(), BODY, NOW).unwrap_err();
            assert!(
                matches!(err, VerifyError::MissingHeader(_)),
                "{provider}: {err:?}"
            );
        }
    }

    #[test]
    fn tolerance_override_narrows_the_window() {
        let v = Verifier::new("relya", None, &["s".to_string()], Some(10)).unwrap();
        let signed = headers(&v.sign(BODY, NOW, "dlv_1"));
        assert!(v.verify(&signed, BODY, NOW + 10).is_ok());
        assert_eq!(
            v.verify(&signed, BODY, NOW + 11).unwrap_err(),
            VerifyError::StaleTimestamp { skew_secs: 11 }
        );
    }

    #[test]
    fn window_is_inclusive_and_works_both_ways() {
        assert_eq!(check_window(NOW, NOW + 300, 300), Ok(()));
        assert_eq!(check_window(NOW, NOW - 300, 300), Ok(()));
        assert_eq!(
            check_window(NOW, NOW + 301, 300),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            check_window(NOW, NOW - 301, 300),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        assert!(check_window(i64::MAX, i64::MIN, 300).is_err());
    }

    #[test]
    fn timestamps_are_digits_only() {
        assert_eq!(parse_timestamp("1700000000", "t"), Ok(1_700_000_000));
        for bad in ["", "-1", "+1", "1.5", "abc", "99999999999999999999"] {
            assert!(
                matches!(parse_timestamp(bad, "t"), Err(VerifyError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn header_values_must_be_single_visible_ascii() {
        let mut map = HeaderMap::new();
        map.insert(
            "x-sig",
            http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert!(matches!(
            header(&map, "x-sig"),
            Err(VerifyError::Malformed(_))
        ));
        let twice = headers(&[("x-sig", "a"), ("x-sig", "b")]);
        assert!(matches!(
            header(&twice, "x-sig"),
            Err(VerifyError::Malformed(_))
        ));
        let blank = headers(&[("x-sig", " ")]);
        assert!(matches!(
            header(&blank, "x-sig"),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(header(&headers(&[("X-Sig", " ab ")]), "x-sig"), Ok("ab"));
    }

    #[test]
    fn non_ascii_signature_header_is_malformed_for_a_provider() {
        let v = verifier("github", &secrets_for("github"));
        let mut map = HeaderMap::new();
        map.insert(
            github::SIGNATURE,
            http::HeaderValue::from_bytes(b"sha256=\xff\xfe").unwrap(),
        );
        assert!(matches!(
            v.verify(&map, BODY, NOW),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn debug_output_never_shows_a_secret() {
        let secret = Secret::new(b"hunter2-very-secret".to_vec());
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        for provider in ALL {
            let secrets = secrets_for(provider);
            let shown = format!("{:?}", verifier(provider, &secrets));
            for s in &secrets[..1] {
                assert!(!shown.contains(s.as_str()), "{provider}: {shown}");
                let tail = s.trim_start_matches("whsec_");
                assert!(!shown.contains(tail), "{provider}: {shown}");
            }
            assert!(shown.contains("[redacted]"), "{provider}: {shown}");
        }
    }

    #[test]
    fn provider_names_headers_and_dedup_defaults() {
        let expect: [(&str, &str, Option<&str>, &str); 8] = [
            ("plowf", "plowf", None, "body-sha256"),
            ("pagarme", "pagarme", None, "body-sha256"),
            (
                "relya",
                "relya",
                Some("x-relya-event-type"),
                "header:x-relya-delivery-id",
            ),
            ("stripe", "stripe", None, "json:/id"),
            (
                "standard-webhooks",
                "standard-webhooks",
                None,
                "signed-webhook-id",
            ),
            ("svix", "svix", None, "signed-webhook-id"),
            ("github", "github", Some("x-github-event"), "body-sha256"),
            ("hmac", "hmac", None, "body-sha256"),
        ];
        for (given, canonical, event, dedup) in expect {
            let v = verifier(given, &secrets_for(given));
            assert_eq!(v.provider(), canonical);
            assert_eq!(v.event_type_header(), event, "{given}");
            assert_eq!(v.default_dedup().to_string(), dedup, "{given}");
        }
    }

    #[test]
    fn the_event_type_is_signed_where_the_signature_covers_its_source() {
        let unsigned = [
            "github",
            "shopify",
            "linear",
            "relya",
            "woocommerce",
            "mercadopago",
            "adyen",
            "twilio",
            "asaas",
            "vindi",
            "efi",
            "rede",
            "picpay",
            "iugu",
        ];
        for provider in PROVIDERS {
            let settings = Settings {
                public_url: Some("https://example.com/hook"),
                credential_headers: None,
                ..Settings::default()
            };
            let v = match Verifier::without_secrets(provider, &settings, None) {
                Ok(v) => v,
                // Those that need another setting (a key, a JWKS, Cielo's headers, hmac's
                // table): the test above.
                Err(_) => continue,
            };
            let expected = !unsigned.contains(provider);
            assert_eq!(v.event_type_signed(), expected, "{provider}");
        }
        // A static credential signs nothing: whoever has it sends any body.
        let headers = ["X-Shop-Key".to_string()];
        let cielo = Settings {
            credential_headers: Some(&headers),
            ..Settings::default()
        };
        let cielo = Verifier::without_secrets("cielo", &cielo, None).unwrap();
        assert!(!cielo.event_type_signed());
        // Efí over mutual TLS: only Efí's certificate opens the connection the body comes on.
        let mtls = Verifier::by_client_certificate("efi", &Settings::default()).unwrap();
        assert!(mtls.event_type_signed());
    }

    #[test]
    fn only_the_public_key_providers_go_without_a_secret() {
        for provider in PROVIDERS {
            let public_key = ["discord", "pagarme-v5", "woovi", "openpix"].contains(provider);
            assert_eq!(takes_secret(provider), !public_key, "{provider}");
        }
        assert!(takes_secret("paypal"));
        for provider in ALL {
            let err = Verifier::new(provider, options_for(provider).as_ref(), &[], None);
            assert_eq!(
                err.unwrap_err(),
                "at least one secret is required",
                "{provider}"
            );
        }
    }

    #[test]
    fn new_explains_what_is_wrong() {
        let one = ["s".to_string()];
        let err = |p: &str, o: Option<&HmacOptions>, s: &[String]| {
            Verifier::new(p, o, s, None).unwrap_err()
        };
        let unknown = err("foo", None, &one);
        assert!(
            unknown.starts_with("unknown provider `foo` (known: plowf, pagarme, relya, "),
            "{unknown}"
        );
        assert_eq!(
            unknown,
            format!("unknown provider `foo` (known: {})", PROVIDERS.join(", "))
        );
        assert!(err("hmac", None, &one).contains("needs a `signature` table"));
        let options = options_for("hmac").unwrap();
        assert!(err("github", Some(&options), &one).contains("only allowed with provider `hmac`"));
        assert_eq!(err("github", None, &[]), "at least one secret is required");
        assert_eq!(err("github", None, &[String::new()]), "the secret is empty");
        assert_eq!(
            err("github", None, &["a".to_string(), String::new()]),
            "secret 2 is empty"
        );
        assert_eq!(
            err("standard-webhooks", None, &one),
            "a Standard Webhooks secret starts with `whsec_`"
        );
        let two = [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string(),
            "whsec_!!".to_string(),
        ];
        assert_eq!(
            err("svix", None, &two),
            "secret 2: the part after `whsec_` is not valid base64"
        );
        let bad_alg = HmacOptions {
            algorithm: Some("md5".to_string()),
            ..options.clone()
        };
        assert_eq!(
            err("hmac", Some(&bad_alg), &one),
            "unknown algorithm `md5` (known: sha256, sha512, sha1)"
        );
        let bad_enc = HmacOptions {
            encoding: Some("base32".to_string()),
            ..options
        };
        assert_eq!(
            err("hmac", Some(&bad_enc), &one),
            "unknown encoding `base32` (known: hex, base64)"
        );
    }
}
