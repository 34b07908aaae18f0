//! The client address of a request: the TCP peer, or, when the peer is a trusted proxy (the
//! tunnel on this machine) and `[server] real_ip_header` is set, the address that header names.
//! Logs and `allow_ips` use it (never a metrics label). A header from any other peer is
//! ignored: anyone can send one. In `X-Forwarded-For`, the right-most entry not itself a
//! trusted proxy is the client.
//! With mutual TLS, the connection also carries the client certificate the TLS layer
//! verified ([`ClientCert`]).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::HeaderMap;

use crate::config::{RealIp, RealIpHeader};

/// What the server knows of one connection, handed to the webhook handler with each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// The client certificate verified in the TLS handshake against `client_ca_file`; None
    /// on plain HTTP and on a TLS connection that presented none.
    pub client_cert: Option<Arc<ClientCert>>,
}

impl ConnectionInfo {
    /// A connection without a client certificate (plain HTTP, or TLS without one).
    pub fn plain(peer: SocketAddr) -> ConnectionInfo {
        ConnectionInfo {
            peer,
            client_cert: None,
        }
    }
}

/// The names of a verified client certificate: what `client_cert_subject` is matched
/// against, and what `events.client_cert` stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The subject's common name (the last CN, if several), when it is text.
    pub common_name: Option<String>,
    /// The DNS names of the subject alternative name extension.
    pub dns_names: Vec<String>,
}

impl ClientCert {
    /// The CN, then the DNS SANs.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.common_name
            .iter()
            .chain(&self.dns_names)
            .map(String::as_str)
    }
}

/// `CN=pix.example.com; DNS=pix.example.com,alt.example.com`: the stored form.
impl fmt::Display for ClientCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CN={}", self.common_name.as_deref().unwrap_or(""))?;
        if !self.dns_names.is_empty() {
            write!(f, "; DNS={}", self.dns_names.join(","))?;
        }
        Ok(())
    }
}

/// The client's address (IPv4-mapped addresses in their IPv4 form). A trusted peer's header
/// that is absent leaves the peer; one that cannot be read is logged at debug and leaves the
/// peer too, never a guess.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, real_ip: Option<&RealIp>) -> IpAddr {
    let peer = peer.to_canonical();
    let Some(real_ip) = real_ip.filter(|r| r.trusts(peer)) else {
        return peer;
    };
    let named = match &real_ip.header {
        RealIpHeader::ForwardedFor => forwarded_for(headers, real_ip),
        RealIpHeader::Single(name) => single(headers, name),
    };
    match named {
        Ok(Some(client)) => client,
        Ok(None) => peer,
        Err(why) => {
            // Never the value: it is whatever the sender wrote.
            tracing::debug!(
                %peer,
                header = real_ip.header.name(),
                why,
                "client address header not understood; using the peer address"
            );
            peer
        }
    }
}

/// `X-Forwarded-For`: every line of it in order, as one list; walking from the right (the
/// entry the trusted peer appended last), the first address that is not a trusted proxy is the
/// client. Entries left of it are the client's own claims and are not read. All trusted: the
/// left-most.
fn forwarded_for(headers: &HeaderMap, real_ip: &RealIp) -> Result<Option<IpAddr>, &'static str> {
    let mut hops = Vec::new();
    for line in headers.get_all("x-forwarded-for") {
        let line = line.to_str().map_err(|_| "not plain text")?;
        hops.extend(line.split(','));
    }
    let mut leftmost = None;
    for hop in hops.iter().rev() {
        let ip = address(hop).ok_or("an entry is not an address")?;
        if !real_ip.trusts(ip) {
            return Ok(Some(ip));
        }
        leftmost = Some(ip);
    }
    Ok(leftmost)
}

/// A header the proxy sets to one address (`CF-Connecting-IP`): exactly one line, one address.
fn single(headers: &HeaderMap, name: &http::HeaderName) -> Result<Option<IpAddr>, &'static str> {
    let mut lines = headers.get_all(name).iter();
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() {
        return Err("sent more than once");
    }
    let text = line.to_str().map_err(|_| "not plain text")?;
    text.trim()
        .parse::<IpAddr>()
        .map(|ip| Some(ip.to_canonical()))
        .map_err(|_| "not one address")
}

