//! Envoy's rate-limit service v3 (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`),
//! for gateways configured with the rate-limit filter. Envoy sends descriptors, lists of
//! key/value entries its route's actions produce; opbound reads one request from all of them:
//!
//! - `method` and `path` (from `request_headers` actions on `:method` and `:path`), required;
//! - `remote_address` (Envoy's `remote_address` action), the client's address; without one that
//!   parses, the unknown client ([`super::UNKNOWN_CLIENT`]);
//! - any other key, the request header of that name (`authorization`, `x-api-key`, `cookie`).
//!
//! A key given twice with different values cannot be read. `hits_addend` (the descriptor's, or
//! the request's) is how many requests this one counts as; 0 counts as 1. A descriptor with
//! `is_negative_hits` is a refund, which opbound does not give: it is left out of the request,
//! and a call of refunds alone is answered `OK`, counting nothing. The answer repeats the one
//! decision for every descriptor; an untrusted peer or a request that cannot be read is answered
//! `OVER_LIMIT` (fail closed) with a 400 problem body and no per-descriptor status, and a call
//! past the caps ([`super::MAX_DESCRIPTORS`], [`super::MAX_ENTRIES`]) with `INVALID_ARGUMENT`.

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf;
use http::{HeaderMap, HeaderValue, StatusCode};
use prost::Message;

use super::{ANSWER_MAX, Described, Grpc, MAX_DESCRIPTORS, MAX_ENTRIES, Unreadable, add_header, header_values};
use crate::engine::problem;
use crate::policy::Policy;
use crate::policy::bound::BoundDef;

/// The rate-limit service.
pub(crate) struct Rls(pub(crate) Arc<Grpc>);

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let peer = super::peer_of(&request);
        let asked = request.get_ref();
        if self.0.trusts(peer) && refunds_only(asked) {
            // opbound gives no budget back through this service, and counting a refund as hits
            // would charge the caller twice.
            tracing::debug!(peer = ?peer, "a rate-limit request of refunds alone answered OK, counted nowhere");
            let status = DescriptorStatus { code: Code::Ok as i32, ..Default::default() };
            return Ok(tonic::Response::new(answer(
                Code::Ok,
                vec![status; asked.descriptors.len()],
                HeaderMap::new(),
                None,
            )));
        }
        let over = super::over_caps(&request);
        let answer = match self.0.judge(peer, "ratelimit", || over.map_or_else(|| describe(asked), Err)).await {
            Ok(judgement) => {
                let mut headers = HeaderMap::new();
                crate::server::set_rate_headers(&mut headers, self.0.shared.style, &judgement);
                let allowed = judgement.decision.allowed();
                let code = if allowed { Code::Ok } else { Code::OverLimit };
                let status = descriptor_status(code, judgement.limiter.policy(), &judgement.decision);
                let refund = DescriptorStatus { code: Code::Ok as i32, ..Default::default() };
                let statuses =
                    asked.descriptors.iter().map(|d| if d.is_negative_hits { refund.clone() } else { status.clone() });
                let body = (!allowed).then(|| crate::server::refusal_body(&judgement).1);
                answer(code, statuses.collect(), headers, body)
            }
            Err(why) => refused(&why)?,
        };
        Ok(tonic::Response::new(answer))
    }
}

/// Whether a call asks only for refunds (`is_negative_hits`): within the caps, with at least
/// one descriptor.
fn refunds_only(asked: &RateLimitRequest) -> bool {
    !asked.descriptors.is_empty()
        && asked.descriptors.len() <= MAX_DESCRIPTORS
        && asked.descriptors.iter().all(|d| d.is_negative_hits)
}

/// The answer to a call refused before it was judged. Past the caps, a call is no gateway's:
/// it gets `INVALID_ARGUMENT`, an error status. Otherwise (an untrusted peer, a request that
/// cannot be read) one `OVER_LIMIT` with a 400 problem body and no per-descriptor status: a
/// misconfigured Envoy then refuses its clients (fail closed), where an error status would let
/// them through unless it has `failure_mode_deny: true`.
pub fn refused(why: &Unreadable) -> Result<RateLimitResponse, tonic::Status> {
    match why {
        Unreadable::TooManyDescriptors(_) | Unreadable::TooManyEntries(_) | Unreadable::TooManyHeaders(_) => {
            Err(tonic::Status::invalid_argument(why.to_string()))
        }
        Unreadable::Untrusted | Unreadable::Malformed(_) => {
            let body = crate::server::problem_json(StatusCode::BAD_REQUEST, "malformed-request", &why.to_string());
            Ok(answer(Code::OverLimit, Vec::new(), HeaderMap::new(), Some(body)))
        }
    }
}

