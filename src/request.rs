//! What a bound may be keyed on, read from a request: the address, headers, cookies, query
//! parameters, and the identity the server resolved. No credential is verified here.

use std::borrow::Cow;
use std::net::IpAddr;

use crate::policy::{Credential, Per};

/// The parts of a request a bound can be keyed on. The server implements it over hyper's
/// request; `explain` over its flags.
pub trait Facts {
    /// The client address the server resolved (peer, or trusted forwarded address).
    fn address(&self) -> IpAddr;
    /// The first value of a header; `name` is lower case.
    fn header(&self, name: &str) -> Option<&[u8]>;
    /// The raw query string, without `?`.
    fn query_string(&self) -> Option<&str>;

    /// A query parameter's value, form-decoded.
    fn query(&self, name: &str) -> Option<Cow<'_, str>> {
        query_param(self.query_string()?, name)
    }

    /// A cookie's value, from every `Cookie` header.
    fn cookie(&self, name: &str) -> Option<&[u8]> {
        cookie_value(self.header("cookie")?, name)
    }
}

/// Who the caller is, as far as the server could tell. Anonymous when `user` is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub user: Option<String>,
    pub org: Option<String>,
    pub roles: Vec<String>,
}

impl Identity {
    /// Whether the caller is signed in (has a user).
    pub fn authenticated(&self) -> bool {
        self.user.is_some()
    }
}

/// The value a bound counts a request under, before hashing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key<'a> {
    Present(Cow<'a, [u8]>),
    /// The request lacks it ([`missing`] says what, when it must be said).
    Missing,
}

/// What a request lacks when it has no key for `per`: `header x-api-key`, `a signed-in user`.
pub fn missing(per: &Per) -> String {
    match per {
        Per::Route | Per::Address => "nothing".to_string(),
        Per::User => "a signed-in user".to_string(),
        Per::Org => "an org".to_string(),
        Per::Token => "a credential".to_string(),
        Per::Header(name) => format!("header {name}"),
        Per::Cookie(name) => format!("cookie {name}"),
        Per::Query(name) => format!("query parameter {name}"),
    }
}

/// The bytes an address counts under, without allocating: IPv4 as is (IPv4-mapped IPv6
/// canonicalized), IPv6 by its /64, since one host commonly holds a whole /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressKey {
    bytes: [u8; 8],
    len: usize,
}

impl AddressKey {
    /// The bytes to hash.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The key an address counts under.
pub fn address_key(address: IpAddr) -> AddressKey {
    let mut bytes = [0u8; 8];
    let v4 = |v4: std::net::Ipv4Addr, mut bytes: [u8; 8]| {
        bytes[..4].copy_from_slice(&v4.octets());
        AddressKey { bytes, len: 4 }
    };
    match address {
        IpAddr::V4(a) => v4(a, bytes),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(a) => v4(a, bytes),
            None => {
                bytes.copy_from_slice(&v6.octets()[..8]);
                AddressKey { bytes, len: 8 }
            }
        },
    }
}

/// Derives the key for `per` from a request and the caller's identity. `credentials` says where
/// the operation's credential lives, for `per: token`.
pub fn key<'a, F: Facts + ?Sized>(
    per: &Per,
    facts: &'a F,
    identity: Option<&'a Identity>,
    credentials: &[Credential],
) -> Key<'a> {
    let present = |b: &'a [u8]| Key::Present(Cow::Borrowed(b));
    match per {
        Per::Route => Key::Present(Cow::Borrowed(b"")),
        Per::Address => Key::Present(Cow::Owned(address_key(facts.address()).as_bytes().to_vec())),
        Per::User => match identity.and_then(|i| i.user.as_deref()) {
            Some(u) => present(u.as_bytes()),
            None => Key::Missing,
        },
        Per::Org => match identity.and_then(|i| i.org.as_deref()) {
            Some(o) => present(o.as_bytes()),
            None => Key::Missing,
        },
        Per::Token => token(facts, credentials).map(Key::Present).unwrap_or(Key::Missing),
        Per::Header(name) => facts.header(name).map(present).unwrap_or(Key::Missing),
        Per::Cookie(name) => facts.cookie(name).map(present).unwrap_or(Key::Missing),
        Per::Query(name) => match facts.query(name) {
            Some(Cow::Borrowed(v)) => present(v.as_bytes()),
            Some(Cow::Owned(v)) => Key::Present(Cow::Owned(v.into_bytes())),
            None => Key::Missing,
        },
    }
}

