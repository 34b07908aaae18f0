//! What a provider file fills in: a [`Preset`] (its [`Scheme`], default dedup rule, event-type
//! header, replay window, key format, credential headers, answer) and the types a scheme
//! speaks in ([`Signed`] for a sender, [`Coverage`] for what the signature covers). The
//! catalog (`catalog.rs`) lists the providers; each provider's file builds its preset from
//! these, so the provider files depend on this one and never on the catalog.

use std::fmt;
use std::str::FromStr;

use http::HeaderName;

use super::patience::{Patience, Rule};
use super::{Checked, DEFAULT_TOLERANCE_SECS, Reply, Request, Secret, VerifyError};
use crate::dedup::DedupRule;

/// How one provider signs. A scheme holds no secret: the keys are passed in.
pub(super) trait Scheme: fmt::Debug + Send + Sync {
    /// The index of the first key that verifies the request, and what else the signature
    /// covers (a signed id, a key built from signed material). See the module `verify` for the
    /// order of errors.
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError>;

    /// What a sender adds to a request for `body`, signed with `key` at `now`, with
    /// `delivery_id` where the scheme carries one. None: it cannot be signed with a shared
    /// secret (an asymmetric scheme).
    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed>;

    /// [`Scheme::sign`] for a scheme whose one credential spans every configured secret
    /// (Cielo's custom headers, one secret each); the others sign with the first.
    fn sign_with_keys(
        &self,
        keys: &[Secret],
        body: &[u8],
        now: i64,
        delivery_id: &str,
    ) -> Option<Signed> {
        self.sign(keys.first()?, body, now, delivery_id)
    }

    /// Refuses a number of secrets the scheme cannot use (a config error, said in a sentence).
    /// Most schemes take any number: each secret is an alternative.
    fn check_keys(&self, _count: usize) -> Result<(), String> {
        Ok(())
    }

    /// Whether a timestamp is part of what is signed, so that a tolerance means something.
    fn signs_timestamp(&self) -> bool {
        false
    }