/// The request the descriptors describe, all of them read as one, refunds left out. A call past
/// [`MAX_DESCRIPTORS`] or [`MAX_ENTRIES`] is not read.
pub fn describe(asked: &RateLimitRequest) -> Result<Described, Unreadable> {
    if asked.descriptors.len() > MAX_DESCRIPTORS {
        return Err(Unreadable::TooManyDescriptors(asked.descriptors.len()));
    }
    let counted = || asked.descriptors.iter().filter(|d| !d.is_negative_hits);
    let count: usize = counted().map(|d| d.entries.len()).sum();
    if count > MAX_ENTRIES {
        return Err(Unreadable::TooManyEntries(count));
    }
    let mut entries: BTreeMap<String, &str> = BTreeMap::new();
    for entry in counted().flat_map(|d| &d.entries) {
        let key = entry.key.to_ascii_lowercase();
        match entries.get(&key) {
            Some(seen) if *seen != entry.value => {
                return Err(format!("the descriptors give {:?} twice, with different values", entry.key).into());
            }
            Some(_) => {}
            None => {
                entries.insert(key, &entry.value);
            }
        }
    }
    let method =
        entries.remove("method").ok_or("no descriptor entry \"method\" (a request_headers action on :method)")?;
    let path = entries.remove("path").ok_or("no descriptor entry \"path\" (a request_headers action on :path)")?;
    let source = entries.remove("remote_address").and_then(super::source_address);
    let mut headers = HeaderMap::new();
    for (name, value) in entries {
        add_header(&mut headers, &name, value.as_bytes());
    }
    let mut stated = counted().filter_map(|d| d.hits_addend.as_ref().map(|h| h.value));
    let hits = match stated.next() {
        Some(first) if stated.all(|h| h == first) => first,
        Some(_) => return Err("the descriptors give different hits_addend".into()),
        None => u64::from(asked.hits_addend),
    };
    let hits = u32::try_from(hits.max(1)).unwrap_or(u32::MAX);
    Ok(Described { method: method.to_string(), target: path.as_bytes().to_vec(), headers, source, hits, body: None })
}

/// What a descriptor's status says of a decision: the bound reported (its limit, as Envoy's
/// units allow), what is left and when it is whole again.
fn descriptor_status(code: Code, policy: &Policy, decision: &crate::engine::Decision) -> DescriptorStatus {
    let Some(report) = decision.report else {
        return DescriptorStatus { code: code as i32, ..Default::default() };
    };
    let bound = &policy.bounds[report.bound];
    let (requests_per_unit, unit) = per_unit(&bound.def);
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit { name: bound.id.clone(), requests_per_unit, unit: unit as i32 }),
        limit_remaining: report.remaining,
        duration_until_reset: Some(protobuf::Duration {
            seconds: i64::try_from(report.reset / 1_000_000_000).unwrap_or(i64::MAX),
            nanos: (report.reset % 1_000_000_000) as i32,
        }),
        ..Default::default()
    }
}

/// A bound's limit in Envoy's terms: requests per one second, minute, hour, day, week, month or
/// year when its window or period is exactly one of those; otherwise `UNKNOWN` (the name says
/// the bound, and the spec its window).
fn per_unit(def: &BoundDef) -> (u32, rate_limit::Unit) {
    use rate_limit::Unit;
    let limit = def.limit.get();
    if let Some(window) = def.algorithm.window() {
        let unit = match window.nanos() / 1_000_000_000 {
            _ if window.nanos() % 1_000_000_000 != 0 => Unit::Unknown,
            1 => Unit::Second,
            60 => Unit::Minute,
            3_600 => Unit::Hour,
            86_400 => Unit::Day,
            604_800 => Unit::Week,
            _ => Unit::Unknown,
        };
        return (limit, unit);
    }
    if let Some(periods) = def.algorithm.periods() {
        let period = periods.period();
        let unit = match (period.count().get(), period.unit()) {
            (1, crate::period::Unit::Hour) => Unit::Hour,
            (1, crate::period::Unit::Day) => Unit::Day,
            (1, crate::period::Unit::Week) => Unit::Week,
            (1, crate::period::Unit::Month) => Unit::Month,
            (1, crate::period::Unit::Year) => Unit::Year,
            _ => Unit::Unknown,
        };
        return (limit, unit);
    }
    (limit, Unit::Unknown)
}

