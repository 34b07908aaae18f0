//! Who may see the status page and press its buttons. [`Guard`] owns the admin token (if
//! any), the open sessions (`sessions`), this process's random key for form tokens, and the
//! checks:
//! - without a token the page is open, which config allows only on a loopback admin listener
//!   (whose `Host` rule, `admin`'s, keeps rebinding pages out). A visitor still gets a random
//!   cookie of its own, which its forms' tokens are bound to;
//! - with one, a request needs a session cookie (`HttpOnly; SameSite=Strict`, a fresh random
//!   one per login, ended by logging out) or `Authorization: Bearer TOKEN` (scripts). Every
//!   presented token takes its turn in `throttle`'s lane, and a wrong one is logged there;
//! - a POST also needs its session's form token, an HMAC of the session's cookie under this
//!   process's key (so no page served without a session carries one, the login page
//!   included), and, when the browser sends them, `Sec-Fetch-Site: same-origin` and an
//!   `Origin` equal to the page's own. A POST with a bearer token needs no form token: no
//!   browser sends that header on another site's behalf.
//!
//! Every comparison of a secret is constant-time (over SHA-256 digests, so lengths leak
//! nothing either).

use std::io::Read;
use std::sync::Mutex;

use http::{HeaderMap, header};
use std::time::Instant;
use subtle::ConstantTimeEq;

use super::sessions::Sessions;
use super::throttle::{FailureLog, Lane, Way};
use crate::digest::{MacHash, MacKey};
use crate::verify::Secret;

/// The session cookie's name.
pub const COOKIE: &str = "portaria_status";

/// The checks of one process's status page.
pub struct Guard {
    token: Option<Secret>,
    /// Form tokens are HMACs of the session's cookie under this random key.
    forms: MacKey,
    sessions: Mutex<Sessions>,
    lane: Lane,
    pub(super) failures: FailureLog,
}

/// Who a request that passed [`Guard::check`] comes from.
#[derive(Debug, Clone, Default)]
pub struct Visitor {
    /// Its session cookie's value: a login's session, or the open page's visitor cookie.
    session: Option<String>,
    /// A cookie to set with the answer (the open page's first visit).
    pub new_cookie: Option<String>,
    /// It showed the admin token itself (`Authorization: Bearer`): a script, no browser.
    bearer: bool,
}

/// Why a request is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No (or a wrong) session or token: log in.
    Unauthenticated,
    /// A POST from another site, or without its session's form token.
    CrossSite,
}

impl Refused {
    pub fn message(self) -> &'static str {
        match self {
            Refused::Unauthenticated => "log in with the admin token first",
            Refused::CrossSite => {
                "this form came from another site or an older page: reload the page and try again"
            }
        }
    }
}

impl Guard {
    /// A guard with a fresh random form key (from the kernel's generator) and no session.
    pub fn new(token: Option<Secret>) -> std::io::Result<Guard> {
        Ok(Guard {
            token,
            forms: MacKey::new(MacHash::Sha256, &random_bytes()?),
            sessions: Mutex::new(Sessions::default()),
            lane: Lane::default(),
            failures: FailureLog::default(),
        })
    }

    /// No token is configured: the page is open (on loopback only).
    pub fn is_open(&self) -> bool {
        self.token.is_none()
    }

    /// The token `visitor`'s forms carry; None without a session (a bearer token needs none).
    pub fn csrf(&self, visitor: &Visitor) -> Option<String> {
        let session = visitor.session.as_ref()?;
        Some(hex::encode(self.forms.mac(&[b"csrf:", session.as_bytes()])))
    }

