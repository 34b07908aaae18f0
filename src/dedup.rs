//! How the dedup key of a verified request is derived: the rules an endpoint can name in its
//! config (`body-sha256`, `header:<name>`, `json:<pointer>`, or an ordered list of them),
//! the keys a provider preset derives itself ([`CustomKey`], e.g. Adyen's items;
//! [`DedupRule::Signed`], the key the verifier built from signed material: Mercado Pago,
//! Standard Webhooks, Twilio, Linear; neither is spelled in a config), and the extraction
//! itself ([`DedupRule::extract_signed`]). A leaf but for `digest`, which hashes.
//!
//! A rule that cannot produce a key fails (the request gets a 400) rather than falling back to
//! another rule: a silent fallback would make two deliveries of one event look different, or
//! two events look the same. The one fallback is the one asked for by name: a list
//! (`dedup = ["header:x-shopify-event-id", "header:x-shopify-webhook-id"]`) tries its rules in
//! order and moves on only when a rule's source is *absent* from the request (the header is not
//! there, the body is not JSON, or nothing is at the pointer); any other failure (a header given
//! twice, an empty or overlong key) is the request's answer.

use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName};

/// Longest key accepted; a key is stored and indexed once per event.
pub const MAX_KEY_BYTES: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DedupRule {
    /// Lowercase hex SHA-256 of the raw body: byte-identical deliveries are one event.
    BodySha256,
    /// A header's value, such as a provider's delivery id.
    Header(HeaderName),
    /// A string or number in a JSON body, addressed by a JSON pointer (RFC 6901), e.g. `/id`.
    JsonPointer(String),
    /// A key a provider preset derives itself, when no single field names the event (Adyen:
    /// every item's `pspReference`, `eventCode` and `success`). A preset's default only: a
    /// config cannot spell it, and names one of the other rules to override it.
    Custom(CustomKey),
    /// The key the verifier built from what the signature covers (`Verified::signed_key`:
    /// Mercado Pago's manifest, the Standard Webhooks id of the family that verified, ...),
    /// shown by this name. A preset's default only, like [`DedupRule::Custom`].
    Signed(&'static str),
    /// The first of these single rules whose source the request has (see the module doc).
    /// Built by [`DedupRule::first_of`]: at least two rules, none of them a list.
    FirstOf(Vec<DedupRule>),
}

/// A preset's own key function, with the name the rule is shown by.
#[derive(Clone, Copy)]
pub struct CustomKey {
    /// Shown where the rule is, e.g. `adyen-items`; the identity of the rule.
    pub name: &'static str,
    pub key: fn(&HeaderMap, &[u8]) -> Result<String, DedupError>,
    /// For a batch whose items are signed one by one (Adyen): each item's own key, as `key`
    /// gives it for a batch of that item alone, so that a batch whose items are all known is
    /// a duplicate (`DedupRule::item_keys`). Runs only on a request `key` accepted.
    pub items: Option<ItemKeys>,
}

/// A preset's function giving the keys of a verified batch's items ([`CustomKey::items`]).
pub type ItemKeys = fn(&HeaderMap, &[u8]) -> Vec<String>;

impl fmt::Debug for CustomKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomKey({})", self.name)
    }
}

/// Two custom keys are the same rule when they have the same name (function addresses are
/// not a reliable identity).
impl PartialEq for CustomKey {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CustomKey {}

/// Why no key could be derived. The text is the body of the 400 answer.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DedupError {
    #[error("missing header `{0}`")]
    MissingHeader(String),
    #[error("header `{0}` appears more than once")]
    RepeatedHeader(String),
    #[error("header `{0}` is not visible ASCII")]
    HeaderNotText(String),
    #[error("body is not JSON")]
    NotJson,
    /// A custom key's own explanation.
    #[error("{0}")]
    Custom(String),
    #[error("no value at `{0}`")]
    NoValue(String),
    #[error("value at `{0}` is not a string or number")]
    NotStringOrNumber(String),
    #[error("empty dedup key")]
    Empty,
    #[error("dedup key longer than {MAX_KEY_BYTES} bytes")]
    TooLong,
    /// A [`DedupRule::Signed`] rule without the verifier's key (never on a verified request of
    /// its own preset).
    #[error("the signature covers no dedup key")]
    NotSigned,
    /// Every rule of a list found its source absent; one error per rule, in order.
    #[error("{}", join_errors(.0))]
    NoneApplies(Vec<DedupError>),
}

