//! The generic HMAC scheme: one header carrying `[prefix]<hex or base64 MAC>` of a template
//! built from the raw body and, optionally, other headers such as a timestamp.
//!
//! `provider = "hmac"` builds one from [`HmacOptions`]; plowf, github and pagarme are presets
//! of it, so adjusting one of them means changing a few builder calls.

use super::secret::STANDARD_PAD_INDIFFERENT;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName};

pub use super::secret::Algorithm;

use super::preset::{Coverage, Scheme, Signed};
use super::{
    Checked, Request, Secret, VerifyError, check_window, find_secret, header, parse_timestamp,
};

/// The raw `[endpoint.signature]` table for `provider = "hmac"`.
#[derive(Debug, Clone, Default, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HmacOptions {
    /// Header carrying the signature, e.g. "X-Signature" (case-insensitive).
    pub header: String,
    /// "sha256" (default), "sha512" or "sha1". SHA-1 only when asked for by name.
    pub algorithm: Option<String>,
    /// "hex" (default, either case accepted) or "base64".
    pub encoding: Option<String>,
    /// Text before the encoded MAC, e.g. "sha256="; when set, a signature without it is refused.
    pub prefix: Option<String>,
    /// Header holding unix seconds, checked against the tolerance both ways. The template must
    /// include it, or the timestamp would not be signed.
    pub timestamp_header: Option<String>,
    /// What is signed; default "{body}". Placeholders: `{body}` (exactly once) and
    /// `{header:<name>}`, e.g. "{header:x-timestamp}.{body}".
    pub template: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

impl Encoding {
    fn parse(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "hex" => Ok(Encoding::Hex),
            "base64" => Ok(Encoding::Base64),
            _ => Err(format!("unknown encoding `{name}` (known: hex, base64)")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
        }
    }

    /// Decodes the MAC text of header `header`, or says that it is not in this encoding.
    pub(super) fn read(self, header: &str, text: &str) -> Result<Vec<u8>, VerifyError> {
        self.decode(text).ok_or_else(|| {
            VerifyError::Malformed(format!("header `{header}` is not {}", self.name()))
        })
    }

    /// Hex in either case; base64 with or without padding. Lenient on spelling only: the
    /// decoded bytes are what gets compared.
    fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => hex::decode(text).ok(),
            Encoding::Base64 => STANDARD_PAD_INDIFFERENT.decode(text).ok(),
        }
    }

    fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(bytes),
            Encoding::Base64 => STANDARD.encode(bytes),
        }
    }
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Body,
    Header(HeaderName),
}

/// A configured HMAC scheme. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacScheme {
    /// Header carrying the signature.
    header: HeaderName,
    algorithm: Algorithm,
    encoding: Encoding,
    /// Text before the encoded MAC, such as `sha256=`.
    prefix: Option<String>,
    /// Whether a signature without `prefix` is malformed. Configured prefixes are required;
    /// plowf's is optional because its format is not documented.
    prefix_required: bool,
    /// Header holding unix seconds; `from_options` makes sure the template signs it.
    timestamp_header: Option<HeaderName>,
    /// Headers that `sign` fills with the delivery id (github's `x-github-delivery`). Unsigned,
    /// so verification ignores them.
    delivery_headers: Vec<HeaderName>,
    /// The signed content, in order; holds exactly one `Part::Body`.
    template: Vec<Part>,
    /// Whether an empty body is refused before any MAC is computed (Shopify's SDK does).
    body_required: bool,
}

impl HmacScheme {
    /// Whether a timestamp header is part of what is signed.
    pub(super) fn signs_timestamp(&self) -> bool {
        self.timestamp_header.is_some()
    }
}

impl HmacScheme {
    /// An HMAC of the raw body alone, with no prefix: the common case, for presets.
    pub fn over_raw_body(header: HeaderName, algorithm: Algorithm, encoding: Encoding) -> Self {
        HmacScheme {
            header,
            algorithm,
            encoding,
            prefix: None,
            prefix_required: false,
            timestamp_header: None,
            delivery_headers: Vec::new(),
            template: vec![Part::Body],
            body_required: false,
        }
    }

