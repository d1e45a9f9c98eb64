//! What a bound may be keyed on, read from a request: the address, headers, cookies, query
//! parameters, and the identity the server resolved. No credential is verified here.

use std::borrow::Cow;
use std::net::IpAddr;

use crate::policy::{Credential, Per};

pub mod body;
mod cookie;
mod cost;
mod credential;
mod facts;
mod key;
mod query;
mod reading;
mod surrogates;

pub use body::WithBody;
pub use cookie::cookie_value;
pub use cost::{CostProblem, cost_problem, stated_cost};
pub use credential::token;
pub use facts::{Facts, Given};
pub use key::Key;
pub use query::{query_param, query_params};
pub use reading::Unclear;

use key::cow_bytes;

/// Who the caller is, as far as the server could tell. Anonymous when `user` is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The signed-in user (an identity header, or a JWT's `sub`): the key of `per: user`.
    pub user: Option<String>,
    /// The caller's organisation (an identity header, or a JWT claim): the key of `per: org`.
    pub org: Option<String>,
    /// The caller's roles, which `applies-to: {roles}` matches; empty when none are known.
    pub roles: Vec<String>,
}

impl Identity {
    /// Whether the caller is signed in (has a user): see [`authenticated`].
    pub fn authenticated(&self) -> bool {
        authenticated(self.user.as_deref())
    }
}

/// What `applies-to: {authenticated}` means, wherever it is judged or predicted: a caller is
/// authenticated when it has a user. A credential alone (what `per: token` counts) does not
/// make a caller authenticated: `authenticated: false` counts it, by its address.
pub fn authenticated(user: Option<&str>) -> bool {
    user.is_some()
}

/// The values of a key made of parts ([`Per::Parts`]), as [`key`] joined them.
pub fn parts_of(joined: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = joined;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = (u32::from_le_bytes(*len) as usize).min(tail.len());
        parts.push(&tail[..len]);
        rest = &tail[len..];
    }
    parts
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
        Per::Json(pointer) => format!("a string or number at {pointer} in a JSON body"),
        Per::Form(name) => format!("form field {name} in a form-urlencoded body"),
        Per::Parts(parts) => {
            let each: Vec<String> = parts.iter().filter(|p| !p.always_present()).map(missing).collect();
            format!("one of: {}", each.join("; "))
        }
    }
}

