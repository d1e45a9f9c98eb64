//! Any bytes as the protobuf messages Envoy sends `decide --grpc`: an ext_authz `CheckRequest`
//! or a rate-limit `RateLimitRequest` (the first byte picks which), carrying whatever a client
//! put in its request, read by the code that reads them before judging. Reading them never
//! panics, and what is read keeps its promises: no pseudo-header among the headers, at least one
//! hit, the target exactly as sent, never more headers than the caps allow; what is refused is
//! one answer of at most `REFUSAL_MAX` bytes, however large the message. A message decoding
//! refuses past a cap is refused for it before decoding too, counted from its wire form at least
//! as high (repeated fields merged, or a map's repeated keys, decode into fewer).
#![no_main]

use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use libfuzzer_sys::fuzz_target;
use opbound::fuzzing::grpc::{Described, MAX_ENTRIES, MAX_HEADERS, REFUSAL_MAX, Unreadable, authz, rls, wire};
use prost::Message;

fn holds(d: &Described) {
    assert!(d.hits >= 1);
    assert!(d.headers.keys().all(|k| !k.as_str().starts_with(':')));
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, message)) = data.split_first() else { return };
    if pick % 2 == 0 {
        let Ok(check) = CheckRequest::decode(message) else { return };
        match authz::describe(&check) {
            Ok(d) => {
                holds(&d);
                // The host may come on top of the headers.
                assert!(d.headers.keys_len() <= MAX_HEADERS + 1);
                let path = &check.attributes.unwrap().request.unwrap().http.unwrap().path;
                assert_eq!(d.target, path.as_bytes());
                assert_eq!(d.hits, 1);
            }
            Err(why) => {
                if let Unreadable::TooManyHeaders(n) = why {
                    assert!(matches!(wire::check_over_caps(message), Some(Unreadable::TooManyHeaders(m)) if m >= n));
                }
                assert!(authz::refused(&why).encoded_len() <= REFUSAL_MAX);
            }
        }
    } else {
        let Ok(asked) = RateLimitRequest::decode(message) else { return };
        match rls::describe(&asked) {
            Ok(d) => {
                holds(&d);
                assert!(d.body.is_none());
                assert!(d.headers.keys_len() <= MAX_ENTRIES);
            }
            Err(why) => match rls::refused(&why) {
                _ if matches!(why, Unreadable::TooManyDescriptors(_) | Unreadable::TooManyEntries(_))
                    && wire::rate_limit_over_caps(message).is_none() =>
                {
                    panic!("decoding refuses {why:?}, the wire count does not")
                }
                Ok(answer) => {
                    assert!(answer.statuses.is_empty());
                    assert!(answer.encoded_len() <= REFUSAL_MAX);
                }
                Err(status) => {
                    assert!(matches!(why, Unreadable::TooManyDescriptors(_) | Unreadable::TooManyEntries(_)));
                    assert!(status.message().len() <= REFUSAL_MAX);
                }
            },
        }
    }
});
