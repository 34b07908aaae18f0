//! Static credentials: the provider signs nothing and sends a secret the user configured, in a
//! header (Asaas, Cielo), as `Authorization` verbatim (Rede, PicPay), as HTTP Basic (Vindi's
//! `user:password@` URL) or in the query string (Efí's `?hmac=`, Vindi's and iugu's token). A
//! generic [`Scheme`] the presets of those providers build.
//!
//! The received value and each secret are compared as SHA-256 digests, in constant time and
//! against every secret with no early exit, so neither the value nor its length leaks by
//! timing. Errors say whether the credential was there (`MissingHeader`, `MissingQuery`) and
//! otherwise only that it does not match (`Mismatch`): never a length, never a value.
//!
//! Nothing here covers the body: whoever holds the credential can send any body. The headers
//! that carry one are redacted before the event is stored ([`Credential::headers`]); the query
//! string is never stored.

use super::secret::STANDARD_PAD_INDIFFERENT;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderName;
use subtle::{Choice, ConstantTimeEq};

use super::preset::{Coverage, Scheme, Signed};
use super::{Checked, Request, Secret, VerifyError, find_secret, header};

/// Cielo lets a merchant register at most three custom headers.
pub const MAX_HEADERS: usize = 3;

/// Where the credential travels. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    /// One header whose whole value is one of the secrets (any of them: rotation).
    Header(HeaderName),
    /// Several headers, header `i` holding secret `i`; all of them must match.
    HeaderSet(Vec<HeaderName>),
    /// `Authorization: Basic base64(user:password)` equal to one of the `user:password`
    /// secrets. With `or_query`, a request without `Authorization` may carry a secret in that
    /// query parameter instead.
    Basic { or_query: Option<String> },
    /// A query parameter whose value is one of the secrets.
    Query(String),
    /// `Authorization` as the merchant registered it: its whole value is a secret, or its part
    /// after a `Bearer `/`Basic ` scheme is (either spelling of the secret matches).
    Authorization,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    form: Form,
}

fn digest(bytes: &[u8]) -> Vec<u8> {
    crate::digest::sha256(&[bytes]).to_vec()
}

impl Credential {
    /// A header holding one of the secrets.
    pub fn header(name: HeaderName) -> Self {
        Credential {
            form: Form::Header(name),
        }
    }

    /// Headers each holding the secret at its position (1 to [`MAX_HEADERS`], no repeats).
    /// `names` are as the user wrote them; errors are for the config report.
    pub fn header_set(names: &[String]) -> Result<Self, String> {
        if names.is_empty() || names.len() > MAX_HEADERS {
            return Err(format!(
                "`credential_headers` names 1 to {MAX_HEADERS} headers, not {}",
                names.len()
            ));
        }
        let mut parsed: Vec<HeaderName> = Vec::with_capacity(names.len());
        for name in names {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                format!("`credential_headers`: `{name}` is not a valid header name")
            })?;
            if parsed.contains(&header) {
                return Err(format!(
                    "`credential_headers` names `{header}` twice (header names ignore case)"
                ));
            }
            parsed.push(header);
        }
        Ok(Credential {
            form: Form::HeaderSet(parsed),
        })
    }

    /// HTTP Basic, `user:password` secrets.
    pub fn basic() -> Self {
        Credential {
            form: Form::Basic { or_query: None },
        }
    }

    /// HTTP Basic when the request has `Authorization`, else the query parameter `name`.
    pub fn basic_or_query(name: &str) -> Self {
        Credential {
            form: Form::Basic {
                or_query: Some(name.to_string()),
            },
        }
    }

    /// `Authorization` holding one of the secrets, with or without a `Bearer `/`Basic `.
    pub fn authorization() -> Self {
        Credential {
            form: Form::Authorization,
        }
    }

    /// A query parameter holding one of the secrets.
    pub fn query(name: &str) -> Self {
        Credential {
            form: Form::Query(name.to_string()),
        }
    }

    /// The request headers that carry the credential, to be redacted before storage
    /// (`Authorization` is redacted anyway, so Basic lists nothing).
    pub fn headers(&self) -> Vec<HeaderName> {
        match &self.form {
            Form::Header(name) => vec![name.clone()],
            Form::HeaderSet(names) => names.clone(),
            Form::Basic { .. } | Form::Query(_) | Form::Authorization => Vec::new(),
        }
    }
}

