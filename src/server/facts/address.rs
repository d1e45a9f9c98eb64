//! The client address: the peer, or, when the peer is a trusted proxy, the rightmost forwarded
//! address that is not itself a trusted proxy. Headers from anyone else are ignored.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use http::HeaderName;

use crate::server::facts::fields::Headers;

/// An address block such as `10.0.0.0/8` or `::1/128` (a bare address is a /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl std::fmt::Display for Cidr {
    /// As written on the command line: a bare address for a single one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let single = match self.network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if self.prefix == single {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}

/// Why a text is not an address block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The address is not an IP address.
    #[error("{0:?} is not an address block like 10.0.0.0/8 or ::1/128")]
    NotABlock(String),
    /// The prefix length is not a number up to the address's length.
    #[error("{block:?} has a prefix length outside 0..={max}")]
    Prefix {
        /// The block as written.
        block: String,
        /// The longest prefix its address allows: 32 or 128.
        max: u8,
    },
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr.trim().parse().map_err(|_| CidrError::NotABlock(s.to_string()))?;
        let network = canonical(network);
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(CidrError::Prefix { block: s.to_string(), max }),
            },
        };
        Ok(Cidr { network, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is inside the block (an IPv4-mapped IPv6 address as the IPv4 it maps).
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
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The one header a trusted proxy's client address is read from. Only one is ever read: a
/// gateway overwrites the header it is configured to write and passes every other one on as the
/// client sent it, so reading a second header would let the client choose its own address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (what nginx, Caddy, Traefik and Envoy write).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

impl FromStr for AddressHeader {
    type Err = crate::choice::NotOneOf;

    fn from_str(s: &str) -> Result<AddressHeader, crate::choice::NotOneOf> {
        match s.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(AddressHeader::XForwardedFor),
            "forwarded" => Ok(AddressHeader::Forwarded),
            _ => Err(crate::choice::NotOneOf::new(s, "x-forwarded-for or forwarded")),
        }
    }
}

impl AddressHeader {
    /// The header's name, made once: a name given as a string is parsed on every look-up.
    fn header_name(self) -> &'static HeaderName {
        static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
        static FORWARDED: HeaderName = http::header::FORWARDED;
        match self {
            AddressHeader::XForwardedFor => &X_FORWARDED_FOR,
            AddressHeader::Forwarded => &FORWARDED,
        }
    }
}

/// The proxies whose forwarding headers are believed, and the header they write.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies {
    blocks: Vec<Cidr>,
    header: AddressHeader,
}

impl TrustedProxies {
    /// Proxies in `blocks`, whose `X-Forwarded-For` is read.
    pub fn new(blocks: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies { blocks, header: AddressHeader::default() }
    }

    /// Reads the client address from `header` instead.
    pub fn reading(mut self, header: AddressHeader) -> TrustedProxies {
        self.header = header;
        self
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.blocks.iter().any(|c| c.contains(ip))
    }

    /// The client address for a request from `peer`. From a trusted proxy, the configured header
    /// (`X-Forwarded-For`, or `Forwarded`, RFC 7239) is read from the right, skipping trusted
    /// proxies; the first address that is not one is the client. The other header is never read.
    /// An entry that cannot be read stops the walk there: what lies to its left was written by
    /// someone nobody vouches for.
    pub fn client_address(&self, peer: IpAddr, headers: Headers<'_>) -> IpAddr {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return peer;
        }
        let values = headers.get_all(self.header.header_name().as_str()).map(crate::server::facts::fields::text);
        // Read left to right, believed right to left; a few hops fit on the stack.
        let mut hops: smallvec::SmallVec<[Option<IpAddr>; 8]> = smallvec::SmallVec::new();
        for value in values {
            match value {
                // A line that is not text cannot be read: nothing to its left is believed.
                None => hops.push(None),
                Some(v) => hops.extend(v.split(',').map(|entry| match self.header {
                    AddressHeader::XForwardedFor => parse_node(entry.trim()),
                    AddressHeader::Forwarded => forwarded_for(entry),
                })),
            }
        }
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
pub(crate) fn parse_node(s: &str) -> Option<IpAddr> {
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
    use http::HeaderMap;

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
        assert_eq!(trusted.client_address(ip("127.0.0.2"), (&xff).into()), ip("127.0.0.2"));
        // The leftmost entry is the client's own claim; the rightmost untrusted one is real.
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&xff).into()), ip("203.0.113.7"));
        assert_eq!(trusted.client_address(ip("::ffff:127.0.0.1"), (&xff).into()), ip("203.0.113.7"));
        // Several header lines are one list.
        let split = headers(&[("x-forwarded-for", "9.9.9.9"), ("x-forwarded-for", "198.51.100.1, 10.1.1.1")]);
        assert_eq!(trusted.client_address(ip("10.2.2.2"), (&split).into()), ip("198.51.100.1"));
        // Every hop trusted: the leftmost.
        let inner = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.5")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&inner).into()), ip("10.9.9.9"));
        // No header: the peer.
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&HeaderMap::new()).into()), ip("127.0.0.1"));
        // Garbage stops the walk at the last address a trusted hop vouched for.
        let junk = headers(&[("x-forwarded-for", "203.0.113.1, not-an-ip, 10.0.0.5")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&junk).into()), ip("10.0.0.5"));
    }

    #[test]
    fn forwarded_header_only_when_asked() {
        let trusted = TrustedProxies::new(vec!["127.0.0.1".parse().unwrap()]).reading(AddressHeader::Forwarded);
        let h = headers(&[("forwarded", "for=192.0.2.60;proto=http, for=\"[2001:db8:cafe::17]:4711\"")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&h).into()), ip("2001:db8:cafe::17"));
        let both = headers(&[("forwarded", "for=192.0.2.43:8080"), ("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(trusted.client_address(ip("127.0.0.1"), (&both).into()), ip("192.0.2.43"));
        // Issue 9, item 4: gateways pass the client's own `Forwarded` on untouched, so with the
        // default (X-Forwarded-For) it is never read, whatever it says.
        let xff = TrustedProxies::new(vec!["127.0.0.1".parse().unwrap()]);
        assert_eq!(
            xff.client_address(ip("127.0.0.1"), (&both).into()),
            ip("1.2.3.4"),
            "X-Forwarded-For, not Forwarded"
        );
        let only_forwarded = headers(&[("forwarded", "for=192.0.2.43")]);
        assert_eq!(xff.client_address(ip("127.0.0.1"), (&only_forwarded).into()), ip("127.0.0.1"));
        assert_eq!("Forwarded".parse::<AddressHeader>(), Ok(AddressHeader::Forwarded));
        assert!("x-real-ip".parse::<AddressHeader>().is_err());
    }
}
