//! The client address: the peer, or, when the peer is a trusted proxy, the rightmost forwarded
//! address that is not itself a trusted proxy. Headers from anyone else are ignored.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use http::HeaderMap;

/// An address block such as `10.0.0.0/8` or `::1/128` (a bare address is a /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr =
            addr.trim().parse().map_err(|_| format!("{s:?} is not an address block like 10.0.0.0/8 or ::1/128"))?;
        let network = canonical(network);
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("{s:?} has a prefix length outside 0..={max}")),
            },
        };
        Ok(Cidr { network, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is the IPv4 address it maps.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The proxies whose forwarding headers are believed.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    pub fn new(blocks: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies(blocks)
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client address for a request from `peer`. From a trusted proxy, `Forwarded` (RFC 7239)
    /// or else `X-Forwarded-For` is read from the right, skipping trusted proxies; the first
    /// address that is not one is the client. An entry that cannot be read stops the walk there:
    /// what lies to its left was written by someone nobody vouches for.
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return peer;
        }
        let hops: Vec<Option<IpAddr>> = if headers.contains_key(http::header::FORWARDED) {
            headers
                .get_all(http::header::FORWARDED)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(forwarded_for)
                .collect()
        } else {
            headers
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|entry| parse_node(entry.trim()))
                .collect()
        };
        let mut client = peer;
        for hop in hops.into_iter().rev() {
            match hop {
                Some(ip) => {
                    client = ip;
                    if !self.trusts(ip) {
                        return ip;
                    }
                }
                None => return client,
            }
        }
        client
    }
}

/// The `for=` address of one `Forwarded` element.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then(|| parse_node(v.trim().trim_matches('"')))?
    })
}

/// An address as forwarding headers write it: `192.0.2.1`, `192.0.2.1:8080`, `[2001:db8::1]`,
/// `[2001:db8::1]:443`, or a bare IPv6 address.
fn parse_node(s: &str) -> Option<IpAddr> {
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        return rest[..end].parse::<Ipv6Addr>().ok().map(|v6| canonical(IpAddr::V6(v6)));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidrs() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.200.1.1")) && !c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "mapped addresses are their IPv4 selves");
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense".parse::<Cidr>().is_err());
    }

    #[test]
    fn only_trusted_peers_are_believed_and_the_rightmost_untrusted_hop_wins() {
        let trusted = TrustedProxies::new(vec!["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()]);
        let xff = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.7, 10.0.0.5")]);
        // An untrusted peer's headers are whatever it wrote.
        assert_eq!(trusted.client_address(ip("127.0.0.2"), &xff), ip("127.0.0.2"));
        // The leftmost entry is the client's own claim; the rightmost untrusted one is real.
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &xff), ip("203.0.113.7"));
        assert_eq!(trusted.client_address(ip("::ffff:127.0.0.1"), &xff), ip("203.0.113.7"));
        // Several header lines are one list.
        let split = headers(&[("x-forwarded-for", "9.9.9.9"), ("x-forwarded-for", "198.51.100.1, 10.1.1.1")]);
        assert_eq!(trusted.client_address(ip("10.2.2.2"), &split), ip("198.51.100.1"));
        // Every hop trusted: the leftmost.
        let inner = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.5")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &inner), ip("10.9.9.9"));
        // No header: the peer.
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &HeaderMap::new()), ip("127.0.0.1"));
        // Garbage stops the walk at the last address a trusted hop vouched for.
        let junk = headers(&[("x-forwarded-for", "203.0.113.1, not-an-ip, 10.0.0.5")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &junk), ip("10.0.0.5"));
    }

    #[test]
    fn forwarded_header() {
        let trusted = TrustedProxies::new(vec!["127.0.0.1".parse().unwrap()]);
        let h = headers(&[("forwarded", "for=192.0.2.60;proto=http, for=\"[2001:db8:cafe::17]:4711\"")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &h), ip("2001:db8:cafe::17"));
        let h = headers(&[("forwarded", "for=192.0.2.43:8080"), ("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), &h), ip("192.0.2.43"), "Forwarded wins");
    }
}