    /// Signs `<before><timestamp header><between><body>` (Slack's and Zoom's
    /// `v0:<ts>:<body>`), with the timestamp checked against the window.
    pub fn with_timestamp(mut self, header: HeaderName, before: &str, between: &str) -> Self {
        self.template = [
            (!before.is_empty()).then(|| Part::Text(before.to_string())),
            Some(Part::Header(header.clone())),
            (!between.is_empty()).then(|| Part::Text(between.to_string())),
            Some(Part::Body),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.timestamp_header = Some(header);
        self
    }

    /// Refuses an empty body as malformed.
    pub fn with_body_required(mut self) -> Self {
        self.body_required = true;
        self
    }

    /// Text before the MAC; `required` says whether a signature without it is malformed.
    pub fn with_prefix(mut self, prefix: &str, required: bool) -> Self {
        self.prefix = Some(prefix.to_string());
        self.prefix_required = required;
        self
    }

    /// A header `sign` puts the delivery id in (may be called more than once).
    pub fn with_delivery_header(mut self, header: HeaderName) -> Self {
        self.delivery_headers.push(header);
        self
    }

    /// Validates a `[signature]` table. Errors are short sentences for the config report.
    pub fn from_options(options: &HmacOptions) -> Result<Self, String> {
        let header = header_name(&options.header, "header")?;
        let algorithm = options
            .algorithm
            .as_deref()
            .map_or(Ok(Algorithm::Sha256), Algorithm::parse)?;
        let encoding = options
            .encoding
            .as_deref()
            .map_or(Ok(Encoding::Hex), Encoding::parse)?;
        let prefix = match options.prefix.as_deref() {
            Some("") => return Err("`prefix` is empty; leave it out instead".to_string()),
            prefix => prefix.map(str::to_string),
        };
        let timestamp_header = match options.timestamp_header.as_deref() {
            Some(name) => Some(header_name(name, "timestamp_header")?),
            None => None,
        };
        let template = parse_template(options.template.as_deref().unwrap_or("{body}"))?;
        if let Some(name) = &timestamp_header
            && !template.contains(&Part::Header(name.clone()))
        {
            return Err(format!(
                "the template must include `{{header:{name}}}`, or the timestamp is not signed"
            ));
        }
        if template.contains(&Part::Header(header.clone())) {
            return Err(format!(
                "the template cannot include the signature header `{header}`"
            ));
        }
        Ok(HmacScheme {
            header,
            algorithm,
            encoding,
            prefix_required: prefix.is_some(),
            prefix,
            timestamp_header,
            delivery_headers: Vec::new(),
            template,
            body_required: false,
        })
    }

    /// Returns the index of the matching key. See the module `verify` for the error order.
    pub(super) fn verify(
        &self,
        keys: &[Secret],
        headers: &HeaderMap,
        body: &[u8],
        now: i64,
        tolerance_secs: u64,
    ) -> Result<usize, VerifyError> {
        let name = self.header.as_str();
        let value = header(headers, name)?;
        let encoded = match self.prefix.as_deref().map(|p| (p, value.strip_prefix(p))) {
            Some((_, Some(rest))) => rest,
            Some((prefix, None)) if self.prefix_required => {
                return Err(VerifyError::Malformed(format!(
                    "header `{name}` does not start with `{prefix}`"
                )));
            }
            _ => value,
        };
        let received = self.encoding.read(name, encoded)?;
        self.algorithm.expect_len(name, &received)?;
        if self.body_required && body.is_empty() {
            return Err(VerifyError::Malformed(
                "the body is empty, and this provider signs a non-empty body".to_string(),
            ));
        }
        let timestamp = match &self.timestamp_header {
            Some(ts) => Some(parse_timestamp(header(headers, ts.as_str())?, ts.as_str())?),
            None => None,
        };
        let mut message: Vec<&[u8]> = Vec::with_capacity(self.template.len());
        for part in &self.template {
            message.push(match part {
                Part::Text(text) => text.as_bytes(),
                Part::Body => body,
                Part::Header(name) => header(headers, name.as_str())?.as_bytes(),
            });
        }
        let index = find_secret(keys, &[received], |key| key.mac(self.algorithm, &message))?;
        if let Some(timestamp) = timestamp {
            check_window(timestamp, now, tolerance_secs)?;
        }
        Ok(index)
    }

    /// The headers a sender would add. A template header gets `now` if it is the timestamp
    /// header and `delivery_id` otherwise (the only other thing a sender is likely to sign).
    pub(super) fn sign(
        &self,
        key: &Secret,
        body: &[u8],
        now: i64,
        delivery_id: &str,
    ) -> Vec<(String, String)> {
        let mut headers = vec![(self.header.to_string(), String::new())];
        let mut message = Vec::new();
        for part in &self.template {
            match part {
                Part::Text(text) => message.extend_from_slice(text.as_bytes()),
                Part::Body => message.extend_from_slice(body),
                Part::Header(name) => {
                    let value = if Some(name) == self.timestamp_header.as_ref() {
                        now.to_string()
                    } else {
                        delivery_id.to_string()
                    };
                    message.extend_from_slice(value.as_bytes());
                    if !headers.iter().any(|(n, _)| n == name.as_str()) {
                        headers.push((name.to_string(), value));
                    }
                }
            }
        }
        let mac = self
            .encoding
            .encode(&self.algorithm.mac(key.expose(), &[&message]));
        // An optional prefix is left out: both forms verify, and the bare one is the simpler.
        let prefix = match &self.prefix {
            Some(prefix) if self.prefix_required => prefix.as_str(),
            _ => "",
        };
        headers[0].1 = format!("{prefix}{mac}");
        for name in &self.delivery_headers {
            headers.push((name.to_string(), delivery_id.to_string()));
        }
        headers
    }
}

fn header_name(name: &str, key: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{key}` is not a valid header name: `{name}`"))
}

/// Splits a template into text, `{body}` and `{header:<name>}` parts.
fn parse_template(template: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in template `{template}`"))?;
        let placeholder = &after[..close];
        parts.push(match placeholder.strip_prefix("header:") {
            Some(name) => Part::Header(header_name(name, "{header:...}")?),
            None if placeholder == "body" => Part::Body,
            None => {
                return Err(format!(
                    "unknown placeholder `{{{placeholder}}}` in template \
                     (known: `{{body}}`, `{{header:<name>}}`)"
                ));
            }
        });
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    // Without the body nothing the sender says would be signed; twice is surely a mistake.
    if parts.iter().filter(|part| **part == Part::Body).count() != 1 {
        return Err("the template must contain `{body}` exactly once".to_string());
    }
    Ok(parts)
}

impl Scheme for HmacScheme {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        // The inherent method of the same name: this scheme reads headers and body only.
        HmacScheme::verify(
            self,
            keys,
            request.headers,
            request.body,
            now,
            tolerance_secs,
        )
        .map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        Some(HmacScheme::sign(self, key, body, now, delivery_id).into())
    }

    fn signs_timestamp(&self) -> bool {
        HmacScheme::signs_timestamp(self)
    }

    /// The body (every template has it) and the template's headers.
    fn coverage(&self) -> Coverage {
        let headers = self.template.iter().filter_map(|part| match part {
            Part::Header(name) => Some(name.clone()),
            Part::Text(_) | Part::Body => None,
        });
        Coverage::Signed {
            headers: headers.collect(),
            body: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::*;

    fn scheme(options: HmacOptions) -> HmacScheme {
        HmacScheme::from_options(&options).unwrap()
    }

    fn keys(secrets: &[&str]) -> Vec<Secret> {
        secrets
            .iter()
            .map(|s| Secret::new(s.as_bytes().to_vec()))
            .collect()
    }

    fn options(header: &str) -> HmacOptions {
        HmacOptions {
            header: header.to_string(),
            ..HmacOptions::default()
        }
    }

    // Official vector: python-slack-sdk `test_signature_verifier.py` (values from Slack's docs),
    // expressed as a generic scheme: prefix `v0=`, template `v0:{ts}:{body}`, timestamp header.
    #[test]
    fn verifies_slack_official_vector_as_a_template() {
        let slack = scheme(HmacOptions {
            prefix: Some("v0=".to_string()),
            timestamp_header: Some("X-Slack-Request-Timestamp".to_string()),
            template: Some("v0:{header:x-slack-request-timestamp}:{body}".to_string()),
            ..options("X-Slack-Signature")
        });
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let h = headers(&[
            ("X-Slack-Request-Timestamp", "1531420618"),
            (
                "X-Slack-Signature",
                "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
            ),
        ]);
        let k = keys(&["8f742231b10e8888abcd99yyyzzz85a5"]);
        assert_eq!(
            slack.verify(&k, &h, body.as_bytes(), 1531420618, 300),
            Ok(0)
        );
        assert_eq!(
            slack.verify(&k, &h, body.as_bytes(), 1531420618 + 301, 300),
            Err(VerifyError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            slack.verify(&k, &h, body.as_bytes(), 1531420618 - 301, 300),
            Err(VerifyError::StaleTimestamp { skew_secs: -301 })
        );
        // A forged request with an old timestamp learns nothing about the window.
        let wrong = keys(&["not-the-secret"]);
        assert_eq!(
            slack.verify(&wrong, &h, body.as_bytes(), 1531420618 + 301, 300),
            Err(VerifyError::Mismatch)
        );
    }

    // Computed vectors (Python stdlib, signature-schemes.md §7.2), not provider-issued.
    #[test]
    fn verifies_base64_with_and_without_prefix_and_sha1_when_asked() {
        let typeform = scheme(HmacOptions {
            encoding: Some("base64".to_string()),
            prefix: Some("sha256=".to_string()),
            ..options("Typeform-Signature")
        });
        let h = headers(&[(
            "typeform-signature",
            "sha256=avoM/oP7xoyOktm7gKBSCvy0i7ltp/sf6guWr8qLwwA=",
        )]);
        let body = br#"{"event_id":"01ABC","event_type":"form_response"}"#;
        assert_eq!(
            typeform.verify(&keys(&["typeform_secret"]), &h, body, 0, 300),
            Ok(0)
        );

        let shopify = scheme(HmacOptions {
            encoding: Some("base64".to_string()),
            ..options("X-Shopify-Hmac-Sha256")
        });
        let h = headers(&[(
            "X-Shopify-Hmac-Sha256",
            "LnwdZPLBbdjkBwPD/lDL1/rYEGby/GHPtL1aAH6Dxjc=",
        )]);
        let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
        assert_eq!(
            shopify.verify(&keys(&["shpss_test_secret"]), &h, body, 0, 300),
            Ok(0)
        );

        let intercom = HmacOptions {
            algorithm: Some("sha1".to_string()),
            prefix: Some("sha1=".to_string()),
            ..options("X-Hub-Signature")
        };
        let h = headers(&[(
            "X-Hub-Signature",
            "sha1=3faebb0034e47694de045ab8bc314399711ff673",
        )]);
        let body = br#"{"type":"notification_event","id":"notif_1"}"#;
        let k = keys(&["intercom_client_secret"]);
        assert_eq!(scheme(intercom.clone()).verify(&k, &h, body, 0, 300), Ok(0));
        // The same header under the default algorithm is refused: SHA-1 only by name.
        let default_alg = scheme(HmacOptions {
            algorithm: None,
            ..intercom
        });
        assert!(matches!(
            default_alg.verify(&k, &h, body, 0, 300),
            Err(VerifyError::Malformed(_))
        ));
    }

    // Computed here with Python's hmac/hashlib/base64, not provider-issued.
    #[test]
    fn verifies_sha512_base64_with_a_timestamp_template() {
        let s = scheme(HmacOptions {
            algorithm: Some("SHA512".to_string()),
            encoding: Some("base64".to_string()),
            timestamp_header: Some("x-ts".to_string()),
            template: Some("{header:x-ts}.{body}".to_string()),
            ..options("x-sig")
        });
        let h = headers(&[
            ("x-ts", "1700000000"),
            (
                "x-sig",
                "7uNV1GUvuc37UTKc0VEly4FFkw0vdUEaedFXXeka4+mDcjC/eJ/cLY7XQ0LtJLPYMGK/t8CByKl3aISZ51V7yg==",
            ),
        ]);
        let k = keys(&["generic_secret"]);
        assert_eq!(s.verify(&k, &h, br#"{"a":1}"#, 1_700_000_000, 300), Ok(0));
        let bad_ts = headers(&[("x-ts", "soon"), ("x-sig", "AAAA")]);
        assert!(matches!(
            s.verify(&k, &bad_ts, b"", 0, 300),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn a_configured_prefix_is_required() {
        let s = scheme(HmacOptions {
            prefix: Some("sha256=".to_string()),
            ..options("x-sig")
        });
        let k = keys(&["k"]);
        let signed = headers(&s.sign(&k[0], b"hi", 0, ""));
        assert_eq!(s.verify(&k, &signed, b"hi", 0, 300), Ok(0));
        let bare = signed
            .get("x-sig")
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches("sha256=");
        let h = headers(&[("x-sig", bare)]);
        assert!(matches!(
            s.verify(&k, &h, b"hi", 0, 300),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn malformed_signatures_are_told_apart_from_mismatches() {
        let s = scheme(options("x-sig"));
        let k = keys(&["k"]);
        for bad in ["zz", "abc", "00"] {
            let h = headers(&[("x-sig", bad)]);
            assert!(
                matches!(
                    s.verify(&k, &h, b"", 0, 300),
                    Err(VerifyError::Malformed(_))
                ),
                "{bad}"
            );
        }
        let h = headers(&[("x-sig", "00".repeat(32))]);
        assert_eq!(s.verify(&k, &h, b"", 0, 300), Err(VerifyError::Mismatch));
        assert_eq!(
            s.verify(&k, &HeaderMap::new(), b"", 0, 300),
            Err(VerifyError::MissingHeader("x-sig".to_string()))
        );
    }

    #[test]
    fn sign_fills_template_headers_and_round_trips() {
        let s = scheme(HmacOptions {
            prefix: Some("v1=".to_string()),
            timestamp_header: Some("X-Timestamp".to_string()),
            template: Some("{header:x-timestamp}:{header:x-id}:{body}".to_string()),
            ..options("X-Signature")
        });
        let k = keys(&["k"]);
        let signed = s.sign(&k[0], b"body", 42, "dlv_9");
        let names: Vec<_> = signed
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(names[1..], [("x-timestamp", "42"), ("x-id", "dlv_9")]);
        assert!(names[0].1.starts_with("v1="));
        assert_eq!(s.verify(&k, &headers(&signed), b"body", 42, 300), Ok(0));
        // The id is signed: changing it breaks the MAC.
        let mut h = headers(&signed);
        h.insert("x-id", "dlv_10".parse().unwrap());
        assert_eq!(
            s.verify(&k, &h, b"body", 42, 300),
            Err(VerifyError::Mismatch)
        );
        h.remove("x-id");
        assert_eq!(
            s.verify(&k, &h, b"body", 42, 300),
            Err(VerifyError::MissingHeader("x-id".to_string()))
        );
    }

    #[test]
    fn options_are_validated() {
        let err = |o: HmacOptions| HmacScheme::from_options(&o).unwrap_err();
        assert_eq!(err(options("")), "`header` is not a valid header name: ``");
        assert_eq!(
            err(options("X Sig")),
            "`header` is not a valid header name: `X Sig`"
        );
        assert_eq!(
            err(HmacOptions {
                prefix: Some(String::new()),
                ..options("x")
            }),
            "`prefix` is empty; leave it out instead"
        );
        assert_eq!(
            err(HmacOptions {
                template: Some("{header:x-ts}".to_string()),
                ..options("x")
            }),
            "the template must contain `{body}` exactly once"
        );
        assert_eq!(
            err(HmacOptions {
                template: Some("{body}{body}".to_string()),
                ..options("x")
            }),
            "the template must contain `{body}` exactly once"
        );
        assert!(
            err(HmacOptions {
                template: Some("{ts}.{body}".to_string()),
                ..options("x")
            })
            .starts_with("unknown placeholder `{ts}`")
        );
        assert!(
            err(HmacOptions {
                template: Some("{body".to_string()),
                ..options("x")
            })
            .starts_with("unclosed `{`")
        );
        assert_eq!(
            err(HmacOptions {
                timestamp_header: Some("X-Ts".to_string()),
                ..options("x")
            }),
            "the template must include `{header:x-ts}`, or the timestamp is not signed"
        );
        assert_eq!(
            err(HmacOptions {
                template: Some("{header:X}{body}".to_string()),
                ..options("x")
            }),
            "the template cannot include the signature header `x`"
        );
        assert_eq!(
            err(HmacOptions {
                timestamp_header: Some("a b".to_string()),
                ..options("x")
            }),
            "`timestamp_header` is not a valid header name: `a b`"
        );
    }

    #[test]
    fn options_deserialize_and_refuse_unknown_keys() {
        let parsed: HmacOptions =
            serde_json::from_str(r#"{"header":"X-Sig","algorithm":"sha1"}"#).unwrap();
        assert_eq!(
            parsed,
            HmacOptions {
                algorithm: Some("sha1".to_string()),
                ..options("X-Sig")
            }
        );
        assert!(serde_json::from_str::<HmacOptions>(r#"{"header":"x","secret":"s"}"#).is_err());
    }
}
