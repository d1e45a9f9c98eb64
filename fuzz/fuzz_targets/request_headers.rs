//! Any bytes as the headers a client controls: forwarding headers, cookies, the query string and
//! credentials (repeated, malformed, quoted, Basic-encoded). Reading them never panics, and an
//! untrusted peer's headers never matter.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use opbound::policy::{Credential, Per};
use opbound::request::{Facts, key};
use opbound::fuzzing::facts::{AddressHeader, TrustedProxies};
use opbound::fuzzing::facts::HeaderFacts;

fuzz_target!(|data: &[u8]| {
    let mut headers = http::HeaderMap::new();
    for (i, part) in data.split(|b| *b == b'\n').enumerate() {
        let name = ["x-forwarded-for", "forwarded", "cookie", "authorization", "x-api-key"][i % 5];
        if let Ok(v) = http::HeaderValue::from_bytes(part) {
            headers.append(name, v);
        }
    }
    let query = std::str::from_utf8(data).ok();
    let trusted = TrustedProxies::new(vec!["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()]);
    let untrusted: IpAddr = "192.0.2.9".parse().unwrap();
    let headers = opbound::fuzzing::facts::Headers::Map(&headers);
    assert_eq!(trusted.client_address(untrusted, headers), untrusted);
    let client = trusted.client_address("127.0.0.1".parse().unwrap(), headers);
    // The other address header, read only when configured: never a panic either.
    let forwarded = trusted.clone().reading(AddressHeader::Forwarded);
    assert_eq!(forwarded.client_address(untrusted, headers), untrusted);
    let _ = forwarded.client_address("127.0.0.1".parse().unwrap(), headers);
    let facts = HeaderFacts { address: client, headers, query };
    let credentials =
        [Credential::Authorization, Credential::Cookie("session".into()), Credential::Query("key".into())];
    for per in [
        Per::Address,
        Per::Token,
        Per::Header(http::HeaderName::from_static("x-api-key")),
        Per::Cookie("session".into()),
        Per::Query("key".into()),
    ] {
        let _ = key(&per, &facts, None, &credentials);
    }
    let _ = facts.cookie("a");
});