/// The one value of query parameter `name`, or why not.
fn query_value(request: &Request<'_>, name: &str) -> Result<Option<String>, VerifyError> {
    let mut values = request.query_values(name);
    match values.len() {
        0 => Ok(None),
        1 => {
            let value = values.pop().unwrap_or_default();
            if value.is_empty() {
                return Err(VerifyError::Malformed(format!(
                    "query parameter `{name}` is empty"
                )));
            }
            Ok(Some(value))
        }
        _ => Err(VerifyError::Malformed(format!(
            "query parameter `{name}` appears more than once"
        ))),
    }
}

/// The `user:password` bytes of an `Authorization: Basic` value.
fn basic_credentials(value: &str) -> Result<Vec<u8>, VerifyError> {
    let bad = || VerifyError::Malformed("header `authorization` is not `Basic <base64>`".into());
    let (scheme, encoded) = value.split_once(' ').ok_or_else(bad)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(bad());
    }
    STANDARD_PAD_INDIFFERENT
        .decode(encoded.trim())
        .map_err(|_| bad())
}

/// The index of the secret equal to `received`.
fn matching_secret(keys: &[Secret], received: &[u8]) -> Result<usize, VerifyError> {
    find_secret(keys, &[digest(received)], |key| digest(key.expose()))
}

