//! The engine's hot path. `cargo bench --bench engine`.
//!
//! - `request`: canonical path, route, plan and decide for a request with three bounds.
//! - `keyed`: one bound over 10,000 callers, ours against governor's keyed `check_key` (a
//!   DashMap of GCRA cells) in the same group. Both walk 17-byte addresses laid out alike (ours
//!   wrapped as the request's facts) and hash each with SipHash-1-3 once. (Ours used to walk a
//!   `Vec<Given>` six times the size, whose stream evicted the table from the cache, and then
//!   built a `Given` on the stack per call, whose fresh stores the CPU could not forward to the
//!   address's read: two unfairnesses against ours that no real request has, since its facts
//!   are hot and settled.) Ours still does more than governor's: it works out `remaining` and
//!   `reset` for the headers, which `check_key` does not.
//! - `flood`: a new caller arriving at a full table (the path an address flood takes).
//! - `count-when`: a decision on a `count-when` bound, reserve then settle by status, against
//!   a plain sliding-window bound.
//! - `contended`: the proxy bench's three bounds (per address, per route as a token bucket, per
//!   header), one key each, decided alone and while another thread decides the same keys
//!   without pause: what two workers sharing every counter cost a decision.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group};

mod common;
use common::BOUNDED;
use governor::{Quota, RateLimiter};
use opbound::engine::{Counter, KeyHasher, KeyTable, Limiter, ManualClock, Plan, Rate, Stage, SystemClock};
use opbound::request::{Facts, Given, Identity};
use opbound::router::canonical::{EscapedSlashes, canonical_path};
use opbound::spec::Source;

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: bench, version: '1'}
servers: [{url: /v2}]
x-rate-limit-policies:
  writes: {per: user, limit: 1000000, window: PT1M}
x-rate-limit:
  - {name: perimeter, per: address, limit: 1000000, window: PT1M}
paths:
  /projects/{projectId}/items/{itemId}:
    get: {operationId: getItem}
    patch:
      operationId: updateItem
      x-rate-limit:
        - {per: user, algorithm: token-bucket, limit: 1000000, window: PT1S}
        - {use: writes}
  /projects/{projectId}: {get: {operationId: getProject}}
  /health: {get: {operationId: health}}
"#;

fn limiter(spec: &str) -> Limiter {
    let source = Source::from_text(Path::new("bench.yaml"), spec.to_string());
    let policy = Arc::new(opbound::policy::load_source(source, &opbound::Options::default()).unwrap().policy);
    Limiter::new(policy, Arc::new(SystemClock::new()), KeyHasher::random())
}

