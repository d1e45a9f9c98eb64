//! Any bytes as the protobuf messages Envoy sends `decide --grpc`: an ext_authz `CheckRequest`
//! or a rate-limit `RateLimitRequest` (the first byte picks which), carrying whatever a client
//! put in its request. Reading them never panics, and what is read keeps its promises: no
//! pseudo-header among the headers, at least one hit, the target exactly as sent.
#![no_main]

use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use libfuzzer_sys::fuzz_target;
use opbound::server::grpc::{Described, authz, rls};
use prost::Message;

fn holds(d: &Described) {
    assert!(d.hits >= 1);
    assert!(d.headers.keys().all(|k| !k.as_str().starts_with(':')));
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, message)) = data.split_first() else { return };
    if pick % 2 == 0 {
        let Ok(check) = CheckRequest::decode(message) else { return };
        if let Ok(d) = authz::describe(&check) {
            holds(&d);
            let path = &check.attributes.unwrap().request.unwrap().http.unwrap().path;
            assert_eq!(d.target, path.as_bytes());
            assert_eq!(d.hits, 1);
        }
    } else {
        let Ok(asked) = RateLimitRequest::decode(message) else { return };
        if let Ok(d) = rls::describe(&asked) {
            holds(&d);
            assert!(d.body.is_none());
        }
    }
});