/// One `X-Forwarded-For` entry: an address, or an address with a port (`203.0.113.7:4711`,
/// `[2001:db8::1]:443`), as some proxies write it.
fn address(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpRange;
    use http::{HeaderName, HeaderValue};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    fn cf() -> RealIp {
        RealIp {
            header: RealIpHeader::Single(HeaderName::from_static("cf-connecting-ip")),
            trusted_proxies: IpRange::LOOPBACK.to_vec(),
        }
    }

    fn xff(trusted: &[&str]) -> RealIp {
        RealIp {
            header: RealIpHeader::ForwardedFor,
            trusted_proxies: trusted.iter().map(|t| IpRange::parse(t).unwrap()).collect(),
        }
    }

    const LOCAL: &str = "127.0.0.1";

    #[test]
    fn without_a_real_ip_header_the_client_is_the_peer() {
        let h = headers(&[("cf-connecting-ip", b"203.0.113.7")]);
        assert_eq!(client_ip(ip("198.51.100.1"), &h, None), ip("198.51.100.1"));
        assert_eq!(
            client_ip(ip("::ffff:198.51.100.1"), &h, None),
            ip("198.51.100.1")
        );
    }

    #[test]
    fn a_trusted_peer_names_the_client_in_its_header() {
        let h = headers(&[("cf-connecting-ip", b" 203.0.113.7 ")]);
        assert_eq!(client_ip(ip(LOCAL), &h, Some(&cf())), ip("203.0.113.7"));
        assert_eq!(client_ip(ip("::1"), &h, Some(&cf())), ip("203.0.113.7"));
        // A dual-stack socket's view of an IPv4 loopback peer is trusted too.
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &h, Some(&cf())),
            ip("203.0.113.7")
        );
        let v6 = headers(&[("cf-connecting-ip", b"2001:db8::7")]);
        assert_eq!(client_ip(ip(LOCAL), &v6, Some(&cf())), ip("2001:db8::7"));
        let mapped = headers(&[("cf-connecting-ip", b"::ffff:203.0.113.7")]);
        assert_eq!(
            client_ip(ip(LOCAL), &mapped, Some(&cf())),
            ip("203.0.113.7")
        );
        // No header: the peer itself (a local `portaria send`, say).
        assert_eq!(
            client_ip(ip(LOCAL), &HeaderMap::new(), Some(&cf())),
            ip(LOCAL)
        );
    }

    #[test]
    fn an_untrusted_peer_s_header_is_ignored() {
        let h = headers(&[
            ("cf-connecting-ip", b"203.0.113.7"),
            ("x-forwarded-for", b"203.0.113.7"),
        ]);
        assert_eq!(
            client_ip(ip("198.51.100.1"), &h, Some(&cf())),
            ip("198.51.100.1")
        );
        assert_eq!(
            client_ip(ip(LOCAL), &h, Some(&xff(&["10.0.0.0/8"]))),
            ip(LOCAL)
        );
        assert_eq!(
            client_ip(ip("10.1.1.1"), &h, Some(&xff(&["10.0.0.0/8"]))),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn a_garbled_single_header_leaves_the_peer() {
        for bad in [
            &b"203.0.113.7, 198.51.100.1"[..],
            b"",
            b"not-an-ip",
            b"203.0.113.7:443",
            b"\xff\xfe",
        ] {
            let h = headers(&[("cf-connecting-ip", bad)]);
            assert_eq!(client_ip(ip(LOCAL), &h, Some(&cf())), ip(LOCAL), "{bad:?}");
        }
        // Sent twice: which one the proxy set is unknowable.
        let twice = headers(&[
            ("cf-connecting-ip", b"203.0.113.7"),
            ("cf-connecting-ip", b"198.51.100.1"),
        ]);
        assert_eq!(client_ip(ip(LOCAL), &twice, Some(&cf())), ip(LOCAL));
    }

    #[test]
    fn forwarded_for_gives_the_right_most_untrusted_entry() {
        let loopback = xff(&["127.0.0.0/8", "::1/128"]);
        let from = |value: &[u8]| {
            client_ip(
                ip(LOCAL),
                &headers(&[("x-forwarded-for", value)]),
                Some(&loopback),
            )
        };
        assert_eq!(from(b"203.0.113.7"), ip("203.0.113.7"));
        // The client claimed an address first; the proxy appended the one it saw.
        assert_eq!(from(b"198.51.100.1, 203.0.113.7"), ip("203.0.113.7"));
        // Trusted hops on the right are skipped.
        assert_eq!(
            from(b"198.51.100.1, 203.0.113.7, 127.0.0.1, ::1"),
            ip("203.0.113.7")
        );
        // Garbage the client put left of the real entry is never read.
        assert_eq!(from(b"junk, 203.0.113.7"), ip("203.0.113.7"));
        // Every entry trusted: the left-most.
        assert_eq!(from(b"127.0.0.2, 127.0.0.3"), ip("127.0.0.2"));
        // Ports, IPv6 and mapped entries.
        assert_eq!(from(b"203.0.113.7:4711"), ip("203.0.113.7"));
        assert_eq!(from(b"[2001:db8::7]:443"), ip("2001:db8::7"));
        assert_eq!(from(b"2001:db8::7"), ip("2001:db8::7"));
        assert_eq!(from(b"::ffff:203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(from(b"203.0.113.7, ::ffff:127.0.0.1"), ip("203.0.113.7"));
    }

    #[test]
    fn forwarded_for_lines_are_one_list_in_order() {
        let loopback = xff(&["127.0.0.0/8"]);
        let h = headers(&[
            ("x-forwarded-for", b"198.51.100.1"),
            ("x-forwarded-for", b"203.0.113.7, 127.0.0.1"),
        ]);
        assert_eq!(client_ip(ip(LOCAL), &h, Some(&loopback)), ip("203.0.113.7"));
        let h = headers(&[
            ("x-forwarded-for", b"203.0.113.7"),
            ("x-forwarded-for", b"127.0.0.9"),
        ]);
        assert_eq!(client_ip(ip(LOCAL), &h, Some(&loopback)), ip("203.0.113.7"));
    }

    #[test]
    fn garbled_forwarded_for_leaves_the_peer() {
        let loopback = xff(&["127.0.0.0/8"]);
        for bad in [
            &b"203.0.113.7, junk"[..],
            b"203.0.113.7,",
            b"",
            b" , ",
            b"\xff",
            b"203.0.113.7 198.51.100.1",
        ] {
            let h = headers(&[("x-forwarded-for", bad)]);
            assert_eq!(
                client_ip(ip(LOCAL), &h, Some(&loopback)),
                ip(LOCAL),
                "{bad:?}"
            );
        }
        assert_eq!(
            client_ip(ip(LOCAL), &HeaderMap::new(), Some(&loopback)),
            ip(LOCAL)
        );
    }
}
