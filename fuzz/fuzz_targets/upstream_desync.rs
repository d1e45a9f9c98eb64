//! The upstream pool driven by a scripted upstream: answers, stray bytes after framed bodies, on
//! `HEAD`/`204`/`304`, before requests, late, interim floods and closes, in any order and split
//! anywhere. Panics when a request is given bytes that were not written in answer to it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    opbound::fuzzing::upstream::desync::run(data);
});