    /// What of a request the signature covers, for the check of a configured `dedup` rule.
    /// Most schemes sign the raw body and no header.
    fn coverage(&self) -> Coverage {
        Coverage::body()
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

/// A scheme plus a provider's own answer to its URL checks: verification and signing are the
/// inner scheme's; only the handshakes are the provider's (Slack, Zoom, WooCommerce).
#[derive(Debug)]
pub(super) struct WithHandshake<S> {
    pub scheme: S,
    /// See [`Scheme::handshake`].
    pub handshake: Option<fn(&Secret, &Request<'_>) -> Option<Reply>>,
    /// See [`Scheme::unsigned_handshake`].
    pub unsigned: Option<fn(&Request<'_>) -> Option<Reply>>,
}

impl<S: Scheme> Scheme for WithHandshake<S> {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        self.scheme.verify(keys, request, now, tolerance_secs)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        self.scheme.sign(key, body, now, delivery_id)
    }

    fn sign_with_keys(
        &self,
        keys: &[Secret],
        body: &[u8],
        now: i64,
        delivery_id: &str,
    ) -> Option<Signed> {
        self.scheme.sign_with_keys(keys, body, now, delivery_id)
    }

    fn check_keys(&self, count: usize) -> Result<(), String> {
        self.scheme.check_keys(count)
    }

    fn signs_timestamp(&self) -> bool {
        self.scheme.signs_timestamp()
    }

    fn coverage(&self) -> Coverage {
        self.scheme.coverage()
    }

    fn handshake(&self, key: &Secret, request: &Request<'_>) -> Option<Reply> {
        self.handshake.and_then(|answer| answer(key, request))
    }

    fn unsigned_handshake(&self, request: &Request<'_>) -> Option<Reply> {
        self.unsigned.and_then(|answer| answer(request))
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

/// What of a request a scheme's check covers: a key read from anything else can be changed by
/// whoever holds one captured request, making a replay a new event or taking the key of an
/// event still to come (issue 23). The config refuses a `dedup` rule that reads an uncovered
/// part unless the endpoint says `dedup_unsigned = true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Coverage {
    /// A signature over these request headers and, if `body`, the raw body's bytes.
    Signed {
        headers: Vec<HeaderName>,
        body: bool,
    },
    /// A credential the request carries (a static token, HTTP Basic, a client certificate):
    /// nothing is signed, and whoever holds one request can send any other, so no part of a
    /// request is more trustworthy than another.
    Credential,
    /// The connection itself is the sender's proof (Efí's mutual TLS: only its private key
    /// opens it): whatever the request says, the sender said; no capture forges it.
    Connection,
}

impl Coverage {
    /// The raw body, no header.
    pub(super) fn body() -> Coverage {
        Coverage::Signed {
            headers: Vec::new(),
            body: true,
        }
    }

    /// The raw body and these headers.
    pub(super) fn body_and(headers: &[&'static str]) -> Coverage {
        Coverage::Signed {
            headers: headers.iter().map(|h| HeaderName::from_static(h)).collect(),
            body: true,
        }
    }

    /// What of `rule` this does not cover, said as "the header `x`" or "the body", if any.
    pub(super) fn unsigned_part(&self, rule: &DedupRule) -> Option<String> {
        let Coverage::Signed { headers, body } = self else {
            return None;
        };
        match rule {
            DedupRule::Header(name) if !headers.contains(name) => {
                Some(format!("the header `{name}`"))
            }
            DedupRule::BodySha256 | DedupRule::JsonPointer(_) if !body => {
                Some("the body".to_string())
            }
            DedupRule::FirstOf(rules) => rules.iter().find_map(|r| self.unsigned_part(r)),
            _ => None,
        }
    }
}

/// How a configured secret string becomes key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyFormat {
    /// The string's UTF-8 bytes, as given (Stripe's `whsec_` too).
    Utf8,
    /// Hex, decoded (Adyen's HMAC key).
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
            KeyFormat::StandardWebhooks => super::secret::decode_secret(secret),
        }
    }
}

/// A provider's own answer to an accepted event: fixed, so it is built once, not per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub content_type: &'static str,
    pub body: &'static str,
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
    /// The answer to an accepted event, when the provider expects a particular one (Adyen's
    /// `[accepted]`, Discord's `{"type":5}`); else `{"received":true}`.
    pub ack: Option<Ack>,
    /// Whether the scheme signs `public_url` (Twilio, Square); for the others it is unused, and
    /// the config warns.
    pub signs_public_url: bool,
    /// For a scheme that verifies with the sender's public key, the setting that holds it (the
    /// endpoint's credential; a shared secret is refused). None: a shared secret is required.
    pub public_key_setting: Option<&'static str>,
    /// What the provider appends to the URL it was given (Efí's `/pix`): the endpoint answers
    /// on its path and on its path followed by this, nothing else.
    pub appended_path: Option<&'static str>,
    /// Where the event type and the object id are, when the provider puts them somewhere of
    /// its own (Rede's `events[0]`, iugu's form fields); the endpoint's `event_type` and
    /// `object_id` override them (`Verifier::with_fields`).
    pub event_type: Option<Field>,
    pub object_id: Option<Field>,
    /// Whether a bare GET on the endpoint is the provider checking the URL (Rede's, at
    /// registration): answered 200, nothing stored.
    pub answers_get: bool,
    /// Why an endpoint of this provider needs `allow_ips` (iugu: nothing in its requests is
    /// proof); None: it does not. Config refuses such an endpoint without it.
    pub needs_allow_ips: Option<&'static str>,
    /// For a scheme with a public key (`public_key_setting`): whether it takes secrets too, for
    /// a second form (Woovi's HMAC); a secret given is otherwise refused.
    pub secret_too: bool,
    /// How long the gateway keeps retrying a failed delivery, where its docs say (`patience`).
    pub patience: Option<Patience>,
    /// The fields its events always carry (`drift`); none for most providers.
    pub carries: &'static [Carried],
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
            signs_public_url: false,
            public_key_setting: None,
            appended_path: None,
            event_type: None,
            object_id: None,
            answers_get: false,
            needs_allow_ips: None,
            secret_too: false,
            patience: None,
            carries: &[],
        }
    }

    /// See [`Preset::carries`].
    pub(super) fn carries(mut self, fields: &'static [Carried]) -> Self {
        self.carries = fields;
        self
    }

    /// The gateway's give-up rule, `gateway` its name as the owner knows it.
    pub(super) fn patience(mut self, gateway: &'static str, rule: Rule) -> Self {
        self.patience = Some(Patience { gateway, rule });
        self
    }

    pub(super) fn event_type_header(mut self, name: &'static str) -> Self {
        self.event_type_header = Some(name);
        self
    }

    pub(super) fn key(mut self, key: KeyFormat) -> Self {
        self.key = key;
        self
    }

    pub(super) fn tolerance_secs(mut self, secs: u64) -> Self {
        self.tolerance_secs = secs;
        self
    }

    pub(super) fn credential_headers(mut self, names: Vec<HeaderName>) -> Self {
        self.credential_headers = names;
        self
    }

    pub(super) fn signs_public_url(mut self) -> Self {
        self.signs_public_url = true;
        self
    }

    /// A plain-text answer to an accepted event.
    pub(super) fn ack(mut self, body: &'static str) -> Self {
        self.ack = Some(Ack {
            content_type: "text/plain",
            body,
        });
        self
    }

    /// A JSON answer to an accepted event.
    pub(super) fn json_ack(mut self, body: &'static str) -> Self {
        self.ack = Some(Ack {
            content_type: "application/json",
            body,
        });
        self
    }

    /// Where the event type is ([`Preset::event_type`]), spelled as in a config.
    pub(super) fn type_at(mut self, field: &str) -> Self {
        self.event_type = field.parse().ok();
        self
    }

    /// Where the object id is ([`Preset::object_id`]), spelled as in a config.
    pub(super) fn id_at(mut self, field: &str) -> Self {
        self.object_id = field.parse().ok();
        self
    }

    /// See [`Preset::answers_get`].
    pub(super) fn answers_get(mut self) -> Self {
        self.answers_get = true;
        self
    }

    /// See [`Preset::needs_allow_ips`].
    pub(super) fn needs_allow_ips(mut self, why: &'static str) -> Self {
        self.needs_allow_ips = Some(why);
        self
    }

    /// See [`Preset::appended_path`].
    pub(super) fn appended_path(mut self, suffix: &'static str) -> Self {
        self.appended_path = Some(suffix);
        self
    }

    /// For a scheme that verifies with a public key, given in the setting `name`.
    pub(super) fn without_secret(mut self, name: &'static str) -> Self {
        self.public_key_setting = Some(name);
        self
    }
}

