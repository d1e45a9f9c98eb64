//! `opbound replay`: recorded traffic through a spec's bounds. The library's replay is checked
//! against a brute-force reference on generated traffic; the command against logs on disk.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use opbound::replay::run::Settings;
use opbound::replay::{Lane, Record, Source, run};

const SECOND: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SECOND;
/// 2026-11-30T00:00:00Z.
const START: u64 = 1_764_460_800 * SECOND;

fn policy(spec: &str) -> opbound::Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay").join(spec);
    opbound::load(&path, &opbound::Options::default()).expect("the fixture spec loads").policy
}

/// A small deterministic generator (xorshift), so the traffic is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Ten minutes of shop traffic: forty addresses, a few of them heavy, searching, ordering (as
/// one of twelve users, or signed out) and browsing items; orders take up to three seconds.
fn traffic(seed: u64) -> Vec<Record> {
    let mut rng = Rng(seed);
    let mut records = Vec::new();
    let mut t = START;
    for line in 1..=6_000u64 {
        t += rng.below(200) * 1_000_000; // up to 0.2 s apart
        // Address 1..=40, the first four ten times as busy as the rest.
        let address = if rng.below(2) == 0 { 1 + rng.below(4) } else { 1 + rng.below(40) };
        let (method, target, user, duration) = match rng.below(10) {
            0..=4 => ("GET", format!("/search?q={}", rng.below(100)), None, rng.below(50) * 1_000_000),
            5..=6 => {
                let user = (rng.below(13) > 0).then(|| format!("user{}", rng.below(12)));
                ("POST", String::from("/orders"), user, rng.below(3_000) * 1_000_000)
            }
            _ => ("get", format!("/items/{}", rng.below(1000)), None, rng.below(20) * 1_000_000),
        };
        records.push(Record {
            source: Source { file: 0, line },
            time: t,
            method: method.to_string(),
            target,
            client: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, address as u8))),
            status: Some(200),
            duration: Some(duration),
            user,
            ..Record::default()
        });
    }
    records
}

/// The reference: each bound written out plainly, every request checked against all that apply
/// and counted by all of them only if all admit.
#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    allowed: HashMap<&'static str, u64>,
    refused: HashMap<&'static str, u64>,
}