fn join_errors(errors: &[DedupError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join(", and ")
}

impl DedupError {
    /// Whether the rule's source is not in the request at all, so that the next rule of a list
    /// may be tried.
    fn is_absent(&self) -> bool {
        matches!(
            self,
            DedupError::MissingHeader(_) | DedupError::NotJson | DedupError::NoValue(_)
        )
    }
}

impl DedupRule {
    /// An ordered list of single rules. One rule is that rule; a list inside a list, or an
    /// empty list, is refused.
    pub fn first_of(rules: Vec<DedupRule>) -> Result<DedupRule, String> {
        if rules.iter().any(|r| matches!(r, DedupRule::FirstOf(_))) {
            return Err("a dedup list cannot contain a list".to_string());
        }
        match <[DedupRule; 1]>::try_from(rules) {
            Ok([one]) => Ok(one),
            Err(rules) if rules.is_empty() => Err("the dedup list is empty".to_string()),
            Err(rules) => Ok(DedupRule::FirstOf(rules)),
        }
    }

    /// Parses `dedup = "rule"` or `dedup = ["rule", "rule", ...]` (see [`DedupRule::first_of`]).
    pub fn parse_list(texts: &[String]) -> Result<DedupRule, String> {
        let rules: Result<Vec<DedupRule>, String> = texts.iter().map(|t| t.parse()).collect();
        DedupRule::first_of(rules?)
    }

    /// Refuses a rule that reads one of `credentials` or `Authorization`: those are redacted
    /// before the headers are stored, and a key read from one would store the credential.
    pub fn refuse_credential_headers(&self, credentials: &[HeaderName]) -> Result<(), String> {
        let credential =
            |name: &&HeaderName| credentials.contains(name) || *name == http::header::AUTHORIZATION;
        match self.headers().into_iter().find(credential) {
            Some(name) => Err(format!(
                "`header:{name}` carries this provider's credential; dedup on something else \
                 (`body-sha256`, `json:/id`)"
            )),
            None => Ok(()),
        }
    }

    /// The headers the rule may read.
    pub fn headers(&self) -> Vec<&HeaderName> {
        match self {
            DedupRule::Header(name) => vec![name],
            DedupRule::FirstOf(rules) => rules.iter().flat_map(DedupRule::headers).collect(),
            DedupRule::BodySha256
            | DedupRule::JsonPointer(_)
            | DedupRule::Custom(_)
            | DedupRule::Signed(_) => Vec::new(),
        }
    }

    /// The keys of a verified batch's items, for a preset whose items are signed one by one
    /// ([`CustomKey::items`]); empty for every other rule (and for a request that is not such
    /// a batch): its one key is then all there is. Call it once the key was derived.
    pub fn item_keys(&self, headers: &HeaderMap, body: &[u8]) -> Vec<String> {
        match self {
            DedupRule::Custom(CustomKey {
                items: Some(items), ..
            }) => items(headers, body),
            _ => Vec::new(),
        }
    }

    /// Derives the key from a request that has already been verified, for a rule that is not
    /// [`DedupRule::Signed`] (an `order_by` key).
    pub fn extract(&self, headers: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
        self.extract_signed(None, headers, body)
    }

    /// Derives the key from a verified request; `signed` is the key its verifier built from
    /// signed material (`Verified::signed_key`), which [`DedupRule::Signed`] takes.
    pub fn extract_signed(
        &self,
        signed: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<String, DedupError> {
        let key = match self {
            DedupRule::BodySha256 => body_key(body),
            DedupRule::Header(name) => header_key(headers, name)?,
            DedupRule::JsonPointer(pointer) => json_key(body, pointer)?,
            DedupRule::Custom(custom) => (custom.key)(headers, body)?,
            DedupRule::Signed(_) => signed.ok_or(DedupError::NotSigned)?.to_string(),
            DedupRule::FirstOf(rules) => {
                let mut absent = Vec::new();
                for rule in rules {
                    match rule.extract_signed(signed, headers, body) {
                        Err(e) if e.is_absent() => absent.push(e),
                        done => return done,
                    }
                }
                return Err(DedupError::NoneApplies(absent));
            }
        };
        if key.is_empty() {
            return Err(DedupError::Empty);
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(DedupError::TooLong);
        }
        Ok(key)
    }
}

/// A preset's key that may be long (ids joined): itself up to [`MAX_KEY_BYTES`], else `sha256:`
/// and the hex SHA-256 of it, so a long key is still one key per value, never a refusal.
pub fn fit(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    format!(
        "sha256:{}",
        hex::encode(crate::digest::sha256(&[key.as_bytes()]))
    )
}

/// The key of a body nothing else names: its SHA-256, as [`DedupRule::BodySha256`] has it.
pub fn body_key(body: &[u8]) -> String {
    hex::encode(crate::digest::sha256(&[body]))
}

fn header_key(headers: &HeaderMap, name: &HeaderName) -> Result<String, DedupError> {
    let mut values = headers.get_all(name).iter();
    let value = values
        .next()
        .ok_or_else(|| DedupError::MissingHeader(name.to_string()))?;
    // Two ids on one request: which one names the event would be a guess.
    if values.next().is_some() {
        return Err(DedupError::RepeatedHeader(name.to_string()));
    }
    let text = value
        .to_str()
        .map_err(|_| DedupError::HeaderNotText(name.to_string()))?;
    Ok(text.trim().to_string())
}

fn json_key(body: &[u8], pointer: &str) -> Result<String, DedupError> {
    let document: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| DedupError::NotJson)?;
    match document.pointer(pointer) {
        None => Err(DedupError::NoValue(pointer.to_string())),
        Some(serde_json::Value::String(text)) => Ok(text.clone()),
        // The number's JSON text, so `"id": 42` gives the key `42`.
        Some(serde_json::Value::Number(number)) => Ok(number.to_string()),
        Some(_) => Err(DedupError::NotStringOrNumber(pointer.to_string())),
    }
}

impl FromStr for DedupRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "body-sha256" {
            return Ok(DedupRule::BodySha256);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return HeaderName::from_bytes(name.as_bytes())
                .map(DedupRule::Header)
                .map_err(|_| format!("`{name}` is not a valid header name"));
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            check_pointer(pointer)?;
            return Ok(DedupRule::JsonPointer(pointer.to_string()));
        }
        Err(format!(
            "unknown dedup rule `{text}` (expected `body-sha256`, `header:<name>` or \
             `json:/<pointer>`)"
        ))
    }
}