fn address(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn bench_request(c: &mut Criterion) {
    let l = limiter(SPEC);
    let identities: Vec<Identity> =
        (0..1000).map(|i| Identity { user: Some(format!("user-{i}")), org: None, roles: Vec::new() }).collect();
    let requests: Vec<Given> =
        (0..1000).map(|i| Given { address: address(i), headers: Vec::new(), query: None }).collect();
    let mut i = 0usize;
    // Plans are filled in place, as the server fills its last stage's (`plan_into`).
    let mut plan = Plan::default();
    c.bench_function("request/route + 3 bounds", |b| {
        b.iter(|| {
            i = (i + 1) % 1000;
            let path = canonical_path(black_box("/v2/projects/p-1/items/i-7"), EscapedSlashes::Reject).unwrap();
            let op = l.policy().route("PATCH", &path);
            l.plan_into(&mut plan, op, &requests[i], Some(&identities[i]), Stage::All);
            let d = l.decide(&plan);
            assert!(d.allowed());
            d
        })
    });
}

/// A request's facts that are only its address: 17 bytes, as governor's keys are.
struct Caller(IpAddr);

impl Facts for Caller {
    fn address(&self) -> IpAddr {
        self.0
    }

    fn headers(&self, _: &str) -> impl Iterator<Item = &[u8]> {
        std::iter::empty()
    }

    fn query_string(&self) -> Option<&str> {
        None
    }
}

fn bench_keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed");
    const KEYS: u32 = 10_000;
    // Ours: one sliding-window bound keyed per address, through plan and decide.
    let l = limiter(
        "openapi: 3.0.3\ninfo: {title: b, version: '1'}\nx-rate-limit: {per: address, limit: 1000000, window: PT1M}\npaths: {}\n",
    );
    let addresses: Vec<IpAddr> = (0..KEYS).map(address).collect();
    let callers: Vec<Caller> = addresses.iter().map(|&a| Caller(a)).collect();
    let mut i = 0usize;
    let mut plan = Plan::default();
    group.bench_function("opbound sliding window (plan + decide)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            l.plan_into(&mut plan, None, &callers[i], None, Stage::All);
            l.decide(&plan).allowed()
        })
    });

    group.bench_function("opbound plan only", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            l.plan_into(&mut plan, None, &callers[i], None, Stage::All);
            plan.checks.len()
        })
    });
    let plans: Vec<_> = callers.iter().map(|r| l.plan(None, r, None, Stage::All)).collect();
    group.bench_function("opbound decide only", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            l.decide(&plans[i]).allowed()
        })
    });

    // Ours, the table alone: hash, lock, evaluate, commit.
    let hasher = KeyHasher::random();
    let clock = SystemClock::new();
    let table = KeyTable::new(Rate::SlidingWindow { limit: 1_000_000, window: 60_000_000_000 }, KEYS);
    group.bench_function("opbound sliding window (table)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            let key = hasher.hash_address(addresses[i]);
            let now = opbound::engine::Clock::now(&clock);
            let mut locked = table.lock(key, now);
            let v = table.rate.evaluate(locked.counter, now, 1);
            if v.admitted {
                locked.commit(v.next);
            }
            v.admitted
        })
    });

    let bucket = KeyTable::new(Rate::TokenBucket { limit: 1_000_000, window: 60_000_000_000, burst: 1_000_000 }, KEYS);
    group.bench_function("opbound token bucket (table)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            let key = hasher.hash_address(addresses[i]);
            let now = opbound::engine::Clock::now(&clock);
            let mut locked = bucket.lock(key, now);
            let v = bucket.rate.evaluate(locked.counter, now, 1);
            if v.admitted {
                locked.commit(v.next);
            }
            v.admitted
        })
    });

    // governor: keyed GCRA over a DashMap.
    let governor = RateLimiter::keyed(Quota::per_minute(NonZeroU32::new(1_000_000).unwrap()));
    group.bench_function("governor keyed check_key", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            governor.check_key(&addresses[i]).is_ok()
        })
    });
    group.finish();
}

fn bench_flood(c: &mut Criterion) {
    let mut group = c.benchmark_group("flood");
    // A full table whose keys are all live: every new caller goes to the overflow counter.
    let clock = ManualClock::starting_at(Duration::from_secs(1_000_000));
    let rate = Rate::SlidingWindow { limit: 100, window: 60_000_000_000 };
    let table = KeyTable::new(rate, 10_000);
    let hasher = KeyHasher::random();
    let now = opbound::engine::Clock::now(&clock);
    for i in 0..20_000u32 {
        let mut l = table.lock(hasher.hash(&i.to_le_bytes()), now);
        let v = rate.evaluate(l.counter, now, 1);
        l.commit(v.next);
    }
    assert_eq!(table.tracked(), 10_000);
    let mut n = 1_000_000u32;
    group.bench_function("new caller at a full table", |b| {
        b.iter(|| {
            n = n.wrapping_add(1);
            let mut l = table.lock(hasher.hash(&n.to_le_bytes()), now);
            let v = rate.evaluate(l.counter, now, 1);
            if v.admitted {
                l.commit(v.next);
            }
            black_box(v.admitted)
        })
    });
    group.finish();
    let _ = Counter::default();
}

