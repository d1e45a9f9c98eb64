//! Any bytes as an access log (plain or gzip, any format, with field mappings): reading never
//! panics, times never run backwards, and every record replays through the shop's bounds.
#![no_main]

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use opbound::Policy;
use opbound::replay::Lane;
use opbound::replay::logs::{Format, Logs, Mapping, Options};

/// One lane for the whole run (loading the spec per input would be most of the work): its
/// counters carry over from input to input, and its clock only moves forward, as in a replay.
fn lane() -> &'static Mutex<(tokio::runtime::Runtime, Lane)> {
    static LANE: OnceLock<Mutex<(tokio::runtime::Runtime, Lane)>> = OnceLock::new();
    LANE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/replay/live.yaml");
        let policy: Policy = opbound::load(&path, &opbound::Options::default()).expect("the fixture loads").policy;
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        Mutex::new((runtime, Lane::new(policy, Default::default(), true, &[])))
    })
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
    let mut guard = lane().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (runtime, lane) = &mut *guard;
    runtime.block_on(async {
        for record in &records {
            lane.feed(record).await;
        }
    });
});
