//! Address ranges for `trusted_proxies` and `allow_ips`: `203.0.113.0/24`, `2001:db8::/32`, or
//! one address (`34.193.116.226`, a /32 or /128). Parsed with std's `IpAddr` and matched on a
//! prefix of the address bits: a few lines, no crate. An IPv4-mapped IPv6 address
//! (`::ffff:127.0.0.1`, what a dual-stack socket reports for an IPv4 peer) is its IPv4 form,
//! both as a range and as an address to match.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A CIDR range. Its address has no bits set past the prefix (`10.0.0.1/8` is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    addr: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Loopback, IPv4 and IPv6: who may set the client-address header unless
    /// `trusted_proxies` says otherwise (a tunnel client runs on the same machine).
    pub const LOOPBACK: [IpRange; 2] = [
        IpRange {
            addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
            prefix: 8,
        },
        IpRange {
            addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            prefix: 128,
        },
    ];

    /// Parses `ADDR/PREFIX` or a bare address; the reason is worded to follow "is not an
    /// address range".
    pub fn parse(text: &str) -> Result<IpRange, String> {
        const LIKE: &str = "write it like 203.0.113.0/24, 2001:db8::/32 or 198.51.100.7";
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| LIKE.to_string())?;
        let width = width(addr);
        let prefix = match prefix {
            None => width,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                match p.parse::<u8>() {
                    Ok(n) if n <= width => n,
                    _ => {
                        return Err(format!(
                            "the prefix of an IPv{} range is at most /{width}",
                            family(addr)
                        ));
                    }
                }
            }
            Some(_) => return Err(format!("the prefix after `/` must be a number; {LIKE}")),
        };
        let range = IpRange { addr, prefix };
        let network = range.network();
        if network != addr {
            return Err(format!(
                "it has bits set past its /{prefix} prefix; the range is written {network}/{prefix}"
            ));
        }
        // `::ffff:10.0.0.0/104` is `10.0.0.0/8`: mapped peers are matched in their IPv4 form.
        if let (IpAddr::V6(v6), true) = (addr, prefix >= 96)
            && let Some(v4) = v6.to_ipv4_mapped()
        {
            return Ok(IpRange {
                addr: IpAddr::V4(v4),
                prefix: prefix - 96,
            });
        }
        Ok(range)
    }

    /// Whether `ip` (taken in its IPv4 form when it is IPv4-mapped) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        family(ip) == family(self.addr) && self.mask(bits(ip)) == bits(self.addr)
    }

    /// The range's first address: its address with the bits past the prefix cleared.
    fn network(&self) -> IpAddr {
        let masked = self.mask(bits(self.addr));
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(masked as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(masked)),
        }
    }

    /// `value` with the bits past the prefix cleared (the bits of this range's family).
    fn mask(&self, value: u128) -> u128 {
        let host_bits = u32::from(width(self.addr) - self.prefix);
        let host_mask = 1u128.checked_shl(host_bits).map_or(u128::MAX, |b| b - 1);
        value & !host_mask
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn width(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn family(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 6,
    }
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> IpRange {
        IpRange::parse(text).unwrap_or_else(|why| panic!("{text}: {why}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_ipv4_range_holds_its_addresses_and_no_others() {
        let r = range("203.0.113.0/24");
        assert!(r.contains(ip("203.0.113.0")));
        assert!(r.contains(ip("203.0.113.255")));
        assert!(!r.contains(ip("203.0.112.255")));
        assert!(!r.contains(ip("203.0.114.0")));
        assert!(!r.contains(ip("2001:db8::1")), "another family");
        let one = range("34.193.116.226/32");
        assert!(one.contains(ip("34.193.116.226")));
        assert!(!one.contains(ip("34.193.116.227")));
        assert_eq!(range("34.193.116.226"), one, "a bare address is a /32");
        let odd = range("10.0.0.128/25");
        assert!(odd.contains(ip("10.0.0.200")) && !odd.contains(ip("10.0.0.127")));
    }

    #[test]
    fn an_ipv6_range_holds_its_addresses_and_no_others() {
        let r = range("2001:db8:abcd::/48");
        assert!(r.contains(ip("2001:db8:abcd:12::1")));
        assert!(!r.contains(ip("2001:db8:abce::1")));
        assert!(!r.contains(ip("203.0.113.7")));
        assert_eq!(range("::1"), IpRange::LOOPBACK[1]);
        assert!(range("::1/128").contains(ip("::1")));
        assert!(!range("::1/128").contains(ip("::2")));
    }

    #[test]
    fn zero_prefixes_hold_a_whole_family() {
        assert!(range("0.0.0.0/0").contains(ip("255.255.255.255")));
        assert!(!range("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(range("::/0").contains(ip("2001:db8::1")));
        assert!(range("::/0").contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
    }

    #[test]
    fn mapped_addresses_are_their_ipv4_form() {
        let loopback = IpRange::LOOPBACK[0];
        assert!(loopback.contains(ip("::ffff:127.0.0.1")));
        assert!(loopback.contains(ip("127.8.9.10")));
        assert!(!loopback.contains(ip("::ffff:128.0.0.1")));
        // A mapped range is the IPv4 range, and holds plain IPv4 addresses.
        assert_eq!(range("::ffff:10.0.0.0/104"), range("10.0.0.0/8"));
        assert!(range("::ffff:10.0.0.0/104").contains(ip("10.1.2.3")));
        assert!(range("::ffff:203.0.113.7").contains(ip("203.0.113.7")));
    }

    #[test]
    fn malformed_ranges_are_refused_with_the_reason() {
        let why = |text: &str| IpRange::parse(text).expect_err(text);
        assert!(
            why("10.0.0.0/33").contains("at most /32"),
            "{}",
            why("10.0.0.0/33")
        );
        assert!(why("::/129").contains("at most /128"));
        assert!(why("10.0.0.0/").contains("must be a number"));
        assert!(why("10.0.0.0/+8").contains("must be a number"));
        assert!(why("10.0.0.0/8/8").contains("must be a number"));
        assert!(why("10.0.0.0/999999").contains("at most /32"));
        assert!(
            why("10.0.0.1/8").contains("10.0.0.0/8"),
            "{}",
            why("10.0.0.1/8")
        );
        assert!(why("2001:db8::1/32").contains("2001:db8::/32"));
        for garbage in [
            "",
            "/8",
            "localhost",
            "10.0.0",
            "300.0.0.1/8",
            "1.2.3.4:80",
            "[::1]/128",
        ] {
            assert!(why(garbage).contains("like 203.0.113.0/24"), "{garbage}");
        }
        assert_eq!(range(" 10.0.0.0/8 ").to_string(), "10.0.0.0/8");
    }
}