fn reference(records: &[Record], search_limit: u64) -> Counts {
    // Sliding window: (window index, previous count, current count) per key.
    let mut windows: HashMap<(&str, String), (u64, u64, u64)> = HashMap::new();
    let mut in_flight: Vec<u64> = Vec::new();
    let mut counts = Counts::default();
    let estimate = |w: &HashMap<(&str, String), (u64, u64, u64)>, key: &(&'static str, String), now: u64| {
        let index = now / MINUTE;
        let (prev, curr) = match w.get(key) {
            Some(&(i, p, c)) if i == index => (p, c),
            Some(&(i, _, c)) if i + 1 == index => (c, 0),
            _ => (0, 0),
        };
        let elapsed = now - index * MINUTE;
        // The estimate in MINUTE-ths, exact: the previous window's weight is never rounded.
        (prev * (MINUTE - elapsed) + curr * MINUTE, prev, curr, index)
    };
    for r in records {
        in_flight.retain(|&end| end > r.time);
        let address = r.client.unwrap().to_string();
        let method = r.method.to_uppercase();
        let path = r.target.split('?').next().unwrap();
        let operation = match (method.as_str(), path) {
            ("GET", "/search") => "search",
            ("POST", "/orders") => "createOrder",
            ("GET", p) if p.starts_with("/items/") => "getItem",
            _ => "none",
        };
        let mut windowed: Vec<((&'static str, String), u64)> = vec![(("perAddress", address.clone()), 30)];
        if operation == "search" {
            windowed.push((("search", address.clone()), search_limit));
        }
        if operation == "createOrder"
            && let Some(user) = &r.user
        {
            windowed.push((("perUser", user.clone()), 5));
        }
        let mut refused_by = None;
        for (key, limit) in &windowed {
            let (used, ..) = estimate(&windows, key, r.time);
            if used + MINUTE > *limit * MINUTE {
                refused_by = Some(key.0);
                break;
            }
        }
        // Declared order: the route bound, then the operation's own, inFlight before perUser,
        // so a full house refuses an order whatever perUser says.
        if operation == "createOrder" && in_flight.len() >= 3 && refused_by != Some("perAddress") {
            refused_by = Some("inFlight");
        }
        *counts.refused.entry(refused_by.unwrap_or("")).or_default() += refused_by.is_some() as u64;
        if refused_by.is_none() {
            *counts.allowed.entry(operation).or_default() += 1;
            for (key, _) in windowed {
                let (_, prev, curr, index) = estimate(&windows, &key, r.time);
                windows.insert(key, (index, prev, curr + 1));
            }
            if operation == "createOrder" {
                in_flight.push(r.time + r.duration.unwrap());
            }
        }
    }
    counts.refused.remove("");
    counts
}

fn replayed(records: &[Record], spec: &str) -> Counts {
    let mut lanes = vec![Lane::new(policy(spec), Settings::default(), false, &[])];
    run(&mut lanes, records.iter().cloned().map(Ok)).expect("replayed");
    let lane = &lanes[0];
    let policy = lane.replayer.limiter().policy().clone();
    let mut counts = Counts::default();
    for (op, tally) in policy.operations.iter().zip(&lane.tally.operations) {
        if tally.allowed > 0 {
            let name: &'static str = Box::leak(op.id.clone().into_boxed_str());
            counts.allowed.insert(name, tally.allowed);
        }
    }
    for (bound, tally) in policy.bounds.iter().zip(&lane.tally.bounds) {
        if tally.refused > 0 {
            let short = bound.id.rsplit(':').next().unwrap();
            let short = if short == "0" { "search" } else { short };
            counts.refused.insert(Box::leak(short.to_string().into_boxed_str()), tally.refused);
        }
    }
    counts
}

#[test]
fn replay_counts_equal_a_brute_force_reference() {
    for seed in [1, 7, 2026] {
        let records = traffic(seed);
        let expected = reference(&records, 10);
        // The traffic must exercise every bound, or the comparison proves little.
        for bound in ["perAddress", "search", "inFlight", "perUser"] {
            assert!(
                expected.refused.get(bound).copied().unwrap_or(0) > 0,
                "seed {seed}: {bound} never refuses: {expected:?}"
            );
        }
        assert_eq!(replayed(&records, "shop.yaml"), expected, "seed {seed}");
    }
}

#[test]
fn a_raised_limit_replays_to_the_reference_of_the_raised_limit() {
    let records = traffic(11);
    let (old, new) = (reference(&records, 10), reference(&records, 20));
    assert!(new.refused.get("search") < old.refused.get("search"), "{old:?} {new:?}");
    assert_eq!(replayed(&records, "shop-search-20.yaml"), new);
}

mod suggest {
    use super::*;
    use opbound::replay::suggest::{self, Measurements};

    fn measure(records: &[Record]) -> (opbound::Policy, Vec<suggest::Proposal>, Vec<suggest::Heavy>) {
        let policy = policy("shop.yaml");
        let mut m = Measurements::new(&policy, suggest::Settings::default());
        for r in records {
            m.insert(&policy, r);
        }
        let (proposals, heavy) = suggest::propose(&m);
        (policy, proposals, heavy)
    }

    fn request(line: u64, time: u64, method: &str, target: &str, address: u32) -> Record {
        Record {
            source: Source { file: 0, line },
            time,
            method: method.into(),
            target: target.into(),
            client: Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + address))),
            status: Some(200),
            duration: Some(5_000_000),
            ..Record::default()
        }
    }

    #[test]
    fn limits_land_at_the_chosen_percentile_of_callers_busiest_minute_times_headroom() {
        // 1,000 addresses searching; address k makes (k % 10) + 1 searches in each of its
        // minutes, evenly spread: the busiest minute's p99 is 10, so the limit is 10 × 2 = 20.
        let mut records = Vec::new();
        let mut line = 0;
        for minute in 0..3u64 {
            for k in 0..1000u32 {
                let n = u64::from(k % 10) + 1;
                for i in 0..n {
                    line += 1;
                    let at = START + minute * MINUTE + (i * 59 / n) * SECOND + u64::from(k) * 1000;
                    records.push(request(line, at, "GET", "/search?q=x", k));
                }
            }
        }
        records.sort_by_key(|r| r.time);
        let (policy, proposals, _) = measure(&records);
        let search = policy.operations.iter().position(|o| o.id == "search");
        let p = proposals.iter().find(|p| p.operation == search && p.name == "suggested-address").expect("a proposal");
        assert_eq!(p.bound["limit"], 20, "{:?}", p.bound);
        assert_eq!(p.bound["window"], "PT1M");
        assert_eq!(p.bound["per"], "address");
        // Even pacing: no burst worth a token bucket.
        assert!(p.bound.get("algorithm").is_none(), "{:?}", p.bound);
        assert_eq!((p.evidence.p50, p.evidence.p99, p.evidence.max), (5, 10, 10), "{:?}", p.evidence);
        assert!((950..=1050).contains(&p.evidence.callers), "{:?}", p.evidence);
    }

    #[test]
    fn identified_callers_get_a_row_per_role_and_per_org_and_bursts_a_token_bucket() {
        // Partners send 100 a minute in bursts of 20 in one second; trial users 10 a minute
        // spread out; anonymous addresses 3 a minute.
        let mut records = Vec::new();
        let mut line = 0;
        let mut push = |at: u64, user: Option<(&str, &str)>, address: u32| {
            line += 1;
            let mut r = request(line, at, "GET", "/items/1", address);
            if let Some((user, role)) = user {
                r.user = Some(user.to_string());
                r.roles = vec![role.to_string()];
                // Partners belong to two orgs of five.
                if let Some(n) = user.strip_prefix("partner") {
                    r.org = Some(if n.parse::<u32>().unwrap() < 5 { "acme" } else { "globex" }.to_string());
                }
            }
            records.push(r);
        };
        for minute in 0..5u64 {
            let base = START + minute * MINUTE;
            for p in 0..10u32 {
                for burst in 0..5u64 {
                    for i in 0..20u64 {
                        push(
                            base + burst * 10 * SECOND + i * 10_000_000 + u64::from(p),
                            Some((&format!("partner{p}"), "partner")),
                            p,
                        );
                    }
                }
            }
            for t in 0..50u32 {
                for i in 0..10u64 {
                    push(base + i * 6 * SECOND + u64::from(t) * 1000, Some((&format!("trial{t}"), "trial")), 100 + t);
                }
            }
            for a in 0..200u32 {
                for i in 0..3u64 {
                    push(base + i * 20 * SECOND + u64::from(a) * 1000, None, 1000 + a);
                }
            }
        }
        records.sort_by_key(|r| r.time);
        let (policy, proposals, _) = measure(&records);
        let item = policy.operations.iter().position(|o| o.id == "getItem");
        let row = |name: &str| {
            proposals
                .iter()
                .find(|p| p.operation == item && p.name == name)
                .unwrap_or_else(|| panic!("{name}: {proposals:#?}"))
        };
        let partner = row("suggested-user-partner");
        assert_eq!(partner.bound["per"], "user");
        assert_eq!(partner.bound["applies-to"]["roles"][0], "partner");
        assert_eq!(partner.bound["limit"], 200);
        assert_eq!(partner.bound["algorithm"], "token-bucket", "{:?}", partner.bound);
        assert_eq!(partner.bound["burst"], 40);
        let trial = row("suggested-user-trial");
        assert_eq!(trial.bound["limit"], 20);
        assert!(trial.bound.get("algorithm").is_none());
        // An org's minute is its five partners' together: 500, so 1,000 with headroom.
        let org = row("suggested-org");
        assert_eq!((&org.bound["per"], &org.bound["limit"]), (&"org".into(), &1000.into()), "{:?}", org.bound);
        // Ten partners, a hundred a minute, five minutes: each request counted for its org too.
        assert_eq!(org.evidence.requests, 10 * 100 * 5);
        let anonymous = row("suggested-address");
        assert_eq!(anonymous.bound["limit"], 6);
        assert_eq!(anonymous.bound["applies-to"]["authenticated"], false);
    }

    /// Issue 47: `suggest` counted callers with a credential but no user as signed in, so its
    /// `authenticated: false` address bound was sized without them while the engine counted
    /// them by it (replayed, such a proposal refused 64.5% of a log). Each proposal's
    /// distribution must hold exactly the requests its bound counts: replayed with limits
    /// nothing reaches, every proposal is checked for as many requests as it measured.
    #[test]
    fn every_proposal_measures_the_requests_its_bound_counts() {
        let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay/keys.json");
        let loaded = opbound::load(&spec, &opbound::Options::default()).unwrap();
        let mut records = Vec::new();
        let mut line = 0;
        for minute in 0..5u64 {
            for s in 0..60u64 {
                let at = START + minute * MINUTE + s * SECOND;
                let mut push = |i: u64, address: u32, user: Option<String>, token: Option<String>| {
                    line += 1;
                    let method = if i.is_multiple_of(3) { "POST" } else { "GET" };
                    let mut r = request(line, at + i * 1000, method, "/messages", address);
                    (r.user, r.token) = (user, token);
                    records.push(r);
                };
                // Thirty keys behind one shared address, a key each two seconds.
                push(s % 30, 9_999, None, s.is_multiple_of(2).then(|| format!("key{}", s % 30)));
                // Ten signed-in users with keys of their own, from their own addresses.
                push(
                    s % 10 + 100,
                    500 + (s % 10) as u32,
                    Some(format!("user{}", s % 10)),
                    Some(format!("ukey{}", s % 10)),
                );
                // Anonymous callers, one a second from sixty addresses.
                push(s + 200, 1_000 + s as u32, None, None);
            }
        }
        records.sort_by_key(|r| r.time);
        let mut m = Measurements::new(&loaded.policy, suggest::Settings::default());
        for r in &records {
            m.insert(&loaded.policy, r);
        }
        let (mut proposals, _) = suggest::propose(&m);
        assert!(proposals.iter().any(|p| p.name == "suggested-address"), "{proposals:#?}");
        assert!(proposals.iter().any(|p| p.name == "suggested-token"), "{proposals:#?}");
        for p in &mut proposals {
            p.bound["limit"] = 1_000_000.into();
            if p.bound.get("burst").is_some() {
                p.bound["burst"] = 1_000_000.into();
            }
        }
        let mut tree = loaded.source.parse().unwrap();
        assert!(suggest::annotate(&mut tree, &loaded.policy, &proposals, false).is_empty());
        let dir = std::env::temp_dir().join(format!("opbound-measured-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let annotated = dir.join("keys.json");
        std::fs::write(&annotated, serde_json::to_string(&tree).unwrap()).unwrap();
        let policy = opbound::load(&annotated, &opbound::Options::default()).expect("the proposals load").policy;
        let _ = std::fs::remove_dir_all(&dir);
        let mut lanes = vec![Lane::new(policy, Settings::default(), false, &[])];
        run(&mut lanes, records.iter().cloned().map(Ok)).expect("replayed");
        let replayed = lanes[0].replayer.limiter().policy().clone();
        for p in &proposals {
            let place = p.operation.map_or("route".to_string(), |o| loaded.policy.operations[o].id.clone());
            let id = format!("{place}:{}", p.name);
            let b = replayed.bounds.iter().position(|b| b.id == id).unwrap_or_else(|| panic!("{id}"));
            let tally = &lanes[0].tally.bounds[b];
            assert_eq!(tally.refused, 0, "{id}");
            assert_eq!(tally.checked, p.evidence.requests, "{id}: checked for, against measured: {:?}", p.bound);
        }
    }

    #[test]
    fn overlapping_requests_give_a_concurrency_bound_and_slow_operations_are_flagged() {
        let mut records = Vec::new();
        let mut line = 0;
        for i in 0..600u64 {
            line += 1;
            // An order every 100 ms lasting 450 ms: 5 in flight at each arrival once warmed.
            let mut r = request(line, START + i * 100_000_000, "POST", "/orders", (i % 50) as u32);
            r.duration = Some(450_000_000);
            records.push(r);
            line += 1;
            let mut s = request(line, START + i * 100_000_000 + 1, "GET", "/search", (i % 50) as u32);
            s.duration = Some(2_000_000);
            records.push(s);
            line += 1;
            let mut g = request(line, START + i * 100_000_000 + 2, "GET", "/items/3", (i % 50) as u32);
            g.duration = Some(3_000_000);
            records.push(g);
        }
        let (policy, proposals, heavy) = measure(&records);
        let orders = policy.operations.iter().position(|o| o.id == "createOrder");
        let c =
            proposals.iter().find(|p| p.operation == orders && p.name == "suggested-in-flight").expect("concurrency");
        assert_eq!(c.bound["algorithm"], "concurrency");
        assert_eq!(c.evidence.max, 5);
        assert_eq!(c.bound["limit"], 10);
        assert_eq!(heavy.len(), 1, "{heavy:?}");
        assert_eq!(Some(heavy[0].operation), orders);
    }
}

/// `opbound suggest -o`: the copy loads, carries the proposals where no bound was written, and
/// leaves the spec's own bounds alone unless `--replace`.
#[test]
fn suggest_writes_a_copy_that_loads_with_the_proposals_and_keeps_existing_bounds() {
    let dir = std::env::temp_dir().join(format!("opbound-suggest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay");
    let bounds_of = |policy: &opbound::Policy, op: &str| -> Vec<String> {
        let o = policy.operations.iter().find(|o| o.id == op).unwrap();
        o.bounds.iter().map(|b| policy.bounds[*b].id.clone()).collect()
    };
    for (name, replace) in [("kept.yaml", false), ("replaced.yaml", true)] {
        let out = dir.join(name);
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"));
        command.arg("suggest").arg(fixtures.join("shop.yaml")).arg(fixtures.join("shop.log"));
        command.args(["--field", "user=uid", "-o"]).arg(&out);
        if replace {
            command.arg("--replace");
        }
        let done = command.output().unwrap();
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        let policy = opbound::load(&out, &opbound::Options::default()).expect("the copy loads").policy;
        // getItem had no bound: it gets the proposals either way.
        assert_eq!(bounds_of(&policy, "getItem"), ["getItem:suggested-address", "getItem:suggested-in-flight"]);
        let search = bounds_of(&policy, "search");
        let route: Vec<&str> = policy.route_bounds.iter().map(|b| policy.bounds[*b].id.as_str()).collect();
        if replace {
            assert_eq!(search, ["search:suggested-address", "search:suggested-in-flight"]);
            assert!(route.iter().all(|id| id.starts_with("route:suggested-")), "{route:?}");
        } else {
            assert_eq!(search, ["search:0"]);
            assert_eq!(route, ["route:perAddress"]);
        }
        // The original is untouched.
        let original = opbound::load(&fixtures.join("shop.yaml"), &opbound::Options::default()).unwrap().policy;
        assert_eq!(bounds_of(&original, "getItem"), Vec::<String>::new());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 47: proposals that did not compile (there: more counters than `--max-counters`) were
/// written all the same and exited 1, which says the input spec is invalid. Now operations'
/// proposals are left out, least traffic first, until they fit; when even the route's do not,
/// nothing is written, not even the scratch copy beside it, and the exit status is its own.
#[test]
fn suggest_fits_the_counter_budget_or_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("opbound-suggest-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay/keys.json");
    let log = std::env::temp_dir().join(format!("opbound-suggest-none-{}.log", std::process::id()));
    let mut lines = String::new();
    for i in 0..600u32 {
        lines.push_str(&format!(
            "10.0.0.{} - - [30/Nov/2026:21:30:{:02} +0000] \"{} /messages HTTP/1.1\" 200 10 \"-\" \"curl/8.5.0\" rt=0.010\n",
            i % 30,
            i / 10,
            if i.is_multiple_of(4) { "POST" } else { "GET" }
        ));
    }
    std::fs::write(&log, lines).unwrap();
    let out = dir.join("proposed.json");
    // A hundred keys for each address bound (route, listMessages, sendMessage) and one counter
    // for each in-flight bound: 303 asked for, 250 allowed; sendMessage has the least traffic.
    let done = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"))
        .arg("suggest")
        .arg(&spec)
        .arg(&log)
        .args(["--max-counters", "250", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(stdout.contains("1 operation proposal left out to fit --max-counters 250"), "{stdout}");
    let options = opbound::Options { max_counters: 250, ..opbound::Options::default() };
    let policy = opbound::load(&out, &options).expect("the copy fits").policy;
    let ids: Vec<&str> = policy.bounds.iter().map(|b| b.id.as_str()).collect();
    assert!(
        ids.contains(&"listMessages:suggested-address") && !ids.contains(&"sendMessage:suggested-address"),
        "{ids:?}"
    );
    std::fs::remove_file(&out).unwrap();

    // The route's proposals alone need more counters than 50 (a hundred keys at the least).
    let done = std::process::Command::new(env!("CARGO_BIN_EXE_opbound"))
        .arg("suggest")
        .arg(&spec)
        .arg(&log)
        .args(["--max-counters", "50", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&log);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("over the budget of 50"), "{stderr}");
    assert!(stderr.contains("nothing was written"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Twilio's API under generated traffic, for `opbound suggest` at its defaults.
mod twilio {
    use super::*;
    use std::fmt::Write as _;
    use std::path::PathBuf;

    fn spec() -> Option<PathBuf> {
        let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/real/twilio-2010.json");
        if spec.is_file() {
            return Some(spec);
        }
        if std::env::var_os("OPBOUND_SKIP_SWEEP").is_some() {
            eprintln!("\n!!! SKIPPED: {} is absent and OPBOUND_SKIP_SWEEP is set\n", spec.display());
            return None;
        }
        panic!("{} is absent; OPBOUND_SKIP_SWEEP=1 skips this knowingly", spec.display());
    }

    /// `lines` lines of a combined access log for `policy`'s operations, at about 83 requests a
    /// second: three integrations sending 15%, 10% and 4% of the traffic from a few addresses
    /// each, 2,000 users (`remote_user`) with a skewed share of the rest, three in ten of them
    /// behind six shared (NAT) addresses, and 15% anonymous from 800 addresses. Popular
    /// operations are mostly reads; each account's paths carry its own AccountSid.
    pub(super) fn access_log(policy: &opbound::Policy, lines: usize) -> String {
        let mut rng = Rng(0x5eed_0f7a_1110);
        let mut operations: Vec<&opbound::policy::Operation> = policy.operations.iter().collect();
        operations.sort_by_key(|o| (o.method != "GET", o.id.clone()));
        let hex = |rng: &mut Rng| format!("{:016x}{:016x}", rng.next(), rng.next());
        let mut out = String::with_capacity(lines * 160);
        let mut t = 0u64; // milliseconds since 2026-11-30T00:00:00Z
        for _ in 0..lines {
            t += rng.below(24);
            let draw = rng.below(1000);
            let (user, address) = match draw {
                0..150 => (Some("big0".to_string()), format!("203.0.113.{}", 1 + rng.below(3))),
                150..250 => (Some("big1".to_string()), format!("203.0.113.{}", 10 + rng.below(2))),
                250..290 => (Some("big2".to_string()), String::from("203.0.113.20")),
                290..440 => {
                    let a = rng.below(800);
                    let address = if a < 80 {
                        format!("10.1.0.{}", 1 + a % 6)
                    } else {
                        format!("100.64.{}.{}", a / 200, a % 200 + 1)
                    };
                    (None, address)
                }
                _ => {
                    let u = (rng.next() % 1_000_000) as f64 / 1e6;
                    let i = (2000.0 * u * u) as u64;
                    let address = if (i * 7919) % 10 < 3 {
                        format!("10.1.0.{}", 1 + i % 6)
                    } else {
                        format!("198.51.{}.{}", i / 200, i % 200 + 1)
                    };
                    (Some(format!("u{i}")), address)
                }
            };
            let u = (rng.next() % 1_000_000) as f64 / 1e6;
            let op = operations[((operations.len() as f64) * u * u) as usize];
            let account = format!(
                "AC{:032x}",
                user.as_deref().map_or(0u128, |u| u.bytes().fold(7u128, |h, b| h * 31 + u128::from(b)))
            );
            let mut path = String::new();
            for segment in op.template.split('/').skip(1) {
                path.push('/');
                let mut rest = segment;
                while let Some(open) = rest.find('{') {
                    let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
                    path.push_str(&rest[..open]);
                    if &rest[open + 1..close] == "AccountSid" {
                        path.push_str(&account);
                    } else {
                        path.push_str(&format!("SM{}", hex(&mut rng)));
                    }
                    rest = &rest[(close + 1).min(rest.len())..];
                }
                path.push_str(rest);
            }
            let status = match op.method.as_str() {
                "POST" => 201,
                "DELETE" => 204,
                _ => 200,
            };
            let s = t / 1000;
            let _ = writeln!(
                out,
                "{address} - {} [30/Nov/2026:{:02}:{:02}:{:02} +0000] \"{} {path} HTTP/1.1\" {status} {} \"-\" \"twilio-python/9.4.1\" rt=0.{:03}",
                user.as_deref().unwrap_or("-"),
                s / 3600,
                s / 60 % 60,
                s % 60,
                op.method,
                200 + rng.below(2000),
                5 + rng.below(400)
            );
        }
        out
    }

    fn opbound(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
        let done = std::process::Command::new(env!("CARGO_BIN_EXE_opbound")).args(args).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (done.status.code(), text(&done.stdout), text(&done.stderr))
    }

    /// The first number of the line starting `prefix`, commas dropped, and the one after it.
    fn two_numbers(text: &str, prefix: &str) -> (u64, u64) {
        let line = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in {text}"));
        let numbers: Vec<u64> =
            line[prefix.len()..].split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).take(2).collect();
        (numbers[0], numbers[1])
    }

    /// Issue 47, the acceptance: at its defaults on a real spec, `suggest` wrote a spec over
    /// the counter budget (exit 1), and with identities mapped proposed bounds that refused 28%
    /// (`user=`) and 46% (`token=`) of the traffic they came from. Now the copy passes `check`,
    /// and replaying it refuses exactly what `suggest` reports, at most 1%.
    fn suggest_at_its_defaults(lines: usize) {
        let Some(spec) = spec() else { return };
        let policy = opbound::load(&spec, &opbound::Options::default()).unwrap().policy;
        let dir = std::env::temp_dir().join(format!("opbound-twilio-{lines}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("access.log");
        std::fs::write(&log, access_log(&policy, lines)).unwrap();
        for field in [None, Some("token=remote_user"), Some("user=remote_user")] {
            let out = dir.join("suggested.json");
            let mapping: Vec<&std::ffi::OsStr> = field.iter().flat_map(|f| ["--field".as_ref(), f.as_ref()]).collect();
            let mut args: Vec<&std::ffi::OsStr> = vec!["suggest".as_ref(), spec.as_os_str(), log.as_os_str()];
            args.extend(&mapping);
            args.extend(["-o".as_ref(), out.as_os_str()]);
            let (code, stdout, stderr) = opbound(&args);
            assert_eq!(code, Some(0), "{field:?}: {stderr}");
            let (reported, judged) = two_numbers(&stdout, "replayed with the proposals: ");
            assert_eq!(judged, lines as u64, "{field:?}");
            assert!(reported * 100 <= judged, "{field:?}: {reported} of {judged} refused");
            assert!(stdout.lines().nth(1).is_some_and(|l| l.contains(" within --max-refused-share 1%")), "{stdout}");

            let (code, _, stderr) = opbound(&["check".as_ref(), out.as_os_str()]);
            assert_eq!(code, Some(0), "{field:?}: {stderr}");
            let mut args: Vec<&std::ffi::OsStr> = vec!["replay".as_ref(), out.as_os_str(), log.as_os_str()];
            args.extend(&mapping);
            let (code, stdout, stderr) = opbound(&args);
            assert_eq!(code, Some(0), "{field:?}: {stderr}");
            let (refused, replayed) = two_numbers(&stdout, "refused ");
            assert_eq!((refused, replayed), (reported, judged), "{field:?}: {stdout}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Six minutes of traffic, few enough for a debug build.
    #[test]
    fn suggest_at_its_defaults_on_twilio_fits_and_refuses_what_it_reports() {
        suggest_at_its_defaults(30_000);
    }

    /// The figures: the same on 300,000 lines (an hour), several minutes in a debug build:
    /// `cargo test --test replay -- --ignored hour_of_twilio`.
    #[test]
    #[ignore = "300,000 lines: several minutes in a debug build"]
    fn suggest_at_its_defaults_on_an_hour_of_twilio() {
        suggest_at_its_defaults(300_000);
    }
}
