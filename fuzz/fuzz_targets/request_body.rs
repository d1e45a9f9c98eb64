//! Any bytes as a request body that a bound is keyed on or takes its cost from: JSON (deep,
//! duplicated, malformed) and form-urlencoded. Reading it never panics, and a pointer into it
//! never finds more than the one value every upstream would read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opbound::policy::{CostFrom, JsonPointer, Per};
use opbound::request::body::Json;
use opbound::request::{Given, WithBody, key, stated_cost};

fuzz_target!(|data: &[u8]| {
    // The first line picks the pointer, the rest is the body.
    let (pointer, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"/a"[..], data),
    };
    let Ok(pointer) = JsonPointer::parse(&String::from_utf8_lossy(pointer)) else { return };
    if let Some(doc) = Json::parse(body) {
        let _ = doc.at(&pointer);
    }
    for content_type in ["application/json", "application/x-www-form-urlencoded"] {
        let head = Given {
            address: "192.0.2.9".parse().unwrap(),
            headers: vec![("content-type".into(), content_type.as_bytes().to_vec())],
            query: None,
        };
        let facts = WithBody { facts: &head, body: Some(body) };
        let _ = key(&Per::Json(pointer.clone()), &facts, None, &[]);
        let _ = key(&Per::Form("a".into()), &facts, None, &[]);
        let _ = stated_cost(&CostFrom::Json(pointer.clone()), &facts);
    }
});
