//! Any bytes as an upstream's answer to `serve`: the response head and, when chunked, the body.
//! Reading them never panics, and how they arrive does not change what is read: the same bytes
//! fed in pieces (the first byte picks their size) give the same head and the same body as fed
//! whole. A connection is reused only after a head read whole and a body read to its end, so
//! a difference here would be a response misread.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use opbound::fuzzing::upstream::parse_head;
use opbound::fuzzing::wire::{Chunked, Decoded, Framing};

/// What was read: the status and framing, the body's bytes, whether it ended, what was left.
type Read = Option<(u16, Framing, bool, Vec<u8>, bool, Vec<u8>)>;

fn read(wire: &[u8], step: usize, head_request: bool) -> Read {
    let mut pieces = wire.chunks(step);
    let mut buf = BytesMut::new();
    let head = loop {
        match parse_head(&mut buf, head_request) {
            Err(_) => return None,
            Ok(Some(head)) => break head,
            Ok(None) => buf.extend_from_slice(pieces.next()?),
        }
    };
    let status = head.parts.status.as_u16();
    // Every value httparse accepted is a header value: none is lost when the list becomes a map.
    assert_eq!(head.fields.to_map().len(), head.fields.len(), "a field left out of the map");
    let mut body = Vec::new();
    let mut ended = false;
    if head.framing == Framing::Chunked {
        let mut decoder = Chunked::default();
        loop {
            match decoder.decode(&mut buf) {
                Err(_) => return None,
                Ok(Decoded::Data(d)) => {
                    assert!(!d.is_empty(), "no empty data frame");
                    body.extend_from_slice(&d);
                }
                Ok(Decoded::Trailers(_)) => {}
                Ok(Decoded::End) => {
                    ended = true;
                    break;
                }
                Ok(Decoded::More) => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => break,
                },
            }
        }
    }
    let mut rest = buf.to_vec();
    pieces.for_each(|p| rest.extend_from_slice(p));
    Some((status, head.framing, head.keep_alive, body, ended, rest))
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, wire)) = data.split_first() else { return };
    let head_request = pick & 0x80 != 0;
    let step = usize::from(pick & 0x3f) + 1;
    let whole = read(wire, wire.len().max(1), head_request);
    let pieces = read(wire, step, head_request);
    match (&whole, &pieces) {
        (Some(w), Some(p)) => assert_eq!(w, p, "fed in pieces of {step}"),
        // Fed whole, an error is found at once; in pieces, reading may stop for want of bytes
        // before it reaches the error. Never the other way round.
        (None, _) => {}
        (Some(_), None) => panic!("read whole, refused in pieces of {step}"),
    }
});
