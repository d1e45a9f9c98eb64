//! Any bytes as a client's requests to the HTTP/1.1 reader of `serve` and `decide`
//! (`server::net::http1`). Reading never panics; how the bytes arrive does not change what is read
//! (the first byte picks the size of the pieces); and every request read there is read by
//! hyper's server the same way: method, target, version, header fields and body. What the reader
//! does not take is hyper's, so a request it read otherwise than hyper would be one that its
//! rules for the unusual let through: a request smuggled past hyper's checks.
#![no_main]

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use opbound::server::net::http1::{Head, RequestBody, read_head};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request as a server read it.
#[derive(Debug, PartialEq)]
struct Seen {
    method: String,
    target: String,
    version: http::Version,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

fn seen<B>(request: &http::Request<B>, body: Vec<u8>) -> Seen {
    Seen {
        method: request.method().to_string(),
        target: request.uri().to_string(),
        version: request.version(),
        headers: request.headers().iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
        body,
    }
}

/// The requests read here from `wire` fed in pieces of `step`, until one is hyper's or the bytes
/// run out.
fn ours(wire: &[u8], step: usize) -> Vec<Seen> {
    let mut pieces = wire.chunks(step);
    let mut buf = BytesMut::new();
    let mut read = Vec::new();
    loop {
        match read_head(&mut buf) {
            Head::Request(mut request, exchange) => {
                // Read as a list: in a map, they are compared with hyper's map.
                let fields = request.body_mut().take_fields().expect("a request read here has its fields as a list");
                assert!(request.headers().is_empty());
                fields.append_to(request.headers_mut());
                assert_eq!(request.headers().len(), fields.len(), "no field is lost on its way to a map");
                let body = match request.body() {
                    RequestBody::Whole(whole, _) => whole.as_ref().map(|b| b.to_vec()).unwrap_or_default(),
                    RequestBody::Hyper(_) => panic!("a request read here has its body whole"),
                };
                read.push(seen(&request, body));
                // The connection ends with this one's response: what follows is never read.
                if !exchange.keep_alive {
                    return read;
                }
            }
            Head::Partial => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return read,
            },
            Head::Hyper => return read,
        }
    }
}

/// The requests hyper's server reads from `wire`.
fn hyper_s(wire: &[u8]) -> Vec<Seen> {
    // The clock paused: once hyper waits for bytes that will not come, the timeout below ends
    // the exchange at once. (A shut-down write side would not do: hyper drops a request whose
    // client has gone, as opbound's reader does.)
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    let read = Arc::new(Mutex::new(Vec::new()));
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let service = hyper::service::service_fn({
            let read = read.clone();
            move |request: http::Request<hyper::body::Incoming>| {
                let read = read.clone();
                async move {
                    let (parts, body) = request.into_parts();
                    let body = body.collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                    read.lock().unwrap().push(seen(&http::Request::from_parts(parts, ()), body));
                    Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
                }
            }
        });
        let connection =
            hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let talk = async {
            let _ = client.write_all(wire).await;
            let mut answers = Vec::new();
            let _ = client.read_to_end(&mut answers).await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async { tokio::join!(connection, talk) }).await;
    });
    std::mem::take(&mut *read.lock().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, wire)) = data.split_first() else { return };
    let step = usize::from(pick & 0x3f) + 1;
    let whole = ours(wire, wire.len().max(1));
    assert_eq!(ours(wire, step), whole, "fed in pieces of {step}");
    if whole.is_empty() {
        return;
    }
    let theirs = hyper_s(wire);
    assert!(theirs.len() >= whole.len(), "hyper read fewer requests: {theirs:?}, here: {whole:?}");
    assert_eq!(theirs[..whole.len()], whole[..], "read otherwise than hyper");
});
