//! `public_url`: the URL a provider that signs it (Twilio, Square) is told to call.
//!
//! Behind a tunnel or a reverse proxy the request portaria sees has another host (and maybe
//! another scheme and port) than the one the provider signed, so the URL comes from the config.
//! The user gives scheme, host, optional port and path, as entered in the provider's console,
//! without a query string: portaria appends `?<query>` exactly as the request carried it,
//! percent-encoding untouched, when the request has one. So a Twilio number configured with
//! `https://example.trycloudflare.com/webhooks/twilio?team=a` is matched by
//! `public_url = "https://example.trycloudflare.com/webhooks/twilio"`.

/// A checked `public_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// As configured.
    given: String,
    /// The same URL with the port removed (`https://host/path`), and with it present (the one
    /// given, or the scheme's default), for Twilio's two spellings.
    without_port: String,
    with_port: String,
}

impl PublicUrl {
    /// Checks `text`; `provider` names who needs it, for the messages.
    pub fn parse(text: &str, provider: &str) -> Result<PublicUrl, String> {
        let bad = |why: &str| format!("`public_url` {why} (provider `{provider}`)");
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("https://") {
            ("https", rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            ("http", rest)
        } else {
            return Err(bad("must start with `https://` (or `http://`)"));
        };
        if text.contains('?') || text.contains('#') {
            return Err(bad(
                "must not have a query string or fragment: portaria appends the query of each \
                 request as it arrives",
            ));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains a space or control character"));
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err(bad("must not carry credentials (`user:password@`)"));
        }
        // The port is after the last `:`, unless that is inside an IPv6 `[...]`.
        let (host, port) = match authority.rfind(':') {
            Some(colon) if !authority[colon..].contains(']') => {
                (&authority[..colon], Some(&authority[colon + 1..]))
            }
            _ => (authority, None),
        };
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        if let Some(port) = port
            && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad("has a port that is not a number"));
        }
        let default_port = if scheme == "https" { "443" } else { "80" };
        Ok(PublicUrl {
            given: text.to_string(),
            without_port: format!("{scheme}://{host}{path}"),
            with_port: format!("{scheme}://{host}:{}{path}", port.unwrap_or(default_port)),
        })
    }

    /// The URL as configured, followed by `?<query>` when the request has one.
    pub fn with_query(&self, query: Option<&str>) -> String {
        append(&self.given, query)
    }

    /// Both spellings of the port (Twilio signs one or the other), each with the query.
    pub fn port_variants(&self, query: Option<&str>) -> [String; 2] {
        [
            append(&self.without_port, query),
            append(&self.with_port, query),
        ]
    }
}

fn append(base: &str, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{base}?{query}"),
        None => base.to_string(),
    }
}

/// The `public_url` a provider needs, checked, or why it is missing or wrong.
pub(super) fn required(
    public_url: Option<&str>,
    provider: &str,
    what: &str,
) -> Result<PublicUrl, String> {
    let text = public_url.ok_or_else(|| {
        format!(
            "provider `{provider}` signs {what}, so it needs `public_url = \"https://...\"`: \
             that URL exactly as entered in {provider}'s console, without the query (behind a \
             tunnel or proxy the host portaria sees is not the one that was signed)"
        )
    })?;
    PublicUrl::parse(text, provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Result<PublicUrl, String> {
        PublicUrl::parse(text, "twilio")
    }

    #[test]
    fn the_port_variants_follow_twilio() {
        let u = url("https://mycompany.com/myapp.php").unwrap();
        assert_eq!(
            u.port_variants(Some("foo=1&bar=2")),
            [
                "https://mycompany.com/myapp.php?foo=1&bar=2",
                "https://mycompany.com:443/myapp.php?foo=1&bar=2"
            ]
        );
        let u = url("http://example.com:8080").unwrap();
        assert_eq!(
            u.port_variants(None),
            ["http://example.com", "http://example.com:8080"]
        );
        assert_eq!(u.with_query(None), "http://example.com:8080");
        let u = url("https://[::1]/hook").unwrap();
        assert_eq!(u.port_variants(None)[1], "https://[::1]:443/hook");
        assert_eq!(u.with_query(Some("a=%20")), "https://[::1]/hook?a=%20");
    }

    #[test]
    fn bad_urls_say_why() {
        let err = |t: &str| url(t).unwrap_err();
        assert!(err("example.com/x").contains("must start with `https://`"));
        assert!(err("https://example.com/x?a=1").contains("must not have a query string"));
        assert!(err("https://example.com/x#f").contains("must not have a query string"));
        assert!(err("https://u:p@example.com/x").contains("credentials"));
        assert!(err("https:///x").contains("has no host"));
        assert!(err("https://example.com:https/x").contains("port that is not a number"));
        assert!(err("https://example.com/a b").contains("space"));
        let missing = required(None, "square", "the notification URL").unwrap_err();
        assert!(missing.contains("needs `public_url"), "{missing}");
        assert!(missing.contains("tunnel"), "{missing}");
    }
}