/// How a request carries the key for `per` unclearly: `query parameter key more than once with
/// different values`.
pub fn unclear(per: &Per, unclear: Unclear) -> String {
    let what = || match per {
        Per::Token => "its credential".to_string(),
        per => missing(per),
    };
    match unclear {
        Unclear::Repeated => format!("{} more than once with different values", what()),
        Unclear::Malformed => format!("{} with a malformed percent-escape", what()),
        Unclear::Encoded => format!("{} in a compressed body (Content-Encoding), which opbound does not read", what()),
        // Whatever the key: none of the body's could be read.
        Unclear::Stalled { patience_ms } => {
            format!("a body that stalled (not all of it within {}s)", patience_ms as f64 / 1000.0)
        }
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
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The key an address counts under.
#[inline]
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
        Per::Token => token(facts, credentials),
        Per::Header(name) => facts.header_named(name).map(|v| v.map(Cow::Borrowed)).into(),
        Per::Cookie(name) => facts.cookie(name).map(Key::Present).unwrap_or(Key::Missing),
        Per::Query(name) => facts.query(name).map(|v| v.map(cow_bytes)).into(),
        Per::Json(pointer) => body::json_key(facts, pointer).into(),
        Per::Form(name) => body::form_key(facts, name).map(|v| v.map(cow_bytes)).into(),
        Per::Parts(parts) => {
            // Each part's length before its bytes, so no two combinations make the same key.
            let mut joined = Vec::new();
            for part in parts.iter() {
                match key(part, facts, identity, credentials) {
                    Key::Present(bytes) => {
                        joined.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                        joined.extend_from_slice(&bytes);
                    }
                    lacking => return lacking.into_owned(),
                }
            }
            Key::Present(Cow::Owned(joined))
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderName;

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
    fn a_key_of_parts_is_each_part_told_apart_and_lacks_what_any_lacks() {
        let parts = Per::Parts(vec![Per::Header(HeaderName::from_static("x-a")), Per::Query("q".into())].into());
        let of = |a: &str, q: &str| match key(&parts, &given(&[("x-a", a)], Some(&format!("q={q}"))), None, &[]) {
            Key::Present(k) => k.into_owned(),
            other => panic!("{other:?}"),
        };
        assert_ne!(of("ab", "c"), of("a", "bc"), "the parts' boundaries are in the key");
        assert_eq!(parts_of(&of("ab", "c")), [&b"ab"[..], b"c"]);
        assert!(matches!(key(&parts, &given(&[("x-a", "1")], None), None, &[]), Key::Missing));
        assert_eq!(missing(&parts), "one of: header x-a; query parameter q");
    }

    #[test]
    fn keys_from_headers_cookies_query_and_credentials() {
        let g = given(
            &[("x-api-key", "k1"), ("cookie", "a=1; session=\"s2\""), ("authorization", "Bearer  tok ")],
            Some("q=a+b&tenant=t%31"),
        );
        let creds = [Credential::Authorization];
        assert_eq!(
            key(&Per::Header(HeaderName::from_static("x-api-key")), &g, None, &creds),
            Key::Present(Cow::Borrowed(b"k1"))
        );
        assert_eq!(key(&Per::Cookie("session".into()), &g, None, &creds), Key::Present(Cow::Borrowed(b"s2")));
        assert_eq!(key(&Per::Query("tenant".into()), &g, None, &creds), Key::Present(Cow::Owned(b"t1".to_vec())));
        assert_eq!(key(&Per::Query("q".into()), &g, None, &creds), Key::Present(Cow::Owned(b"a b".to_vec())));
        assert_eq!(key(&Per::Token, &g, None, &creds), Key::Present(Cow::Borrowed(b"tok")));
        assert_eq!(
            key(&Per::Token, &g, None, &[Credential::Query("tenant".into())]),
            Key::Present(Cow::Owned(b"t1".to_vec()))
        );
        assert_eq!(key(&Per::User, &g, None, &creds), Key::Missing);
        assert_eq!(key(&Per::Header(HeaderName::from_static("x-other")), &g, None, &creds), Key::Missing);
        assert_eq!(missing(&Per::Header(HeaderName::from_static("x-other"))), "header x-other");
    }

    fn present(k: Key<'_>) -> Option<Vec<u8>> {
        match k {
            Key::Present(v) => Some(v.into_owned()),
            _ => None,
        }
    }

    /// Issue 9, item 7: `sid = abc` gave no key while Flask read `sid=abc`, and quoted or
    /// escaped spellings of one session counted apart.
    #[test]
    fn cookies_are_read_as_frameworks_read_them() {
        for header in [
            "sid=abc",
            "sid = abc",
            " sid=abc;",
            "sid=\"abc\"",
            "sid=\"\\a\\b\\c\"",
            "sid=\"\\141bc\"",
            "sid=%61bc",
            "other=1;sid=abc",
            "sid=abc; sid=zzz",
            "sid\t=\tabc",
        ] {
            let g = given(&[("cookie", header)], None);
            assert_eq!(
                present(key(&Per::Cookie("sid".into()), &g, None, &[])).as_deref(),
                Some(&b"abc"[..]),
                "{header}"
            );
        }
        let g = given(&[("cookie", "sidx=abc; xsid=abc")], None);
        assert_eq!(key(&Per::Cookie("sid".into()), &g, None, &[]), Key::Missing);
        let bad = given(&[("cookie", "sid=%ZZ")], None);
        assert_eq!(present(key(&Per::Cookie("sid".into()), &bad, None, &[])).as_deref(), Some(&b"%ZZ"[..]));
    }

    /// Issue 9, item 8: `?key=%ZZ&key=REAL` made a present key missing, and repeated parameters
    /// and headers were read as the first value where some frameworks read the last.
    #[test]
    fn repeated_or_malformed_keys_are_unclear_not_missing() {
        let q = Per::Query("key".into());
        for (query, want) in [
            ("key=REAL", Ok(b"REAL".to_vec())),
            ("key=REAL&key=REAL", Ok(b"REAL".to_vec())),
            ("key=RE%41L&key=REAL", Ok(b"REAL".to_vec())),
            ("other=%ZZ&key=REAL", Ok(b"REAL".to_vec())),
            ("key=%ZZ&key=REAL", Err(Unclear::Malformed)),
            ("key=%ZZ", Err(Unclear::Malformed)),
            ("key=REAL&key=junk", Err(Unclear::Repeated)),
            ("key=junk&key=REAL", Err(Unclear::Repeated)),
        ] {
            let got = match key(&q, &given(&[], Some(query)), None, &[]) {
                Key::Present(v) => Ok(v.into_owned()),
                Key::Unclear(u) => Err(u),
                Key::Missing => panic!("{query}: missing"),
            };
            assert_eq!(got, want, "{query}");
        }
        let h = Per::Header(HeaderName::from_static("x-api-key"));
        let twice = given(&[("x-api-key", "REAL"), ("x-api-key", "junk")], None);
        assert_eq!(key(&h, &twice, None, &[]), Key::Unclear(Unclear::Repeated));
        let same = given(&[("x-api-key", "REAL"), ("x-api-key", "REAL")], None);
        assert_eq!(present(key(&h, &same, None, &[])).as_deref(), Some(&b"REAL"[..]));
        let auth = given(&[("authorization", "Bearer a"), ("authorization", "Bearer b")], None);
        assert_eq!(key(&Per::Token, &auth, None, &[Credential::Authorization]), Key::Unclear(Unclear::Repeated));
    }

    /// Issue 9, item 14: `Basic base64(key:)` and `Bearer key` counted apart.
    #[test]
    fn one_credential_sent_either_way_is_one_key() {
        let creds = [Credential::Authorization];
        for value in [
            "Bearer sk_live_1",
            "bearer sk_live_1",
            "Basic c2tfbGl2ZV8xOg==",         // sk_live_1:
            "basic c2tfbGl2ZV8xOg",           // unpadded
            "Basic OnNrX2xpdmVfMQ==",         // :sk_live_1
            "Basic c2tfbGl2ZV8xOmh1bnRlcjI=", // sk_live_1:hunter2 counts against the user
        ] {
            let g = given(&[("authorization", value)], None);
            assert_eq!(present(key(&Per::Token, &g, None, &creds)).as_deref(), Some(&b"sk_live_1"[..]), "{value}");
        }
        let odd = given(&[("authorization", "Basic not*base64")], None);
        assert_eq!(present(key(&Per::Token, &odd, None, &creds)).as_deref(), Some(&b"not*base64"[..]));
    }
}
