//! The client-address keys: `[server] real_ip_header` and `trusted_proxies` (whose header is
//! believed, and which one), and an endpoint's `allow_ips`, turned into [`RealIp`] and lists of
//! [`IpRange`] with every problem named by key and position.

use http::HeaderName;

use super::ip_range::IpRange;
use super::validator::Validator;
use super::{Endpoint, Server};

/// `[server] real_ip_header`: which header names the client when a trusted proxy (the tunnel)
/// connects, and which proxies are trusted.
#[derive(Debug, Clone)]
pub struct RealIp {
    pub header: RealIpHeader,
    /// Only a TCP peer in one of these ranges is believed; default [`IpRange::LOOPBACK`].
    pub trusted_proxies: Vec<IpRange>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealIpHeader {
    /// `X-Forwarded-For`: a list each proxy appends to; the client is the right-most address
    /// that is not a trusted proxy.
    ForwardedFor,
    /// A header holding one address, set by the proxy: `CF-Connecting-IP`, `X-Real-IP`, ...
    Single(HeaderName),
}

impl RealIpHeader {
    pub fn name(&self) -> &str {
        match self {
            RealIpHeader::ForwardedFor => "x-forwarded-for",
            RealIpHeader::Single(name) => name.as_str(),
        }
    }
}

impl RealIp {
    /// Whether the TCP peer is a proxy whose header is believed.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        self.trusted_proxies.iter().any(|r| r.contains(peer))
    }
}