/// A quota against a sliding window, both through plan and decide over 10,000 callers: a
/// quota's period comes from the table's kept calendar window, so it should cost about the same.
/// And the write behind: one sync of 10,000 changed quota counters to the state file.
fn bench_quota(c: &mut Criterion) {
    let mut group = c.benchmark_group("quota");
    const KEYS: u32 = 10_000;
    let one = |bound: &str| {
        limiter(&format!("openapi: 3.0.3\ninfo: {{title: b, version: '1'}}\nx-rate-limit: {bound}\npaths: {{}}\n"))
    };
    let requests: Vec<Given> =
        (0..KEYS).map(|i| Given { address: address(i), headers: Vec::new(), query: None }).collect();
    let cases = [
        ("sliding window (plan + decide)", "{per: address, limit: 1000000000, window: PT1M}"),
        (
            "calendar quota (plan + decide)",
            "{algorithm: quota, per: address, limit: 1000000000, period: P1M, timezone: Europe/Berlin}",
        ),
        (
            "first-use quota (plan + decide)",
            "{algorithm: quota, per: address, limit: 1000000000, period: P1M, reset: first-use}",
        ),
    ];
    for (name, bound) in cases {
        let l = one(bound);
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS as usize;
                l.decide(&l.plan(None, &requests[i], None, Stage::All)).allowed()
            })
        });
    }

    let dir = std::env::temp_dir().join(format!("opbound-bench-state-{}", std::process::id()));
    let state = opbound::store::durable::StateStore::open(&dir, true).unwrap();
    let l = one("{algorithm: quota, per: address, limit: 1000000000, period: P1M}");
    group.sample_size(10);
    group.bench_function("write behind: sync 10,000 changed counters", |b| {
        b.iter_batched(
            || {
                for r in &requests {
                    l.decide(&l.plan(None, r, None, Stage::All));
                }
            },
            |()| {
                opbound::store::durable::journal::sync(&state, &l, opbound::engine::Clock::now(&SystemClock::new()))
                    .unwrap()
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
    drop(state);
    let _ = std::fs::remove_dir_all(&dir);
}

fn bench_count_when(c: &mut Criterion) {
    let mut group = c.benchmark_group("count-when");
    const KEYS: u32 = 10_000;
    let one = |bound: &str| {
        limiter(&format!("openapi: 3.0.3\ninfo: {{title: b, version: '1'}}\nx-rate-limit: {bound}\npaths: {{}}\n"))
    };
    let requests: Vec<Given> =
        (0..KEYS).map(|i| Given { address: address(i), headers: Vec::new(), query: None }).collect();
    let plain = one("{per: address, limit: 1000000000, window: PT1M}");
    let mut i = 0usize;
    group.bench_function("sliding window (plan + decide)", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS as usize;
            plain.decide(&plain.plan(None, &requests[i], None, Stage::All)).allowed()
        })
    });
    let counted = one("{per: address, limit: 1000000000, window: PT1M, count-when: [401, 403]}");
    for (name, status) in [("reserve + settle, released (200)", 200), ("reserve + settle, committed (401)", 401)] {
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS as usize;
                let mut d = counted.decide(&counted.plan(None, &requests[i], None, Stage::All));
                std::mem::take(&mut d.reservations).settle(black_box(status), |_| None, false);
                d.allowed()
            })
        });
    }
    group.finish();
}

