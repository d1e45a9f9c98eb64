//! Any bytes as an access log (plain or gzip, any format, with field mappings): reading never
//! panics, times never run backwards, and every record replays through the shop's bounds.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use opbound::Policy;
use opbound::replay::logs::{Format, Logs, Mapping, Options};
use opbound::replay::{Lane, run};

fn spec() -> &'static Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/replay/live.yaml"))
}

fn policy() -> Policy {
    opbound::load(spec(), &opbound::Options::default()).expect("the fixture loads").policy
}

const FORMATS: [Format; 6] =
    [Format::Auto, Format::Combined, Format::NginxJson, Format::Caddy, Format::Envoy, Format::Opbound];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, log)) = data.split_first() else { return };
    let fields = [("user", "uid"), ("roles", "request.headers.X-Roles"), ("address", "x_forwarded_for")];
    let mapping = Mapping { fields: fields.iter().map(|(f, v)| (f.to_string(), v.to_string())).collect() };
    let options = Options { format: FORMATS[usize::from(selector) % FORMATS.len()], mapping, ..Options::default() };
    let Ok(logs) = Logs::from_reader(Path::new("fuzz.log"), std::io::Cursor::new(log.to_vec()), options) else {
        return;
    };
    let mut last = 0;
    let records: Vec<_> = logs
        .map_while(Result::ok)
        .inspect(|r| {
            assert!(r.time >= last, "records come in time order");
            last = r.time;
        })
        .collect();
    let mut lanes = vec![Lane::new(policy(), Default::default(), true, &[])];
    run(&mut lanes, records.into_iter().map(Ok)).expect("records in memory replay");
});
