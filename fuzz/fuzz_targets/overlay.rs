//! Any bytes as an overlay, applied to a real spec: reading and applying never panic, a valid
//! overlay either applies or says why not (located), and the document it makes is written and
//! read back as the same tree.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use opbound::spec::Source;
use opbound::spec::overlay::{Applied, Overlay};
use serde_json::Value;

fn petstore() -> &'static Value {
    static TREE: OnceLock<Value> = OnceLock::new();
    TREE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs/petstore.yaml");
        Source::read(&path).expect("the spec reads").parse().expect("the spec parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(overlay) = Overlay::read(Source::from_text(Path::new("fuzz.yaml"), text.to_string())) else { return };
    let mut tree = petstore().clone();
    match overlay.apply(&mut tree, &mut Applied::default()) {
        Ok(()) => {
            let json = Source::render(&tree, opbound::spec::Format::Json);
            let back = Source::from_text(Path::new("back.json"), json).parse().expect("written JSON reads back");
            assert_eq!(back, tree);
        }
        Err(findings) => assert!(findings.iter().all(|f| f.is_error() && f.file.is_some())),
    }
});
