//! Any bytes as a client's requests to the HTTP/1.1 reader of `serve` and `decide`
//! (`server::net::http1`), bodies read by their framing with `server::wire`'s decoder as the
//! connection reads them. Reading never panics; how the bytes arrive does not change what is read
//! (the first byte picks the size of the pieces); and every request read there is read by
//! hyper's server the same way: method, target, version, header fields and body. The reader
//! refuses more than hyper does (both `Content-Length` and `Transfer-Encoding`, codings other
//! than `chunked`), so what it reads is a prefix of what hyper reads: a request it read
//! otherwise would be one that a second reader in front of the upstream could read otherwise
//! too, a request smuggled past the bounds.
#![no_main]

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use opbound::fuzzing::client::{Head, RequestBody, read_head};
use opbound::fuzzing::wire::{Chunked, Decoded, Framing};
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

/// The requests read here from `wire` fed in pieces of `step`, until one cannot be read, the
/// connection would end, or the bytes run out.
fn ours(wire: &[u8], step: usize) -> Vec<Seen> {
    let mut pieces = wire.chunks(step);
    let mut buf = BytesMut::new();
    let mut read = Vec::new();
    loop {
        match read_head(&mut buf) {
            Head::Request(mut request, exchange) => {
                // Read as a list (but for an upgrade's, in the map): in a map, they are compared
                // with hyper's map.
                if let Some(fields) = request.body_mut().take_fields() {
                    assert!(request.headers().is_empty());
                    fields.append_to(request.headers_mut());
                    assert_eq!(request.headers().len(), fields.len(), "no field is lost on its way to a map");
                }
                let mut body = match request.body() {
                    RequestBody::Whole(whole, _) => whole.as_ref().map(|b| b.to_vec()).unwrap_or_default(),
                    _ => panic!("a request is read with its whole body or none"),
                };
                let whole = match exchange.body {
                    Framing::Empty => true,
                    Framing::Length(n) => loop {
                        if buf.len() as u64 >= n {
                            body.extend_from_slice(&buf.split_to(n as usize));
                            break true;
                        }
                        match pieces.next() {
                            Some(piece) => buf.extend_from_slice(piece),
                            None => break false,
                        }
                    },
                    Framing::Chunked => {
                        let mut decoder = Chunked::default();
                        loop {
                            match decoder.decode(&mut buf) {
                                Ok(Decoded::Data(data)) => body.extend_from_slice(&data),
                                Ok(Decoded::Trailers(_)) => {}
                                Ok(Decoded::End) => break true,
                                Ok(Decoded::More) => match pieces.next() {
                                    Some(piece) => buf.extend_from_slice(piece),
                                    None => break false,
                                },
                                Err(_) => break false,
                            }
                        }
                    }
                    Framing::UntilClose => panic!("a request is never read until the close"),
                };
                // A body cut short or broken ends the connection: the request is not whole.
                if !whole {
                    return read;
                }
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
            Head::Malformed(_) => return read,
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
