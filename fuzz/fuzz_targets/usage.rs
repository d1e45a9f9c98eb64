//! Any bytes as a response body read for its usage, as JSON and as an event stream, split at
//! any points: reading never panics, what is found does not depend on where the body was
//! split, and for a body that is JSON the scan finds what `serde_json` finds at each pointer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use bytes::Bytes;
use opbound::engine::usage::ask::{Unasked, ask};
use opbound::fuzzing::usage::{Events, Pointers, Scan};

const POINTERS: [&str; 6] = ["/usage/total_tokens", "/a", "/a/0", "/a/b~1c", "/x/1/y", "/message/usage/input_tokens"];

fn pieces(data: &[u8], cut: u8) -> Vec<&[u8]> {
    let size = usize::from(cut % 17) + 1;
    data.chunks(size).collect()
}

fuzz_target!(|input: (u8, &[u8])| {
    let (cut, data) = input;
    let pointers = Pointers::new(POINTERS);

    let mut whole = Scan::new(pointers.clone());
    whole.feed(data);
    whole.finish();
    let mut split = Scan::new(pointers.clone());
    for piece in pieces(data, cut) {
        split.feed(piece);
    }
    split.finish();
    assert_eq!(whole.found(), split.found(), "the JSON scan depends on the split");
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        if value.is_object() || value.is_array() {
            let want: Vec<Option<u64>> =
                POINTERS.iter().map(|p| value.pointer(p).and_then(serde_json::Value::as_u64)).collect();
            // Duplicate keys: serde_json keeps the last, and so does the scan.
            assert_eq!(whole.found(), &want[..], "{}", String::from_utf8_lossy(data));
        }
    }

    let mut whole = Events::new(pointers.clone(), 256);
    whole.feed(data);
    let mut split = Events::new(pointers, 256);
    for piece in pieces(data, cut) {
        split.feed(piece);
    }
    assert_eq!(whole.found(), split.found(), "the event reader depends on the split");

    // What asking for usage adds, taken out again: the same whatever the split, and a stream
    // without `usage` passes byte for byte.
    let filtered = |pieces: Vec<&[u8]>| {
        let mut filter = Unasked::default();
        let mut out = Vec::new();
        for piece in pieces {
            out.extend_from_slice(&filter.filter(&Bytes::copy_from_slice(piece)));
        }
        out.extend_from_slice(&filter.finish());
        out
    };
    let once = filtered(vec![data]);
    assert_eq!(once, filtered(pieces(data, cut)), "the filter depends on the split");
    if !data.contains(&b'\\') && !data.windows(7).any(|w| w == b"\"usage\"") {
        assert_eq!(once, data, "nothing to take out");
    }
    // A request body asked for usage stays JSON with every other member.
    if let Some(asked) = ask(data) {
        let value: serde_json::Value = serde_json::from_slice(&asked).expect("asked is JSON");
        assert_eq!(value["stream_options"]["include_usage"], true);
    }
});
