//! Envoy's ext_authz v3 over gRPC (`envoy.service.auth.v3.Authorization/Check`): the request
//! Envoy describes in `attributes.request.http` is judged; an allowed one is answered with the
//! RateLimit headers for Envoy to add to the upstream's response, a refused one with the
//! response `serve` would have sent (status, headers, problem body) for Envoy to send instead.

use std::net::IpAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::HttpRequest;
use envoy_types::pb::envoy::service::auth::v3::authorization_server::Authorization;
use envoy_types::pb::envoy::service::auth::v3::{
    AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse, check_response,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::rpc;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::{Described, Grpc, MAX_HEADERS, Unreadable, add_header, header_options};
use crate::engine::problem;

/// The ext_authz service.
pub(crate) struct Authz(pub(crate) Arc<Grpc>);

#[tonic::async_trait]
impl Authorization for Authz {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let peer = super::peer_of(&request);
        let over = super::over_caps(&request);
        let answer =
            match self.0.judge(peer, "ext_authz", || over.map_or_else(|| describe(request.get_ref()), Err)).await {
                Ok(judgement) => {
                    let mut headers = HeaderMap::new();
                    crate::server::set_rate_headers(&mut headers, self.0.shared.style, &judgement);
                    if judgement.decision.allowed() {
                        allowed(&headers)
                    } else {
                        let (status, body) = crate::server::refusal_body(&judgement);
                        denied(status, headers, body)
                    }
                }
                Err(why) => refused(&why),
            };
        Ok(tonic::Response::new(answer))
    }
}