/// The answer: the overall code, each descriptor's status, the RateLimit headers for Envoy to
/// add to the response, and on a refusal the problem body of the 429 Envoy sends. Past
/// [`ANSWER_MAX`] the statuses are left out: Envoy acts on the overall code, and reads the
/// statuses only for its own `x-ratelimit-*` headers.
fn answer(
    code: Code,
    statuses: Vec<DescriptorStatus>,
    mut headers: HeaderMap,
    body: Option<String>,
) -> RateLimitResponse {
    if body.is_some() {
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(problem::CONTENT_TYPE));
    }
    let mut answer = RateLimitResponse {
        overall_code: code as i32,
        statuses,
        response_headers_to_add: header_values(&headers),
        raw_body: body.map(String::into_bytes).unwrap_or_default(),
        ..Default::default()
    };
    if answer.encoded_len() > ANSWER_MAX {
        answer.statuses = Vec::new();
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
            hits_addend: hits.map(|value| protobuf::UInt64Value { value }),
            ..Default::default()
        }
    }

    fn request(descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
        RateLimitRequest { domain: "opbound".into(), descriptors, hits_addend }
    }

    #[test]
    fn descriptors_are_read_as_one_request() {
        let d = describe(&request(
            vec![
                descriptor(&[("method", "post"), ("path", "/v1/items?x=1"), ("remote_address", "198.51.100.4")], None),
                descriptor(&[("X-Api-Key", "k"), ("method", "post")], None),
            ],
            0,
        ))
        .unwrap();
        assert_eq!((d.method.as_str(), &d.target[..]), ("post", &b"/v1/items?x=1"[..]));
        assert_eq!(d.source, Some("198.51.100.4".parse().unwrap()));
        assert_eq!(d.headers.get("x-api-key").unwrap(), "k");
        assert!(d.headers.get("method").is_none());
        assert_eq!(d.hits, 1, "0 counts as 1");
    }

    #[test]
    fn hits_come_from_the_descriptor_before_the_request() {
        let base = [("method", "GET"), ("path", "/")];
        assert_eq!(describe(&request(vec![descriptor(&base, None)], 7)).unwrap().hits, 7);
        assert_eq!(describe(&request(vec![descriptor(&base, Some(3))], 7)).unwrap().hits, 3);
        assert_eq!(describe(&request(vec![descriptor(&base, Some(0))], 7)).unwrap().hits, 1);
        assert_eq!(describe(&request(vec![descriptor(&base, Some(u64::MAX))], 0)).unwrap().hits, u32::MAX);
        let split = vec![descriptor(&base, Some(3)), descriptor(&base, Some(4))];
        assert!(describe(&request(split, 0)).is_err());
    }

    #[test]
    fn what_cannot_be_read_is_said() {
        let e = describe(&request(vec![descriptor(&[("path", "/")], None)], 0)).unwrap_err();
        assert!(e.to_string().contains("method"), "{e}");
        let e = describe(&request(vec![descriptor(&[("method", "GET")], None)], 0)).unwrap_err();
        assert!(e.to_string().contains("path"), "{e}");
        let twice = vec![descriptor(&[("method", "GET"), ("path", "/a")], None), descriptor(&[("path", "/b")], None)];
        assert!(describe(&request(twice, 0)).unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn a_remote_address_is_read_as_gateways_write_it_or_is_the_unknown_client() {
        let from = |address: &str| {
            let d = descriptor(&[("method", "GET"), ("path", "/"), ("remote_address", address)], None);
            describe(&request(vec![d], 0)).unwrap().source
        };
        let v6: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        for written in ["2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443", " 2001:db8::1 "] {
            assert_eq!(from(written), Some(v6), "{written:?}");
        }
        assert_eq!(from("203.0.113.7:5000"), Some("203.0.113.7".parse().unwrap()));
        assert_eq!(from("::ffff:203.0.113.7"), Some("203.0.113.7".parse().unwrap()));
        for unusable in ["", "nope", "[2001:db8::1", "203.0.113.7:http", "fe80::1%eth0"] {
            assert_eq!(from(unusable), None, "{unusable:?} is the unknown client");
        }
        let none = describe(&request(vec![descriptor(&[("method", "GET"), ("path", "/")], None)], 0)).unwrap();
        assert_eq!(none.source, None);
    }

    #[test]
    fn calls_past_the_caps_are_not_read() {
        let base = descriptor(&[("method", "GET"), ("path", "/")], None);
        assert!(describe(&request(vec![base.clone(); MAX_DESCRIPTORS], 0)).is_ok());
        let past = describe(&request(vec![base.clone(); MAX_DESCRIPTORS + 1], 0)).unwrap_err();
        assert_eq!(past, Unreadable::TooManyDescriptors(MAX_DESCRIPTORS + 1));
        // Entries, in as few descriptors as one: each key would be a header name.
        let names: Vec<(String, String)> = (0..=MAX_ENTRIES).map(|i| (format!("x-{i}"), "v".to_string())).collect();
        let mut wide: Vec<(&str, &str)> = names.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        wide.extend([("method", "GET"), ("path", "/")]);
        let e = describe(&request(vec![descriptor(&wide, None)], 0)).unwrap_err();
        assert_eq!(e, Unreadable::TooManyEntries(MAX_ENTRIES + 3));
        // 32,769 distinct names once made HeaderMap::append panic; now it is refused unread.
        let names: Vec<(String, String)> = (0..32_769).map(|i| (format!("x-{i}"), String::new())).collect();
        let flood: Vec<(&str, &str)> = names.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(matches!(describe(&request(vec![descriptor(&flood, None)], 0)), Err(Unreadable::TooManyEntries(_))));
    }

    #[test]
    fn refunds_are_left_out_of_the_request() {
        let refund = |entries: &[(&str, &str)], hits| RateLimitDescriptor {
            is_negative_hits: true,
            ..descriptor(entries, Some(hits))
        };
        let counted = descriptor(&[("method", "POST"), ("path", "/batch")], Some(2));
        // The refund's own hits and entries do not count: no clash over hits_addend or path.
        let mixed = request(vec![counted.clone(), refund(&[("path", "/other")], 9)], 0);
        let d = describe(&mixed).unwrap();
        assert_eq!((&d.target[..], d.hits), (&b"/batch"[..], 2));
        assert!(!refunds_only(&mixed));
        let alone = request(vec![refund(&[("method", "POST"), ("path", "/batch")], 3)], 0);
        assert!(refunds_only(&alone));
        assert!(describe(&alone).is_err(), "nothing left to judge");
        assert!(!refunds_only(&request(Vec::new(), 0)));
        assert!(!refunds_only(&request(vec![refund(&[], 1); MAX_DESCRIPTORS + 1], 0)), "past the cap");
    }

    #[test]
    fn a_refusal_is_one_small_answer() {
        let huge = "é\"\\\u{1}".repeat(1 << 20);
        for why in [Unreadable::Untrusted, Unreadable::Malformed(format!("the original target {huge:?} is no path"))] {
            let r = refused(&why).unwrap();
            assert_eq!((r.overall_code, r.statuses.len()), (Code::OverLimit as i32, 0));
            assert!(
                r.encoded_len() <= crate::server::decide::grpc::REFUSAL_MAX,
                "{} bytes for {why:?}",
                r.encoded_len()
            );
        }
        let past = refused(&Unreadable::TooManyDescriptors(1_900_000)).unwrap_err();
        assert_eq!(past.code(), tonic::Code::InvalidArgument);
        assert!(past.message().len() < 200, "{}", past.message());
    }

    #[test]
    fn a_judged_answer_is_bounded_whatever_the_policy_names() {
        let status = DescriptorStatus {
            code: Code::Ok as i32,
            current_limit: Some(RateLimit { name: "o".repeat(1000), requests_per_unit: 5, unit: 2 }),
            ..Default::default()
        };
        let few = answer(Code::Ok, vec![status.clone(); 3], HeaderMap::new(), None);
        assert_eq!(few.statuses.len(), 3, "one per descriptor, as Envoy expects");
        let many = answer(Code::Ok, vec![status; MAX_DESCRIPTORS], HeaderMap::new(), None);
        assert!(many.statuses.is_empty());
        assert!(many.encoded_len() <= ANSWER_MAX);
    }
}
