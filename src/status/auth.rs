//! Who may see the status page and press its buttons. [`Guard`] owns the admin token (if
//! any), this process's session and CSRF tokens (random at start: a restart logs everyone out
//! and makes old forms stale), and the checks:
//! - without a token the page is open, which config allows only on a loopback admin
//!   listener; then only a loopback `Host` is answered, so a web page that rebinds its own
//!   name to 127.0.0.1 cannot read it;
//! - with one, a request needs the session cookie (`HttpOnly; SameSite=Strict`, set by the
//!   login form) or `Authorization: Bearer TOKEN` (scripts);
//! - a POST also needs this process's CSRF token in its form, and, when the browser sends
//!   them, `Sec-Fetch-Site: same-origin` and an `Origin` equal to the page's own.
//!
//! Every comparison of a secret is constant-time (over SHA-256 digests, so lengths leak
//! nothing either).

use std::io::Read;

use http::{HeaderMap, header};
use subtle::ConstantTimeEq;

use crate::verify::Secret;

/// The session cookie's name.
pub const COOKIE: &str = "portaria_status";

/// The checks of one process's status page.
pub struct Guard {
    token: Option<Secret>,
    session: String,
    csrf: String,
}

/// Why a request is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No (or a wrong) session or token: log in.
    Unauthenticated,
    /// An open page asked for under a name that is not loopback.
    NotLoopbackHost,
    /// A POST from another site, or without this process's form token.
    CrossSite,
}

impl Refused {
    pub fn message(self) -> &'static str {
        match self {
            Refused::Unauthenticated => "log in with the admin token first",
            Refused::NotLoopbackHost => {
                "without an admin token the status page answers only to a loopback address \
                 (127.0.0.1, localhost, [::1])"
            }
            Refused::CrossSite => {
                "this form came from another site or an older page: reload the page and try again"
            }
        }
    }
}

impl Guard {
    /// A guard with fresh random session and CSRF tokens (from the kernel's generator).
    pub fn new(token: Option<Secret>) -> std::io::Result<Guard> {
        Ok(Guard {
            token,
            session: random_hex()?,
            csrf: random_hex()?,
        })
    }

    /// No token is configured: the page is open (on loopback only).
    pub fn is_open(&self) -> bool {
        self.token.is_none()
    }

    /// The token every form of this process carries.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The cookie that a successful login sets.
    pub fn session_cookie(&self) -> String {
        format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            self.session
        )
    }

    /// Whether `given` is the admin token.
    pub fn token_matches(&self, given: &str) -> bool {
        self.token
            .as_ref()
            .is_some_and(|token| same(token.expose(), given.trim().as_bytes()))
    }

    /// May this request read the page?
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refused> {
        if self.is_open() {
            return if loopback_host(headers) {
                Ok(())
            } else {
                Err(Refused::NotLoopbackHost)
            };
        }
        let by_cookie = cookies(headers)
            .filter(|(name, _)| *name == COOKIE)
            .any(|(_, value)| same(value.as_bytes(), self.session.as_bytes()));
        let by_bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token_matches(t));
        if by_cookie || by_bearer {
            Ok(())
        } else {
            Err(Refused::Unauthenticated)
        }
    }

    /// May this POST change something? Its form's `csrf` field and, if sent, the browser's
    /// own word on where it came from.
    pub fn check_post(&self, headers: &HeaderMap, form_csrf: Option<&str>) -> Result<(), Refused> {
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
        let token_ok = form_csrf.is_some_and(|t| same(t.as_bytes(), self.csrf.as_bytes()));
        if site_ok && origin_ok && token_ok {
            Ok(())
        } else {
            Err(Refused::CrossSite)
        }
    }
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

/// The one `Host` names a loopback address: `127.0.0.1`, `localhost`, `[::1]`, any port.
fn loopback_host(headers: &HeaderMap) -> bool {
    if headers.get_all(header::HOST).iter().count() != 1 {
        return false;
    }
    let Some(host) = header_str(headers, "host") else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Constant-time equality of two secrets of any length.
fn same(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (crate::digest::sha256(&[a]), crate::digest::sha256(&[b]));
    bool::from(a.ct_eq(&b))
}

/// 32 random bytes from the kernel, hex.
fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(hex::encode(bytes))
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

    #[test]
    fn an_open_page_answers_only_a_loopback_host() {
        let guard = Guard::new(None).unwrap();
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "[::1]:9464",
            "127.0.0.1",
        ] {
            assert_eq!(guard.check(&headers(&[("host", host)])), Ok(()), "{host}");
        }
        for host in ["evil.example:9464", "192.168.1.5:9464", "[::2]:1"] {
            assert_eq!(
                guard.check(&headers(&[("host", host)])),
                Err(Refused::NotLoopbackHost),
                "{host}"
            );
        }
        assert!(guard.check(&HeaderMap::new()).is_err());
    }

    #[test]
    fn a_token_needs_the_session_cookie_or_the_bearer_token() {
        let guard = Guard::new(Some(Secret::new(b"correct-horse-battery".to_vec()))).unwrap();
        let host = ("host", "192.168.1.5:9464");
        assert_eq!(
            guard.check(&headers(&[host])),
            Err(Refused::Unauthenticated)
        );
        let cookie = guard.session_cookie();
        let value = cookie.split(';').next().unwrap();
        assert_eq!(guard.check(&headers(&[host, ("cookie", value)])), Ok(()));
        let other = format!("a=b; {value}");
        assert_eq!(guard.check(&headers(&[host, ("cookie", &other)])), Ok(()));
        let wrong = format!("{COOKIE}=00");
        assert!(guard.check(&headers(&[host, ("cookie", &wrong)])).is_err());
        let bearer = "Bearer correct-horse-battery";
        assert_eq!(
            guard.check(&headers(&[host, ("authorization", bearer)])),
            Ok(())
        );
        let bad = "Bearer correct-horse-batter";
        assert!(
            guard
                .check(&headers(&[host, ("authorization", bad)]))
                .is_err()
        );
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    }

    #[test]
    fn a_post_needs_the_form_token_and_no_other_origin() {
        let guard = Guard::new(None).unwrap();
        let csrf = guard.csrf().to_string();
        let host = ("host", "127.0.0.1:9464");
        let own = ("origin", "http://127.0.0.1:9464");
        assert_eq!(
            guard.check_post(&headers(&[host, own]), Some(&csrf)),
            Ok(())
        );
        assert_eq!(guard.check_post(&headers(&[host]), Some(&csrf)), Ok(()));
        let same_site = ("sec-fetch-site", "same-origin");
        assert_eq!(
            guard.check_post(&headers(&[host, own, same_site]), Some(&csrf)),
            Ok(())
        );
        for bad in [
            guard.check_post(&headers(&[host, own]), None),
            guard.check_post(&headers(&[host, own]), Some("0")),
            guard.check_post(
                &headers(&[host, ("origin", "http://evil.example")]),
                Some(&csrf),
            ),
            guard.check_post(&headers(&[host, ("origin", "null")]), Some(&csrf)),
            guard.check_post(
                &headers(&[host, ("sec-fetch-site", "cross-site")]),
                Some(&csrf),
            ),
            guard.check_post(
                &headers(&[host, ("sec-fetch-site", "same-site")]),
                Some(&csrf),
            ),
        ] {
            assert_eq!(bad, Err(Refused::CrossSite));
        }
        assert_ne!(Guard::new(None).unwrap().csrf(), csrf, "random per process");
    }
}