/// The answer to a check refused before it was judged: one denial, never an error status,
/// which Envoy's `failure_mode_allow: true` would turn into an allow. An untrusted peer is
/// `PERMISSION_DENIED` with a 400 for its client; too many headers a 431; anything else that
/// cannot be read a 400.
pub fn refused(why: &Unreadable) -> CheckResponse {
    let status = match why {
        Unreadable::TooManyHeaders(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    let body = crate::server::problem_json(status, "malformed-request", &why.to_string());
    let mut answer = denied(status, HeaderMap::new(), body);
    if *why == Unreadable::Untrusted
        && let Some(status) = answer.status.as_mut()
    {
        status.code = tonic::Code::PermissionDenied as i32;
    }
    answer
}

/// The request a check describes: `attributes.request.http` (method, path with query, headers,
/// host) and the address of Envoy's downstream peer, `attributes.source.address`. A check with
/// more than [`MAX_HEADERS`] headers is not read.
pub fn describe(check: &CheckRequest) -> Result<Described, Unreadable> {
    let attributes = check.attributes.as_ref();
    let http = attributes
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
        .ok_or("the check describes no HTTP request (attributes.request.http)")?;
    let count = http.header_map.as_ref().map_or(0, |m| m.headers.len()) + http.headers.len();
    if count > MAX_HEADERS {
        return Err(Unreadable::TooManyHeaders(count));
    }
    let headers = headers_of(http);
    Ok(Described {
        method: http.method.clone(),
        target: http.path.as_bytes().to_vec(),
        body: body_of(http, &headers)?,
        headers,
        source: attributes.and_then(source_address),
        hits: 1,
    })
}

/// The header Envoy adds to the check when it sends a body: `true` when the body is only the
/// first `max_request_bytes` (`allow_partial_message`), `false` when it is whole.
const PARTIAL_BODY: &str = "x-envoy-auth-partial-body";

/// The request body, when Envoy sends it (`with_request_body`): `raw_body` (with
/// `pack_as_bytes`) or `body`. Only part of it is read as no body at all, as `serve` treats a
/// body over `--max-key-body`: a key in it is missing, never read from a prefix the client
/// chose to cut.
///
/// Envoy drops a client's own `x-envoy-auth-partial-body` from the check and writes its own,
/// exactly `true` or `false`, only beside a body (`check_request_utils.cc`). So the body is
/// partial only when every value says `true`, whole when none is given or every one says
/// `false`; values that disagree, or a spelling Envoy never writes, came from elsewhere too (a
/// client, through a gateway that passes its copy on) and make the check unreadable. A client
/// must never be able to mark a whole body as cut: with `missing: pass` its key would then be
/// skipped and the request counted by no bound keyed on the body.
fn body_of(http: &HttpRequest, headers: &HeaderMap) -> Result<Option<bytes::Bytes>, Unreadable> {
    let body: &[u8] = if http.raw_body.is_empty() { http.body.as_bytes() } else { &http.raw_body };
    if body.is_empty() {
        return Ok(None);
    }
    let mut said = headers.get_all(PARTIAL_BODY).iter().map(|v| v.as_bytes());
    let partial = match said.next() {
        None => false,
        Some(first @ (b"true" | b"false")) if said.all(|v| v == first) => first == b"true",
        Some(_) => {
            return Err(Unreadable::Malformed(format!(
                "the check says {PARTIAL_BODY} more than one way, or not as Envoy writes it (true or false); a gateway must drop the client's copy, as Envoy does"
            )));
        }
    };
    Ok((!partial).then(|| bytes::Bytes::copy_from_slice(body)))
}

/// The request's headers: `header_map` when Envoy sends it (`encode_raw_headers`: every value
/// apart, raw bytes), otherwise the `headers` map (Envoy joins a repeated header's values with
/// commas there). The host is a header too.
fn headers_of(http: &HttpRequest) -> HeaderMap {
    let mut headers = HeaderMap::new();
    match &http.header_map {
        Some(map) if !map.headers.is_empty() => {
            for h in &map.headers {
                let value = if h.raw_value.is_empty() { h.value.as_bytes() } else { &h.raw_value[..] };
                add_header(&mut headers, &h.key, value);
            }
        }
        _ => {
            for (name, value) in &http.headers {
                add_header(&mut headers, name, value.as_bytes());
            }
        }
    }
    if !http.host.is_empty() && !headers.contains_key(http::header::HOST) {
        add_header(&mut headers, "host", http.host.as_bytes());
    }
    headers
}

/// The IP address of whoever connected to Envoy, however it is written (see
/// [`super::source_address`]); `None` for a pipe, an internal address, or text that is not an
/// address.
fn source_address(attributes: &AttributeContext) -> Option<IpAddr> {
    let address = attributes.source.as_ref()?.address.as_ref()?.address.as_ref()?;
    match address {
        address::Address::SocketAddress(s) => super::source_address(&s.address),
        _ => None,
    }
}

/// An allowed request: the RateLimit headers go on the upstream's response.
fn allowed(headers: &HeaderMap) -> CheckResponse {
    CheckResponse {
        status: Some(rpc::Status { code: tonic::Code::Ok as i32, ..Default::default() }),
        http_response: Some(check_response::HttpResponse::OkResponse(OkHttpResponse {
            response_headers_to_add: header_options(headers),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A refused request: Envoy answers the client with this status, these headers and this body.
fn denied(status: StatusCode, mut headers: HeaderMap, body: String) -> CheckResponse {
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(problem::CONTENT_TYPE));
    let code = match status {
        StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
        s if s.is_client_error() => tonic::Code::InvalidArgument,
        _ => tonic::Code::PermissionDenied,
    };
    let message = status.canonical_reason().unwrap_or("refused").to_string();
    CheckResponse {
        status: Some(rpc::Status { code: code as i32, message, ..Default::default() }),
        http_response: Some(check_response::HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus { code: i32::from(status.as_u16()) }),
            headers: header_options(&headers),
            body,
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{
        Address, HeaderMap as PbHeaderMap, HeaderValue as PbHeader, SocketAddress,
    };
    use envoy_types::pb::envoy::service::auth::v3::attribute_context::{Peer, Request};
    use prost::Message;

    fn check(http: HttpRequest, source: Option<&str>) -> CheckRequest {
        let source = source.map(|ip| Peer {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(SocketAddress {
                    address: ip.to_string(),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        });
        CheckRequest {
            attributes: Some(AttributeContext {
                source,
                request: Some(Request { http: Some(http), ..Default::default() }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_check_describes_method_target_headers_and_source() {
        let http = HttpRequest {
            method: "get".into(),
            path: "/api/items?page=2".into(),
            host: "api.example".into(),
            headers: [(":path".to_string(), "/ignored".to_string()), ("x-api-key".to_string(), "k".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let d = describe(&check(http, Some("203.0.113.7"))).unwrap();
        assert_eq!((d.method.as_str(), &d.target[..]), ("get", &b"/api/items?page=2"[..]));
        assert_eq!(d.headers.get("x-api-key").unwrap(), "k");
        assert_eq!(d.headers.get("host").unwrap(), "api.example");
        assert!(d.headers.get(":path").is_none());
        assert_eq!(d.source, Some("203.0.113.7".parse().unwrap()));
    }

    #[test]
    fn raw_headers_keep_each_value_apart() {
        let h = |k: &str, v: &[u8]| PbHeader { key: k.into(), raw_value: v.to_vec(), ..Default::default() };
        let http = HttpRequest {
            method: "GET".into(),
            path: "/".into(),
            header_map: Some(PbHeaderMap { headers: vec![h("x-api-key", b"a"), h("x-api-key", b"b")] }),
            headers: [("x-api-key".to_string(), "a,b".to_string())].into_iter().collect(),
            ..Default::default()
        };
        let d = describe(&check(http, None)).unwrap();
        assert_eq!(d.headers.get_all("x-api-key").iter().count(), 2);
        assert_eq!(d.source, None);
    }

    #[test]
    fn a_check_without_an_http_request_is_unreadable() {
        assert!(describe(&CheckRequest::default()).is_err());
    }

    #[test]
    fn a_source_is_read_however_it_is_written_or_is_unknown() {
        let from = |source: &str| {
            let http = HttpRequest { method: "GET".into(), path: "/".into(), ..Default::default() };
            describe(&check(http, Some(source))).unwrap().source
        };
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        for written in ["2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443"] {
            assert_eq!(from(written), Some(v6), "{written:?}");
        }
        assert_eq!(from("203.0.113.7:5000"), Some("203.0.113.7".parse().unwrap()));
        for unusable in ["", "envoy", "[2001:db8::1", "/run/envoy.sock"] {
            assert_eq!(from(unusable), None, "{unusable:?} is the unknown client");
        }
    }

    fn with_headers(map: usize, headers: usize) -> CheckRequest {
        let raw =
            (0..map).map(|i| PbHeader { key: format!("x-m-{i}"), raw_value: b"v".to_vec(), ..Default::default() });
        let http = HttpRequest {
            method: "GET".into(),
            path: "/".into(),
            host: "api.example".into(),
            header_map: Some(PbHeaderMap { headers: raw.collect() }),
            headers: (0..headers).map(|i| (format!("x-h-{i}"), "v".to_string())).collect(),
            ..Default::default()
        };
        check(http, Some("203.0.113.7"))
    }

    #[test]
    fn headers_past_the_cap_are_not_read_in_either_field() {
        assert!(describe(&with_headers(MAX_HEADERS, 0)).is_ok());
        assert!(describe(&with_headers(0, MAX_HEADERS)).is_ok());
        assert!(describe(&with_headers(MAX_HEADERS / 2, MAX_HEADERS / 2)).is_ok());
        assert_eq!(describe(&with_headers(MAX_HEADERS, 1)).unwrap_err(), Unreadable::TooManyHeaders(MAX_HEADERS + 1));
        assert_eq!(
            describe(&with_headers(0, MAX_HEADERS + 1)).unwrap_err(),
            Unreadable::TooManyHeaders(MAX_HEADERS + 1)
        );
        // Issue 52, item 6: 32,769 names once made HeaderMap::append panic.
        assert_eq!(describe(&with_headers(0, 32_769)).unwrap_err(), Unreadable::TooManyHeaders(32_769));
        assert_eq!(describe(&with_headers(32_769, 0)).unwrap_err(), Unreadable::TooManyHeaders(32_769));
    }

    /// A check of `body` whose raw headers give the partial-body marker these ways.
    fn marked(body: &str, said: &[&str]) -> Result<Option<bytes::Bytes>, Unreadable> {
        let raw = said.iter().map(|v| PbHeader {
            key: PARTIAL_BODY.into(),
            raw_value: v.as_bytes().to_vec(),
            ..Default::default()
        });
        let http = HttpRequest {
            method: "POST".into(),
            path: "/login".into(),
            header_map: Some(PbHeaderMap { headers: raw.collect() }),
            body: body.into(),
            ..Default::default()
        };
        describe(&check(http, Some("203.0.113.7"))).map(|d| d.body)
    }

    #[test]
    fn a_body_is_cut_only_when_envoys_own_marker_says_so() {
        let whole = Some(bytes::Bytes::from_static(b"{}"));
        assert_eq!(marked("{}", &[]), Ok(whole.clone()), "no marker: whole");
        assert_eq!(marked("{}", &["false"]), Ok(whole.clone()));
        assert_eq!(marked("{}", &["false", "false"]), Ok(whole));
        assert_eq!(marked("{}", &["true"]), Ok(None), "Envoy cut it: read as no body");
        assert_eq!(marked("{}", &["true", "true"]), Ok(None));
        // A client's copy beside Envoy's, or a spelling Envoy never writes: the body's state is
        // unclear, and a whole body is never taken for a cut one (which `missing: pass` skips).
        for said in [&["true", "false"][..], &["false", "true"], &["1"], &["TRUE"], &["true, false"], &[""]] {
            assert!(matches!(marked("{}", said), Err(Unreadable::Malformed(_))), "{said:?}");
        }
        // Without a body, a marker changes nothing: there is nothing to read.
        assert_eq!(marked("", &["1"]), Ok(None));
    }

    #[test]
    fn a_refusal_is_one_small_denial() {
        let huge = "é\"\\\u{1}".repeat(1 << 20);
        for why in [
            Unreadable::Untrusted,
            Unreadable::TooManyHeaders(32_769),
            Unreadable::Malformed(format!("the original method {huge:?} is not an HTTP method")),
        ] {
            let answer = refused(&why);
            assert!(
                answer.encoded_len() <= crate::server::decide::grpc::REFUSAL_MAX,
                "{} bytes for {why:?}",
                answer.encoded_len()
            );
            let Some(check_response::HttpResponse::DeniedResponse(denied)) = &answer.http_response else {
                panic!("{answer:?}")
            };
            let status = denied.status.as_ref().unwrap().code;
            let code = answer.status.as_ref().unwrap().code;
            match why {
                Unreadable::Untrusted => assert_eq!((status, code), (400, tonic::Code::PermissionDenied as i32)),
                Unreadable::TooManyHeaders(_) => assert_eq!((status, code), (431, tonic::Code::InvalidArgument as i32)),
                _ => assert_eq!((status, code), (400, tonic::Code::InvalidArgument as i32)),
            }
        }
    }
}