impl Scheme for Credential {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let index = match &self.form {
            Form::Header(name) => {
                let value = header(request.headers, name.as_str())?;
                matching_secret(keys, value.as_bytes())
            }
            Form::HeaderSet(names) => {
                // Every header is read before anything is compared, and every comparison is
                // made: the answer does not say which header was wrong.
                let mut values = Vec::with_capacity(names.len());
                for name in names {
                    values.push(header(request.headers, name.as_str())?);
                }
                if keys.len() != values.len() {
                    // `check_keys` refuses this configuration; never a match.
                    return Err(VerifyError::Mismatch);
                }
                let mut all = Choice::from(1);
                for (value, key) in values.iter().zip(keys) {
                    all &= digest(value.as_bytes()).ct_eq(&digest(key.expose()));
                }
                if bool::from(all) {
                    Ok(0)
                } else {
                    Err(VerifyError::Mismatch)
                }
            }
            Form::Basic { or_query } => {
                let present = request.headers.contains_key(http::header::AUTHORIZATION);
                match or_query {
                    Some(param) if !present => {
                        let value = query_value(request, param)?
                            .ok_or_else(|| VerifyError::MissingQuery(param.clone()))?;
                        matching_secret(keys, value.as_bytes())
                    }
                    _ => {
                        let value = header(request.headers, "authorization")?;
                        matching_secret(keys, &basic_credentials(value)?)
                    }
                }
            }
            Form::Query(param) => {
                let value = query_value(request, param)?
                    .ok_or_else(|| VerifyError::MissingQuery(param.clone()))?;
                matching_secret(keys, value.as_bytes())
            }
            Form::Authorization => {
                let value = header(request.headers, "authorization")?;
                // Both spellings are compared, whatever the first gives: no early exit.
                let token = match value.split_once(' ') {
                    Some((scheme, token))
                        if scheme.eq_ignore_ascii_case("bearer")
                            || scheme.eq_ignore_ascii_case("basic") =>
                    {
                        token.trim_start()
                    }
                    _ => value,
                };
                let received = [digest(value.as_bytes()), digest(token.as_bytes())];
                find_secret(keys, &received, |key| digest(key.expose()))
            }
        };
        index.map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, delivery_id: &str) -> Option<Signed> {
        self.sign_with_keys(std::slice::from_ref(key), body, now, delivery_id)
    }

    /// A header set needs every secret (one per header); the other forms send the first.
    fn sign_with_keys(
        &self,
        keys: &[Secret],
        _body: &[u8],
        _now: i64,
        _delivery_id: &str,
    ) -> Option<Signed> {
        let text = |key: &Secret| String::from_utf8_lossy(key.expose()).into_owned();
        let first = keys.first()?;
        let query = |name: &str| Signed {
            headers: Vec::new(),
            query: Some(
                form_urlencoded::Serializer::new(String::new())
                    .append_pair(name, &text(first))
                    .finish(),
            ),
        };
        let basic = || {
            let value = format!("Basic {}", STANDARD.encode(first.expose()));
            Signed::from(vec![("authorization".to_string(), value)])
        };
        Some(match &self.form {
            Form::Header(name) => Signed::from(vec![(name.to_string(), text(first))]),
            Form::Authorization => Signed::from(vec![("authorization".to_string(), text(first))]),
            Form::HeaderSet(names) => Signed::from(
                names
                    .iter()
                    .zip(keys)
                    .map(|(name, key)| (name.to_string(), text(key)))
                    .collect::<Vec<_>>(),
            ),
            // A `user:password` secret goes as Basic; a token in the query string.
            Form::Basic {
                or_query: Some(name),
            } if !first.expose().contains(&b':') => query(name),
            Form::Basic { .. } => basic(),
            Form::Query(name) => query(name),
        })
    }

    fn check_keys(&self, count: usize) -> Result<(), String> {
        match &self.form {
            Form::HeaderSet(names) if names.len() != count => Err(format!(
                "`credential_headers` names {} header(s), so give {} secret(s), one per header \
                 in the same order (got {count})",
                names.len(),
                names.len()
            )),
            _ => Ok(()),
        }
    }

    fn coverage(&self) -> Coverage {
        Coverage::Credential
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::*;

    fn keys(secrets: &[&str]) -> Vec<Secret> {
        secrets
            .iter()
            .map(|s| Secret::new(s.as_bytes().to_vec()))
            .collect()
    }

    fn check(
        credential: &Credential,
        secrets: &[&str],
        pairs: &[(&str, &str)],
        query: Option<&str>,
    ) -> Result<usize, VerifyError> {
        let h = headers(pairs);
        let request = Request::new(&h, b"{}").with_query(query);
        credential
            .verify(&keys(secrets), &request, 0, 0)
            .map(|c| c.index)
    }

    fn token() -> Credential {
        Credential::header(HeaderName::from_static("x-token"))
    }

    #[test]
    fn a_header_token_matches_any_secret_and_reports_which() {
        let t = token();
        let both = ["old-token", "new-token"];
        assert_eq!(check(&t, &both, &[("X-Token", "old-token")], None), Ok(0));
        assert_eq!(check(&t, &both, &[("x-token", " new-token ")], None), Ok(1));
    }

    #[test]
    fn a_wrong_token_does_not_match_whatever_its_length() {
        let t = token();
        let secret = ["s3cret-token"];
        for wrong in [
            "s3cret-toke",
            "s3cret-token!",
            "S3CRET-TOKEN",
            "x",
            "s3cret-tokem",
        ] {
            let err = check(&t, &secret, &[("x-token", wrong)], None).unwrap_err();
            assert_eq!(err, VerifyError::Mismatch, "{wrong}");
            // The text says it does not match, and nothing about lengths or values.
            let text = err.to_string();
            assert_eq!(text, "signature does not match");
        }
    }

    #[test]
    fn a_missing_token_is_told_apart_from_a_wrong_one() {
        let t = token();
        assert_eq!(
            check(&t, &["s"], &[], None),
            Err(VerifyError::MissingHeader("x-token".to_string()))
        );
        assert!(matches!(
            check(&t, &["s"], &[("x-token", "s"), ("x-token", "s")], None),
            Err(VerifyError::Malformed(_))
        ));
        // The secret never shows in an error.
        let err = check(
            &t,
            &["s3cret"],
            &[("x-token", "s3cret"), ("x-token", "a")],
            None,
        );
        assert!(!err.unwrap_err().to_string().contains("s3cret"));
    }

    #[test]
    fn a_header_set_needs_every_header_right() {
        let names = ["X-Shop-Key".to_string(), "X-Other".to_string()];
        let set = Credential::header_set(&names).unwrap();
        let secrets = ["key-1", "other-2"];
        let both = [("x-shop-key", "key-1"), ("x-other", "other-2")];
        assert_eq!(check(&set, &secrets, &both, None), Ok(0));
        // Swapped, one wrong, one missing.
        let swapped = [("x-shop-key", "other-2"), ("x-other", "key-1")];
        assert_eq!(
            check(&set, &secrets, &swapped, None),
            Err(VerifyError::Mismatch)
        );
        let one_wrong = [("x-shop-key", "key-1"), ("x-other", "other-3")];
        assert_eq!(
            check(&set, &secrets, &one_wrong, None),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(&set, &secrets, &both[..1], None),
            Err(VerifyError::MissingHeader("x-other".to_string()))
        );
        assert_eq!(set.headers(), ["x-shop-key", "x-other"]);
    }

    #[test]
    fn a_header_set_is_checked_when_configured() {
        let err = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            Credential::header_set(&names).unwrap_err()
        };
        assert_eq!(err(&[]), "`credential_headers` names 1 to 3 headers, not 0");
        assert_eq!(
            err(&["a", "b", "c", "d"]),
            "`credential_headers` names 1 to 3 headers, not 4"
        );
        assert_eq!(
            err(&["X Key"]),
            "`credential_headers`: `X Key` is not a valid header name"
        );
        assert_eq!(
            err(&["X-Key", "x-key"]),
            "`credential_headers` names `x-key` twice (header names ignore case)"
        );
        let set = Credential::header_set(&["a".to_string(), "b".to_string()]).unwrap();
        assert!(set.check_keys(2).is_ok());
        assert_eq!(
            set.check_keys(1).unwrap_err(),
            "`credential_headers` names 2 header(s), so give 2 secret(s), one per header in \
             the same order (got 1)"
        );
        assert!(token().check_keys(5).is_ok());
    }

    #[test]
    fn basic_compares_the_decoded_user_and_password() {
        let b = Credential::basic();
        let secrets = ["vindi:p@ss:word", "other:pw"];
        let auth = format!("Basic {}", STANDARD.encode("vindi:p@ss:word"));
        assert_eq!(
            check(&b, &secrets, &[("authorization", &auth)], None),
            Ok(0)
        );
        let lower = format!("basic {}", STANDARD.encode("other:pw"));
        assert_eq!(
            check(&b, &secrets, &[("authorization", &lower)], None),
            Ok(1)
        );
        let wrong = format!("Basic {}", STANDARD.encode("vindi:p@ss"));
        assert_eq!(
            check(&b, &secrets, &[("authorization", &wrong)], None),
            Err(VerifyError::Mismatch)
        );
        for bad in ["Bearer abc", "Basic", "Basic !!!"] {
            assert!(
                matches!(
                    check(&b, &secrets, &[("authorization", bad)], None),
                    Err(VerifyError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            check(&b, &secrets, &[], None),
            Err(VerifyError::MissingHeader("authorization".to_string()))
        );
    }

    #[test]
    fn basic_or_query_takes_basic_when_present_else_the_parameter() {
        let b = Credential::basic_or_query("token");
        let secrets = ["user:pw", "tok_123"];
        let auth = format!("Basic {}", STANDARD.encode("user:pw"));
        assert_eq!(
            check(&b, &secrets, &[("authorization", &auth)], None),
            Ok(0)
        );
        assert_eq!(check(&b, &secrets, &[], Some("token=tok_123")), Ok(1));
        // A wrong Basic is not rescued by a right token.
        let wrong = format!("Basic {}", STANDARD.encode("user:nope"));
        assert_eq!(
            check(
                &b,
                &secrets,
                &[("authorization", &wrong)],
                Some("token=tok_123")
            ),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(&b, &secrets, &[], Some("other=1")),
            Err(VerifyError::MissingQuery("token".to_string()))
        );
    }

    #[test]
    fn a_query_secret_is_one_percent_decoded_value() {
        let q = Credential::query("hmac");
        let secrets = ["a/b c"];
        assert_eq!(
            check(&q, &secrets, &[], Some("hmac=a%2Fb%20c&ignorar=")),
            Ok(0)
        );
        assert_eq!(check(&q, &secrets, &[], Some("ignorar=&hmac=a/b+c")), Ok(0));
        assert_eq!(
            check(&q, &secrets, &[], Some("hmac=a/b+c/pix")),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(&q, &secrets, &[], None),
            Err(VerifyError::MissingQuery("hmac".to_string()))
        );
        for bad in ["hmac=", "hmac=a&hmac=a"] {
            assert!(
                matches!(
                    check(&q, &secrets, &[], Some(bad)),
                    Err(VerifyError::Malformed(_))
                ),
                "{bad}"
            );
        }
        // A secret in a header does not count.
        assert_eq!(
            check(&q, &secrets, &[("hmac", "a/b c")], None),
            Err(VerifyError::MissingQuery("hmac".to_string()))
        );
    }

    #[test]
    fn authorization_is_the_secret_with_or_without_its_scheme() {
        let a = Credential::authorization();
        let secrets = ["Bearer s3cr3t", "t0ken"];
        for (value, index) in [
            ("Bearer s3cr3t", Ok(0)),
            ("t0ken", Ok(1)),
            ("Bearer t0ken", Ok(1)),
            ("basic  t0ken", Ok(1)),
            ("Bearer s3cr3u", Err(VerifyError::Mismatch)),
            ("s3cr3t", Err(VerifyError::Mismatch)),
            ("Token t0ken", Err(VerifyError::Mismatch)),
        ] {
            assert_eq!(
                check(&a, &secrets, &[("authorization", value)], None),
                index,
                "{value}"
            );
        }
        assert_eq!(
            check(&a, &secrets, &[("x-token", "t0ken")], None),
            Err(VerifyError::MissingHeader("authorization".to_string()))
        );
        assert!(a.headers().is_empty()); // Authorization: redacted always
    }

    #[test]
    fn sign_gives_what_verify_takes() {
        let set = Credential::header_set(&["X-A".to_string(), "X-B".to_string()]).unwrap();
        let cases: [(Credential, &[&str]); 8] = [
            (Credential::authorization(), &["Bearer tok"]),
            (Credential::authorization(), &["tok"]),
            (token(), &["tok"]),
            (set, &["one", "two"]),
            (Credential::basic(), &["u:p"]),
            (Credential::basic_or_query("token"), &["u:p"]),
            (Credential::basic_or_query("token"), &["t&k=1"]),
            (Credential::query("hmac"), &["s+c/r t"]),
        ];
        for (credential, secrets) in cases {
            let k = keys(secrets);
            let signed = credential.sign_with_keys(&k, b"{}", 0, "").unwrap();
            let h = headers(&signed.headers);
            let request = Request::new(&h, b"{}").with_query(signed.query.as_deref());
            assert_eq!(
                credential.verify(&k, &request, 0, 0).map(|c| c.index),
                Ok(0),
                "{signed:?}"
            );
        }
        let signed = Credential::query("hmac")
            .sign(&keys(&["s+c/r t"])[0], b"", 0, "")
            .unwrap();
        assert_eq!(signed.query.as_deref(), Some("hmac=s%2Bc%2Fr+t"));
        assert!(signed.headers.is_empty());
    }
}