/// A field every event of a provider carries, by its docs (issue 27, "Notice what changed
/// upstream"): an event without it (absent, or null) is flagged (the status page, the alert
/// `drift`), never refused. Checked by [`Carried::missing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carried {
    /// Where, as an RFC 6901 pointer into the JSON body: `/payment/id`.
    pub pointer: &'static str,
    /// As the provider's docs spell it: `payment.id`.
    pub name: &'static str,
    /// Only events whose type starts with this carry it (Asaas's `PAYMENT_`); None: every one.
    pub types: Option<&'static str>,
    /// ... but those whose type starts with one of these (Stripe's thin events, `v1.`, `v2.`).
    pub except: &'static [&'static str],
}

/// A header-based dedup rule for a preset.
pub(super) fn header_rule(name: &'static str) -> DedupRule {
    DedupRule::Header(HeaderName::from_static(name))
}

/// A JSON-pointer dedup rule for a preset.
pub(super) fn json_rule(pointer: &str) -> DedupRule {
    DedupRule::JsonPointer(pointer.to_string())
}

/// Where a request carries a value: a header, a value in a JSON body (an RFC 6901 pointer,
/// `/events/0`), or a field of a form body (its name as decoded, `data[id]`). An endpoint's
/// `event_type` and `object_id` name one (`"json:/events/0"`, `"header:X-Topic"`,
/// `"form:event"`); a preset's defaults are the same thing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Header(HeaderName),
    Json(String),
    Form(String),
}

impl FromStr for Field {
    type Err = String;

    fn from_str(text: &str) -> Result<Field, String> {
        match text.split_once(':') {
            Some(("header", name)) => HeaderName::from_bytes(name.as_bytes())
                .map(Field::Header)
                .map_err(|_| format!("`{name}` is not a valid header name")),
            Some(("json", pointer)) => {
                crate::dedup::check_pointer(pointer)?;
                Ok(Field::Json(pointer.to_string()))
            }
            Some(("form", name)) if !name.is_empty() => Ok(Field::Form(name.to_string())),
            _ => Err(format!(
                "`{text}`: give `json:<pointer>` (e.g. json:/events/0), `header:<name>` or \
                 `form:<field>` (e.g. form:data[id])"
            )),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Header(name) => write!(f, "header:{name}"),
            Field::Json(pointer) => write!(f, "json:{pointer}"),
            Field::Form(name) => write!(f, "form:{name}"),
        }
    }
}
