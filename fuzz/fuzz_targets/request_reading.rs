//! Any bytes as the method and target of a request, read by `decide` from a gateway's headers
//! and by `serve` from its own request line. Reading never panics; decide's reading is a fixed
//! point (what it read reads the same again); and whenever both decide and serve (from a
//! request line of the same method and target) read a request, they read the same method,
//! canonical path and query, so the same operation and bounds. A difference would be a spelling that a client could
//! use to be counted otherwise through a gateway than directly.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use opbound::router::canonical::EscapedSlashes;
use opbound::fuzzing::client::{Head, read_head};
use opbound::fuzzing::facts::{described, served};
use opbound::spec::pointer::percent_decode;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let escaped = [EscapedSlashes::Reject, EscapedSlashes::Unescape, EscapedSlashes::Keep][usize::from(pick % 3)];
    // The method up to the first space, the target after it.
    let (method, target) = match rest.iter().position(|&b| b == b' ') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b"/"[..]),
    };
    let read = described(method, target, escaped);
    if let Ok(read) = &read {
        let target_again = match &read.query {
            Some(q) => format!("{}?{q}", read.path),
            None => read.path.clone(),
        };
        assert_eq!(
            described(read.method.as_bytes(), target_again.as_bytes(), escaped).as_ref(),
            Ok(read),
            "what decide read is read the same again"
        );
    }
    // The same method and target as a request line, when they can be one.
    if target.iter().any(|&b| matches!(b, b' ' | b'\r' | b'\n')) {
        return;
    }
    let mut wire = BytesMut::new();
    wire.extend_from_slice(method);
    wire.extend_from_slice(b" ");
    wire.extend_from_slice(target);
    wire.extend_from_slice(b" HTTP/1.1\r\nhost: a\r\n\r\n");
    // serve's own reader; what it hands to hyper is unusual, and not compared.
    let Head::Request(request, _) = read_head(&mut wire) else { return };
    // Where only one of them reads the request, the other refuses it with 400: nothing is
    // counted otherwise, only not at all. (Both refuse an absolute form that names no scheme,
    // `://h/a`, or one other than http and https.)
    if let (Ok(read), Ok(own)) = (read, served(request.method(), request.uri(), escaped)) {
        let said = format!("decide read {method:?} {target:?} otherwise than serve");
        assert_eq!((&read.method, &read.path), (&own.method, &own.path), "{said}");
        // serve keeps raw UTF-8 in a query where decide percent-encodes it; bounds read query
        // parameters percent-decoded, where the two are the same (and a malformed escape is
        // malformed in both).
        let decoded = |q: &Option<String>| q.as_deref().map(percent_decode);
        assert_eq!(decoded(&read.query), decoded(&own.query), "{said}");
    }
});
