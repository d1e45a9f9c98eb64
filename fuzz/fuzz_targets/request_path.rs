//! Any request target against a policy with every routing hazard: canonicalization and routing
//! never panic, and the canonical form is a fixed point that routes the same way.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use opbound::Policy;
use opbound::router::canonical::{EscapedSlashes, canonical_path};

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/routing/hazards.yaml");
        opbound::load(&path, &opbound::Options::default()).expect("the fixture loads").policy
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(target) = std::str::from_utf8(data) else { return };
    let Ok(canonical) = canonical_path(target, EscapedSlashes::Keep) else { return };
    let again = canonical_path(&canonical, EscapedSlashes::Keep).expect("a canonical path is valid");
    assert_eq!(again, canonical, "canonicalization is idempotent");
    for method in ["GET", "HEAD", "POST", "QUERY"] {
        let _ = policy().route(method, &canonical);
    }
});
