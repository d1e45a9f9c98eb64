//! Any bytes as a spec, JSON or YAML: loading returns a policy or findings, never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use opbound::spec::Source;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for name in ["spec.yaml", "spec.json"] {
        let source = Source::from_text(Path::new(name), text.to_string());
        let _ = opbound::policy::load_source(source, &opbound::Options::default());
    }
});