    /// Checks `given` against the admin token, in the lane; a wrong one is counted.
    pub async fn token_matches(&self, given: &str, way: Way) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let right = self
            .lane
            .check(|| same(token.expose(), given.trim().as_bytes()))
            .await;
        if !right {
            self.failures.note(way);
        }
        right
    }

    /// Opens a new session (a successful login); returns its cookie.
    pub fn log_in(&self) -> std::io::Result<String> {
        let id = hex::encode(random_bytes()?);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.open(&id, Instant::now());
        }
        Ok(cookie(&id))
    }

    /// Ends `visitor`'s session (logging out): its cookie opens nothing any more.
    pub fn log_out(&self, visitor: &Visitor) {
        if let (Some(id), Ok(mut sessions)) = (&visitor.session, self.sessions.lock()) {
            sessions.end(id);
        }
    }

    /// May this request read the page? Who it is, if so.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Visitor, Refused> {
        let cookie = cookies(headers)
            .filter(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value)
            .find(|value| is_session_id(value));
        if self.is_open() {
            return Ok(match cookie {
                Some(id) => Visitor {
                    session: Some(id.to_string()),
                    ..Visitor::default()
                },
                // Without a random id (the kernel's generator failing), no session: the page
                // is shown, and its forms are refused.
                None => match random_bytes() {
                    Ok(bytes) => {
                        let id = hex::encode(bytes);
                        Visitor {
                            new_cookie: Some(self::cookie(&id)),
                            session: Some(id),
                            bearer: false,
                        }
                    }
                    Err(_) => Visitor::default(),
                },
            });
        }
        let now = Instant::now();
        if let Some(id) = cookie
            && self
                .sessions
                .lock()
                .is_ok_and(|mut sessions| sessions.touch(id, now))
        {
            return Ok(Visitor {
                session: Some(id.to_string()),
                ..Visitor::default()
            });
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match bearer {
            Some(given) if self.token_matches(given, Way::Bearer).await => Ok(Visitor {
                bearer: true,
                ..Visitor::default()
            }),
            _ => Err(Refused::Unauthenticated),
        }
    }

    /// May this POST change something? Its form's `csrf` field (unless it came with a bearer
    /// token) and, if sent, the browser's own word on where it came from.
    pub fn check_post(
        &self,
        headers: &HeaderMap,
        visitor: &Visitor,
        form_csrf: Option<&str>,
    ) -> Result<(), Refused> {
        let token_ok = visitor.bearer
            || self
                .csrf(visitor)
                .zip(form_csrf)
                .is_some_and(|(csrf, given)| same(given.as_bytes(), csrf.as_bytes()));
        if token_ok && same_origin(headers) {
            Ok(())
        } else {
            Err(Refused::CrossSite)
        }
    }
}

/// The browser's word on where a POST came from, when it gives one: `Sec-Fetch-Site` of
/// `same-origin` (or `none`: typed by the user), an `Origin` equal to the page's own.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let site_ok = match header_str(headers, "sec-fetch-site") {
        None => true,
        Some(site) => site == "same-origin" || site == "none",
    };
    let origin_ok = match header_str(headers, "origin") {
        None => true,
        Some(origin) => {
            header_str(headers, "host").is_some_and(|host| origin == format!("http://{host}"))
        }
    };
    site_ok && origin_ok
}

/// The `Set-Cookie` value of session `id`.
fn cookie(id: &str) -> String {
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/")
}