/// Ours against governor's `check_key` in alternating batches, the ratio worked out batch by
/// batch: on a shared VM a criterion group measures its functions minutes apart, and the load
/// around them moves each by more than the difference between them. Each round times a batch of
/// each (the order swapped every round), and the median of the rounds' ratios is printed, with
/// the medians of each side's nanoseconds a call.
fn paired_with_governor() {
    const KEYS: u32 = 10_000;
    const BATCH: u32 = 200_000;
    const ROUNDS: usize = 31;
    let l = limiter(
        "openapi: 3.0.3\ninfo: {title: b, version: '1'}\nx-rate-limit: {per: address, limit: 1000000000, window: PT1M}\npaths: {}\n",
    );
    let addresses: Vec<IpAddr> = (0..KEYS).map(address).collect();
    let callers: Vec<Caller> = addresses.iter().map(|&a| Caller(a)).collect();
    let governor = RateLimiter::keyed(Quota::per_minute(NonZeroU32::new(1_000_000_000).unwrap()));
    let plan = std::cell::RefCell::new(Plan::default());
    // Each side one call out of line, as a server's request handler calls it: inlined into this
    // function, how much of either LLVM inlined (and so what a change cost) moved with unrelated
    // edits to the engine.
    #[inline(never)]
    fn ours_once(l: &Limiter, plan: &mut Plan, caller: &Caller) -> bool {
        l.plan_into(plan, None, caller, None, Stage::All);
        l.decide(plan).allowed()
    }
    #[inline(never)]
    fn theirs_once(g: &governor::DefaultKeyedRateLimiter<IpAddr>, address: &IpAddr) -> bool {
        g.check_key(address).is_ok()
    }
    let ours = |i: usize| ours_once(&l, &mut plan.borrow_mut(), &callers[i]);
    let theirs = |i: usize| theirs_once(&governor, &addresses[i]);
    let time = |f: &dyn Fn(usize) -> bool| {
        let start = std::time::Instant::now();
        for n in 0..BATCH {
            assert!(f(black_box((n % KEYS) as usize)));
        }
        start.elapsed().as_nanos() as f64 / f64::from(BATCH)
    };
    // Every key seen once by both before anything is timed.
    time(&ours);
    time(&theirs);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (x, y) = if round % 2 == 0 {
            let x = time(&ours);
            (x, time(&theirs))
        } else {
            let y = time(&theirs);
            (time(&ours), y)
        };
        a.push(x);
        b.push(y);
        ratios.push(x / y);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (q1, q3) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 4], r[r.len() * 3 / 4])
    };
    println!(
        "keyed/paired: one sliding-window bound, plan + decide, against governor's check_key, {ROUNDS} alternating \
         rounds of {BATCH} calls over {KEYS} callers: ours {:.1} ns, governor {:.1} ns (medians); ratio {:.2} \
         (median of the rounds' ratios; middle half {q1:.2}..{q3:.2})",
        median(&mut a),
        median(&mut b),
        median(&mut ratios),
    );
}

/// A request's facts with one address and one `X-Api-Key`.
struct Keyed;

impl Facts for Keyed {
    fn address(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    fn headers(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        (name == "x-api-key").then_some(&b"bench"[..]).into_iter()
    }

    fn query_string(&self) -> Option<&str> {
        None
    }
}

fn bench_contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    let l = Arc::new(limiter(BOUNDED));
    let op = l.policy().route("GET", "/items/7");
    let mut plan = Plan::default();
    l.plan_into(&mut plan, op, &Keyed, None, Stage::All);
    assert_eq!(plan.checks.len(), 3, "three bounds");
    group.bench_function("3 bounds, one key each, alone", |b| b.iter(|| l.decide(&plan).allowed()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (l, stop, plan) = (l.clone(), stop.clone(), plan.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                black_box(l.decide(&plan).allowed());
            }
        })
    };
    group.bench_function("3 bounds, one key each, another thread on the same keys", |b| {
        b.iter(|| l.decide(&plan).allowed())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    other.join().unwrap();
}

criterion_group!(benches, bench_request, bench_keyed, bench_flood, bench_quota, bench_count_when, bench_contended);

fn main() {
    benches();
    // Only `cargo bench` measures (`cargo test --all-targets` runs this without `--bench`), and
    // only when no filter is given or the filter names it.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filter = args.iter().find(|a| !a.starts_with('-') && a.parse::<f64>().is_err());
    if args.iter().any(|a| a == "--bench") && filter.is_none_or(|f| "keyed/paired".contains(f.as_str())) {
        paired_with_governor();
    }
    Criterion::default().configure_from_args().final_summary();
}