impl Validator<'_> {
    /// `real_ip_header` and `trusted_proxies`; None when no header is set (the client is the
    /// TCP peer).
    pub(super) fn real_ip(
        &mut self,
        header: Option<String>,
        trusted: Option<Vec<String>>,
    ) -> Option<RealIp> {
        let Some(text) = header else {
            if trusted.is_some() {
                self.problem(
                    "server.trusted_proxies: set without server.real_ip_header, so no header \
                     would be believed; set real_ip_header (e.g. \"CF-Connecting-IP\") or remove it",
                );
            }
            return None;
        };
        let header = match HeaderName::from_bytes(text.trim().as_bytes()) {
            Ok(name) if name == "x-forwarded-for" => RealIpHeader::ForwardedFor,
            Ok(name) if name == "forwarded" => {
                self.problem(
                    "server.real_ip_header: `Forwarded` (RFC 7239) is not supported; use \
                     \"X-Forwarded-For\" or your tunnel's own header (\"CF-Connecting-IP\")",
                );
                return None;
            }
            Ok(name) => RealIpHeader::Single(name),
            Err(_) => {
                self.problem(format!(
                    "server.real_ip_header: `{text}` is not a header name like \"CF-Connecting-IP\" or \"X-Forwarded-For\""
                ));
                return None;
            }
        };
        let trusted_proxies = match trusted {
            None => IpRange::LOOPBACK.to_vec(),
            Some(list) if list.is_empty() => {
                self.problem(
                    "server.trusted_proxies: empty, so the header would never be believed; \
                     leave it out to trust loopback (a tunnel on this machine)",
                );
                return None;
            }
            Some(list) => self.ip_ranges("server.trusted_proxies", &list),
        };
        Some(RealIp {
            header,
            trusted_proxies,
        })
    }

    /// An endpoint's `allow_ips`; None when absent (every address may deliver). An endpoint
    /// whose provider cannot go without it (iugu: `Verifier::needs_allow_ips`) is refused
    /// without it, saying why.
    pub(super) fn allow_ips(
        &mut self,
        at: &str,
        raw: Option<Vec<String>>,
        verifier: Option<&crate::verify::Verifier>,
    ) -> Option<Vec<IpRange>> {
        let why = verifier.and_then(crate::verify::Verifier::needs_allow_ips);
        let Some(list) = raw else {
            if let Some(why) = why {
                self.problem(format!("{at}.allow_ips: missing: {why}"));
            }
            return None;
        };
        if list.is_empty() {
            self.problem(format!(
                "{at}.allow_ips: empty, so every request would be refused; leave it out to \
                 accept any address"
            ));
        }
        Some(self.ip_ranges(&format!("{at}.allow_ips"), &list))
    }

    fn ip_ranges(&mut self, key: &str, list: &[String]) -> Vec<IpRange> {
        let mut out = Vec::with_capacity(list.len());
        for (i, text) in list.iter().enumerate() {
            match IpRange::parse(text) {
                Ok(range) => out.push(range),
                Err(why) => self.problem(format!(
                    "{key}[{i}]: `{text}` is not an address range: {why}"
                )),
            }
        }
        out
    }

    /// Behind a tunnel on this machine every connection comes from loopback: `allow_ips`
    /// would then judge the tunnel, not the gateway, unless the tunnel's header is believed.
    pub(super) fn warn_allow_ips_without_real_ip(
        &mut self,
        server: &Server,
        endpoints: &[Endpoint],
    ) {
        if server.real_ip.is_some() || !server.listen.ip().is_loopback() {
            return;
        }
        for e in endpoints.iter().filter(|e| e.allow_ips.is_some()) {
            self.warnings.push(format!(
                "endpoint `{}`: allow_ips is judged on the TCP peer, and server.listen is on \
                 loopback: behind a tunnel that is the tunnel's address, not the gateway's; set \
                 server.real_ip_header (e.g. \"CF-Connecting-IP\")",
                e.name
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parse, problems};
    use super::*;

    fn config(server: &str, endpoint: &str) -> String {
        format!(
            "[server]\n{server}\n[[endpoint]]\npath = \"/webhooks/github\"\nprovider = \"github\"\nsecret = \"s3cret-s3cret-s3cret\"\n{endpoint}\n"
        )
    }

    #[test]
    fn a_real_ip_header_trusts_loopback_unless_told_otherwise() {
        let c = parse(&config("real_ip_header = \"CF-Connecting-IP\"", "")).unwrap();
        let real_ip = c.server.real_ip.expect("set");
        assert_eq!(
            real_ip.header,
            RealIpHeader::Single(HeaderName::from_static("cf-connecting-ip"))
        );
        assert_eq!(real_ip.trusted_proxies, IpRange::LOOPBACK);
        assert!(real_ip.trusts("127.0.0.1".parse().unwrap()));
        assert!(real_ip.trusts("::ffff:127.0.0.1".parse().unwrap()));
        assert!(real_ip.trusts("::1".parse().unwrap()));
        assert!(!real_ip.trusts("10.0.0.1".parse().unwrap()));

        let xff = "real_ip_header = \"X-Forwarded-For\"\ntrusted_proxies = [\"10.0.0.0/8\", \"fd00::/8\"]";
        let real_ip = parse(&config(xff, "")).unwrap().server.real_ip.unwrap();
        assert_eq!(real_ip.header, RealIpHeader::ForwardedFor);
        assert_eq!(real_ip.trusted_proxies.len(), 2);
        assert!(
            !real_ip.trusts("127.0.0.1".parse().unwrap()),
            "the list replaces loopback"
        );

        assert!(parse(&config("", "")).unwrap().server.real_ip.is_none());
    }

    #[test]
    fn allow_ips_is_read_per_endpoint() {
        let c = parse(&config(
            "",
            "allow_ips = [\"34.193.116.226/32\", \"2001:db8::/32\"]",
        ))
        .unwrap();
        let allowed = c.endpoints[0].allow_ips.as_ref().unwrap();
        assert_eq!(allowed.len(), 2);
        assert!(
            parse(&config("", "")).unwrap().endpoints[0]
                .allow_ips
                .is_none()
        );
    }

    #[test]
    fn bad_client_address_keys_are_named_with_the_reason() {
        let text = problems(&config(
            "real_ip_header = \"CF-Connecting-IP\"\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/33\", \"nope\"]",
            "allow_ips = [\"10.0.0.1/8\"]",
        ));
        assert!(
            text.contains("server.trusted_proxies[1]: `10.0.0.0/33` is not an address range: the prefix of an IPv4 range is at most /32"),
            "{text}"
        );
        assert!(
            text.contains("server.trusted_proxies[2]: `nope` is not an address range"),
            "{text}"
        );
        assert!(
            text.contains("endpoint[0] (line 4).allow_ips[0]: `10.0.0.1/8` is not an address range: it has bits set past its /8 prefix; the range is written 10.0.0.0/8"),
            "{text}"
        );

        let text = problems(&config("trusted_proxies = [\"127.0.0.1/32\"]", ""));
        assert!(
            text.contains("server.trusted_proxies: set without server.real_ip_header"),
            "{text}"
        );
        let text = problems(&config(
            "real_ip_header = \"X-Forwarded-For\"\ntrusted_proxies = []",
            "",
        ));
        assert!(text.contains("server.trusted_proxies: empty"), "{text}");
        let text = problems(&config("real_ip_header = \"Forwarded\"", ""));
        assert!(
            text.contains("`Forwarded` (RFC 7239) is not supported"),
            "{text}"
        );
        let text = problems(&config("real_ip_header = \"CF Connecting IP\"", ""));
        assert!(
            text.contains("server.real_ip_header: `CF Connecting IP` is not a header name"),
            "{text}"
        );
        let text = problems(&config("", "allow_ips = []"));
        assert!(
            text.contains(".allow_ips: empty, so every request would be refused"),
            "{text}"
        );
    }

    #[test]
    fn allow_ips_behind_a_loopback_listener_without_a_header_is_warned_about() {
        let warned = |server: &str| {
            parse(&config(server, "allow_ips = [\"203.0.113.0/24\"]"))
                .unwrap()
                .warnings
        };
        let w = warned("");
        assert!(
            w.iter()
                .any(|w| w.contains("endpoint `github`: allow_ips is judged on the TCP peer")),
            "{w:?}"
        );
        assert!(warned("real_ip_header = \"CF-Connecting-IP\"").is_empty());
        assert!(warned("listen = \"0.0.0.0:8080\"").is_empty());
        assert!(parse(&config("", "")).unwrap().warnings.is_empty());
    }
}