/// The credential a request presents, where the operation's security schemes say it lives.
pub fn token<'a, F: Facts + ?Sized>(facts: &'a F, credentials: &[Credential]) -> Option<Cow<'a, [u8]>> {
    for credential in credentials {
        let found = match credential {
            Credential::Authorization => facts.header("authorization").map(|v| {
                // `Bearer abc` and `bearer abc` are one token: key on what follows the scheme.
                let v = trim(v);
                match v.iter().position(|b| *b == b' ') {
                    Some(i) => trim(&v[i + 1..]),
                    None => v,
                }
            }),
            Credential::Header(name) => facts.header(name),
            Credential::Cookie(name) => facts.cookie(name),
            Credential::Query(name) => match facts.query(name) {
                Some(Cow::Borrowed(v)) => Some(v.as_bytes()),
                Some(Cow::Owned(v)) => return Some(Cow::Owned(v.into_bytes())),
                None => None,
            },
        };
        if let Some(v) = found.filter(|v| !v.is_empty()) {
            return Some(Cow::Borrowed(v));
        }
    }
    None
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The first value of a query parameter, form-decoded (`+` is a space).
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<Cow<'a, str>> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if form_decode(k).as_deref() == Some(name) {
            return form_decode(v);
        }
    }
    None
}

fn form_decode(s: &str) -> Option<Cow<'_, str>> {
    if !s.contains(['%', '+']) {
        return Some(Cow::Borrowed(s));
    }
    crate::spec::pointer::percent_decode(&s.replace('+', " ")).map(Cow::Owned)
}

/// A cookie's value from a `Cookie` header (`a=1; b=2`).
pub fn cookie_value<'a>(header: &'a [u8], name: &str) -> Option<&'a [u8]> {
    header.split(|b| *b == b';').find_map(|pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|b| *b == b'=')?;
        (&pair[..eq] == name.as_bytes()).then(|| {
            let v = &pair[eq + 1..];
            v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v)
        })
    })
}

/// Facts given directly, for `explain` and tests.
#[derive(Clone, Debug)]
pub struct Given {
    pub address: IpAddr,
    /// Lower-case names.
    pub headers: Vec<(String, Vec<u8>)>,
    pub query: Option<String>,
}

impl Facts for Given {
    fn address(&self) -> IpAddr {
        self.address
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }

    fn query_string(&self) -> Option<&str> {
        self.query.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(headers: &[(&str, &str)], query: Option<&str>) -> Given {
        Given {
            address: "2001:db8:1:2:3:4:5:6".parse().unwrap(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            query: query.map(str::to_string),
        }
    }

    #[test]
    fn addresses_group_ipv6_by_64_and_unmap_ipv4() {
        assert_eq!(
            address_key("2001:db8:1:2:ffff::1".parse().unwrap()),
            address_key("2001:db8:1:2::9".parse().unwrap())
        );
        assert_ne!(address_key("2001:db8:1:3::1".parse().unwrap()), address_key("2001:db8:1:2::1".parse().unwrap()));
        assert_eq!(address_key("::ffff:192.0.2.7".parse().unwrap()).as_bytes(), [192, 0, 2, 7]);
        assert_eq!(address_key("192.0.2.7".parse().unwrap()), address_key("::ffff:192.0.2.7".parse().unwrap()));
    }

    #[test]
    fn keys_from_headers_cookies_query_and_credentials() {
        let g = given(
            &[("x-api-key", "k1"), ("cookie", "a=1; session=\"s2\""), ("authorization", "Bearer  tok ")],
            Some("q=a+b&tenant=t%31"),
        );
        let creds = [Credential::Authorization];
        assert_eq!(key(&Per::Header("x-api-key".into()), &g, None, &creds), Key::Present(Cow::Borrowed(b"k1")));
        assert_eq!(key(&Per::Cookie("session".into()), &g, None, &creds), Key::Present(Cow::Borrowed(b"s2")));
        assert_eq!(key(&Per::Query("tenant".into()), &g, None, &creds), Key::Present(Cow::Owned(b"t1".to_vec())));
        assert_eq!(key(&Per::Query("q".into()), &g, None, &creds), Key::Present(Cow::Owned(b"a b".to_vec())));
        assert_eq!(key(&Per::Token, &g, None, &creds), Key::Present(Cow::Borrowed(b"tok")));
        assert_eq!(
            key(&Per::Token, &g, None, &[Credential::Query("tenant".into())]),
            Key::Present(Cow::Owned(b"t1".to_vec()))
        );
        assert_eq!(key(&Per::User, &g, None, &creds), Key::Missing);
        assert_eq!(key(&Per::Header("x-other".into()), &g, None, &creds), Key::Missing);
        assert_eq!(missing(&Per::Header("x-other".into())), "header x-other");
    }
}