/// Refuses pointers that serde_json would read loosely instead of failing: one not starting
/// with `/` (only the empty pointer, the whole document, would work), and `~` not followed by
/// `0` or `1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "JSON pointer `{pointer}` must start with `/`, like `/id`"
        ));
    }
    let bytes = pointer.as_bytes();
    for (i, byte) in bytes.iter().enumerate() {
        if *byte == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')) {
            return Err(format!(
                "`~` in JSON pointer `{pointer}` must be followed by 0 or 1"
            ));
        }
    }
    Ok(())
}

impl fmt::Display for DedupRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupRule::BodySha256 => f.write_str("body-sha256"),
            DedupRule::Header(name) => write!(f, "header:{name}"),
            DedupRule::JsonPointer(pointer) => write!(f, "json:{pointer}"),
            DedupRule::Custom(custom) => f.write_str(custom.name),
            DedupRule::Signed(name) => f.write_str(name),
            // The TOML spelling of the list, so that it can be pasted into a config.
            DedupRule::FirstOf(rules) => {
                let quoted: Vec<String> = rules.iter().map(|r| format!("\"{r}\"")).collect();
                write!(f, "[{}]", quoted.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> DedupRule {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn body_sha256_is_lowercase_hex_of_the_raw_bytes() {
        let key = rule("body-sha256").extract(&HeaderMap::new(), b"abc");
        assert_eq!(
            key.as_deref(),
            Ok("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        let empty = rule("body-sha256").extract(&HeaderMap::new(), b"");
        assert_eq!(
            empty.as_deref(),
            Ok("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        );
    }

    #[test]
    fn header_rule_reads_one_trimmed_value() {
        let r = rule("header:X-Relya-Delivery-Id");
        let h = headers(&[("x-relya-delivery-id", "  dlv_1 ")]);
        assert_eq!(r.extract(&h, b"").as_deref(), Ok("dlv_1"));
        assert_eq!(
            r.extract(&HeaderMap::new(), b"").unwrap_err().to_string(),
            "missing header `x-relya-delivery-id`"
        );
        let twice = headers(&[("x-relya-delivery-id", "a"), ("x-relya-delivery-id", "b")]);
        assert_eq!(
            r.extract(&twice, b""),
            Err(DedupError::RepeatedHeader(
                "x-relya-delivery-id".to_string()
            ))
        );
        let blank = headers(&[("x-relya-delivery-id", " ")]);
        assert_eq!(r.extract(&blank, b""), Err(DedupError::Empty));
        let mut binary = HeaderMap::new();
        binary.insert(
            "x-relya-delivery-id",
            http::HeaderValue::from_bytes(b"\xc3\xa9").unwrap(),
        );
        assert_eq!(
            r.extract(&binary, b""),
            Err(DedupError::HeaderNotText("x-relya-delivery-id".to_string()))
        );
    }

    #[test]
    fn json_rule_takes_strings_verbatim_and_numbers_as_json_text() {
        let h = HeaderMap::new();
        let body = br#"{"id":"evt_1","n":42,"f":1.5,"data":{"a/b":" x "},"t":true,"e":""}"#;
        assert_eq!(rule("json:/id").extract(&h, body).as_deref(), Ok("evt_1"));
        assert_eq!(rule("json:/n").extract(&h, body).as_deref(), Ok("42"));
        assert_eq!(rule("json:/f").extract(&h, body).as_deref(), Ok("1.5"));
        assert_eq!(
            rule("json:/data/a~1b").extract(&h, body).as_deref(),
            Ok(" x ")
        );
        assert_eq!(rule("json:/e").extract(&h, body), Err(DedupError::Empty));
    }

    #[test]
    fn json_rule_errors_read_well() {
        let h = HeaderMap::new();
        let body = br#"{"t":true,"o":{},"a":[1],"z":null}"#;
        let message = |r: &str, b: &[u8]| rule(r).extract(&h, b).unwrap_err().to_string();
        assert_eq!(message("json:/id", b"id=1"), "body is not JSON");
        assert_eq!(message("json:/id", body), "no value at `/id`");
        for pointer in ["/t", "/o", "/a", "/z"] {
            let text = format!("value at `{pointer}` is not a string or number");
            assert_eq!(message(&format!("json:{pointer}"), body), text);
        }
    }

    #[test]
    fn keys_are_capped_at_512_bytes() {
        let h = HeaderMap::new();
        let fits = format!(r#"{{"id":"{}"}}"#, "a".repeat(MAX_KEY_BYTES));
        let over = format!(r#"{{"id":"{}"}}"#, "a".repeat(MAX_KEY_BYTES + 1));
        assert_eq!(
            rule("json:/id")
                .extract(&h, fits.as_bytes())
                .map(|k| k.len()),
            Ok(512)
        );
        assert_eq!(
            rule("json:/id")
                .extract(&h, over.as_bytes())
                .unwrap_err()
                .to_string(),
            "dedup key longer than 512 bytes"
        );
    }

    #[test]
    fn rules_round_trip_through_text() {
        for text in [
            "body-sha256",
            "header:x-github-delivery",
            "json:/id",
            "json:/data/a~1b~0c",
        ] {
            assert_eq!(rule(text).to_string(), text);
            assert_eq!(rule(&rule(text).to_string()), rule(text));
        }
        // Header names are case-insensitive and shown lowercase.
        assert_eq!(rule("header:Webhook-Id").to_string(), "header:webhook-id");
        assert_eq!(
            rule("header:Webhook-Id"),
            DedupRule::Header(HeaderName::from_static("webhook-id"))
        );
    }

    fn first_byte(_: &HeaderMap, body: &[u8]) -> Result<String, DedupError> {
        match body.first() {
            Some(byte) => Ok(format!("byte-{byte}")),
            None => Err(DedupError::Custom("the body is empty".to_string())),
        }
    }

    #[test]
    fn a_custom_key_runs_its_function_under_the_same_limits() {
        let custom = DedupRule::Custom(CustomKey {
            name: "first-byte",
            key: first_byte,
            items: None,
        });
        let h = HeaderMap::new();
        assert_eq!(custom.extract(&h, b"A").as_deref(), Ok("byte-65"));
        assert_eq!(
            custom.extract(&h, b"").unwrap_err().to_string(),
            "the body is empty"
        );
        assert_eq!(custom.to_string(), "first-byte");
        assert_eq!(format!("{custom:?}"), "Custom(CustomKey(first-byte))");
        // The name is its identity; a config cannot name one.
        let renamed = DedupRule::Custom(CustomKey {
            name: "other",
            key: first_byte,
            items: None,
        });
        assert_ne!(custom, renamed);
        assert!("first-byte".parse::<DedupRule>().is_err());
        let long = DedupRule::Custom(CustomKey {
            name: "long",
            key: |_, body| Ok(String::from_utf8_lossy(body).into_owned()),
            items: None,
        });
        assert_eq!(
            long.extract(&h, "a".repeat(MAX_KEY_BYTES + 1).as_bytes()),
            Err(DedupError::TooLong)
        );
        assert_eq!(long.extract(&h, b""), Err(DedupError::Empty));
    }

    fn list(texts: &[&str]) -> DedupRule {
        DedupRule::first_of(texts.iter().map(|t| rule(t)).collect()).unwrap()
    }

    #[test]
    fn a_list_takes_the_first_rule_whose_source_is_there() {
        let r = list(&["header:x-shopify-event-id", "header:x-shopify-webhook-id"]);
        let both = headers(&[("x-shopify-event-id", "e1"), ("x-shopify-webhook-id", "w1")]);
        assert_eq!(r.extract(&both, b"").as_deref(), Ok("e1"));
        let second = headers(&[("x-shopify-webhook-id", "w1")]);
        assert_eq!(r.extract(&second, b"").as_deref(), Ok("w1"));
        assert_eq!(
            r.extract(&HeaderMap::new(), b"").unwrap_err().to_string(),
            "missing header `x-shopify-event-id`, and missing header `x-shopify-webhook-id`"
        );
        // A JSON rule is absent when the body is not JSON or has nothing at the pointer.
        let r = list(&["json:/event_id", "body-sha256"]);
        let sha_of_form = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"command=%2Fx"));
        assert_eq!(
            r.extract(&HeaderMap::new(), b"command=%2Fx"),
            Ok(sha_of_form)
        );
        assert_eq!(
            r.extract(&HeaderMap::new(), br#"{"event_id":"Ev1"}"#)
                .as_deref(),
            Ok("Ev1")
        );
        assert!(r.extract(&HeaderMap::new(), br#"{"id":1}"#).unwrap().len() == 64);
    }

    #[test]
    fn a_list_does_not_fall_back_past_a_present_but_bad_source() {
        let r = list(&["header:i-twilio-idempotency-token", "body-sha256"]);
        let twice = headers(&[
            ("i-twilio-idempotency-token", "a"),
            ("i-twilio-idempotency-token", "b"),
        ]);
        assert_eq!(
            r.extract(&twice, b"x"),
            Err(DedupError::RepeatedHeader(
                "i-twilio-idempotency-token".to_string()
            ))
        );
        let blank = headers(&[("i-twilio-idempotency-token", " ")]);
        assert_eq!(r.extract(&blank, b"x"), Err(DedupError::Empty));
        let r = list(&["json:/id", "body-sha256"]);
        assert_eq!(
            r.extract(&HeaderMap::new(), br#"{"id":true}"#),
            Err(DedupError::NotStringOrNumber("/id".to_string()))
        );
    }

    #[test]
    fn lists_are_checked_shown_as_toml_and_report_their_headers() {
        let r = list(&["header:X-A", "json:/id", "body-sha256"]);
        assert_eq!(
            r.to_string(),
            r#"["header:x-a", "json:/id", "body-sha256"]"#
        );
        assert_eq!(r.headers(), [&HeaderName::from_static("x-a")]);
        assert_eq!(list(&["header:x-a"]), rule("header:x-a"));
        assert_eq!(
            DedupRule::first_of(Vec::new()).unwrap_err(),
            "the dedup list is empty"
        );
        assert_eq!(
            DedupRule::first_of(vec![r.clone(), rule("body-sha256")]).unwrap_err(),
            "a dedup list cannot contain a list"
        );
        assert!(rule("body-sha256").headers().is_empty());
    }

    #[test]
    fn bad_rules_say_why() {
        let err = |text: &str| text.parse::<DedupRule>().unwrap_err();
        assert!(err("sha256").starts_with("unknown dedup rule `sha256`"));
        assert!(err("").starts_with("unknown dedup rule ``"));
        assert_eq!(err("header:"), "`` is not a valid header name");
        assert_eq!(err("header:x y"), "`x y` is not a valid header name");
        assert_eq!(
            err("json:id"),
            "JSON pointer `id` must start with `/`, like `/id`"
        );
        assert_eq!(
            err("json:"),
            "JSON pointer `` must start with `/`, like `/id`"
        );
        assert_eq!(
            err("json:/a~2"),
            "`~` in JSON pointer `/a~2` must be followed by 0 or 1"
        );
        assert_eq!(
            err("json:/a~"),
            "`~` in JSON pointer `/a~` must be followed by 0 or 1"
        );
    }
}