/// What this process's ids look like: 64 hex digits (a forged value of another shape is no
/// session, and is not taken as the open page's visitor cookie either).
fn is_session_id(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `name=value` pairs of every `Cookie` header.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Constant-time equality of two secrets of any length.
fn same(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (crate::digest::sha256(&[a]), crate::digest::sha256(&[b]));
    bool::from(a.ct_eq(&b))
}

/// 32 random bytes from the kernel.
fn random_bytes() -> std::io::Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap()))
            .collect()
    }

    fn value(set_cookie: &str) -> &str {
        set_cookie.split(';').next().unwrap()
    }

    #[tokio::test]
    async fn an_open_page_gives_each_visitor_a_cookie_its_forms_are_bound_to() {
        let guard = Guard::new(None).unwrap();
        let first = guard.check(&HeaderMap::new()).await.unwrap();
        let set = first
            .new_cookie
            .clone()
            .expect("a cookie for a first visit");
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        let again = guard
            .check(&headers(&[("cookie", value(&set))]))
            .await
            .unwrap();
        assert!(again.new_cookie.is_none(), "kept, not replaced");
        assert_eq!(guard.csrf(&first), guard.csrf(&again));
        let other = guard.check(&HeaderMap::new()).await.unwrap();
        assert_ne!(guard.csrf(&first), guard.csrf(&other), "one per visitor");
        let forged = guard
            .check(&headers(&[("cookie", "portaria_status=00")]))
            .await
            .unwrap();
        assert!(
            forged.new_cookie.is_some(),
            "not an id of ours: a fresh one"
        );
    }

    #[tokio::test]
    async fn a_token_needs_a_session_of_a_login_or_the_bearer_token() {
        let guard = Guard::new(Some(Secret::new(b"correct-horse-battery".to_vec()))).unwrap();
        let host = ("host", "192.168.1.5:9464");
        assert_eq!(
            guard.check(&headers(&[host])).await.err(),
            Some(Refused::Unauthenticated)
        );
        let one = guard.log_in().unwrap();
        let two = guard.log_in().unwrap();
        assert_ne!(one, two, "one random session per login");
        let visitor = guard
            .check(&headers(&[host, ("cookie", value(&one))]))
            .await
            .unwrap();
        let other = format!("a=b; {}", value(&two));
        assert!(
            guard
                .check(&headers(&[host, ("cookie", &other)]))
                .await
                .is_ok()
        );
        let wrong = format!("{COOKIE}={}", "0".repeat(64));
        assert!(
            guard
                .check(&headers(&[host, ("cookie", &wrong)]))
                .await
                .is_err()
        );
        guard.log_out(&visitor);
        assert!(
            guard
                .check(&headers(&[host, ("cookie", value(&one))]))
                .await
                .is_err(),
            "logged out"
        );
        assert!(
            guard
                .check(&headers(&[host, ("cookie", &other)]))
                .await
                .is_ok()
        );
        let bearer = "Bearer correct-horse-battery";
        let by_bearer = guard
            .check(&headers(&[host, ("authorization", bearer)]))
            .await
            .unwrap();
        assert_eq!(guard.csrf(&by_bearer), None, "no session, no form token");
        let bad = "Bearer correct-horse-batter";
        assert!(
            guard
                .check(&headers(&[host, ("authorization", bad)]))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_post_needs_its_sessions_form_token_and_no_other_origin() {
        let guard = Guard::new(None).unwrap();
        let visitor = guard.check(&HeaderMap::new()).await.unwrap();
        let csrf = guard.csrf(&visitor).unwrap();
        let host = ("host", "127.0.0.1:9464");
        let own = ("origin", "http://127.0.0.1:9464");
        let post = |pairs: &[(&'static str, &str)], token: Option<&str>| {
            guard.check_post(&headers(pairs), &visitor, token)
        };
        assert_eq!(post(&[host, own], Some(&csrf)), Ok(()));
        assert_eq!(post(&[host], Some(&csrf)), Ok(()));
        let same_site = ("sec-fetch-site", "same-origin");
        assert_eq!(post(&[host, own, same_site], Some(&csrf)), Ok(()));
        let someone_else = guard.check(&HeaderMap::new()).await.unwrap();
        let theirs = guard.csrf(&someone_else).unwrap();
        for bad in [
            post(&[host, own], None),
            post(&[host, own], Some("0")),
            post(&[host, own], Some(&theirs)),
            post(&[host, ("origin", "http://evil.example")], Some(&csrf)),
            post(&[host, ("origin", "null")], Some(&csrf)),
            post(&[host, ("sec-fetch-site", "cross-site")], Some(&csrf)),
            post(&[host, ("sec-fetch-site", "same-site")], Some(&csrf)),
        ] {
            assert_eq!(bad, Err(Refused::CrossSite));
        }
        let bearer = Visitor {
            bearer: true,
            ..Visitor::default()
        };
        assert_eq!(
            guard.check_post(&headers(&[host]), &Visitor::default(), None),
            Err(Refused::CrossSite),
            "no session and no bearer token: no form token to match"
        );
        assert_eq!(
            guard.check_post(&headers(&[host]), &bearer, None),
            Ok(()),
            "a bearer token is no browser's"
        );
        assert_eq!(
            guard.check_post(
                &headers(&[host, ("sec-fetch-site", "cross-site")]),
                &bearer,
                None
            ),
            Err(Refused::CrossSite)
        );
    }
}
