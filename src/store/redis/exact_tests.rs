//! The scripts against the engine's arithmetic on a real redis-server, on a clock the tests set:
//! each script reads Redis's `TIME` in one place, replaced here by a hash the test writes, so a
//! window's boundary is reached without waiting for it. Needs `redis-server` (.ci/test installs
//! it).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::store::RedisStore;
use super::target::{RedisSettings, Target};
use crate::engine::model_tests::Model;
use crate::engine::rate_props::{Op, Shape, agree, ops, shapes};
use crate::engine::{Decision, Finished, KeyHasher, Limiter, ManualClock, Nanos, Plan, Stage};
use crate::request::Given;

/// Where the scripts read the time from in these tests: seconds and microseconds, as `TIME` gives.
const CLOCK: &str = "opbound-test-clock";

/// A script as the store runs it, reading the test's clock instead of Redis's.
fn on_test_clock(text: &str) -> redis::Script {
    let time = "redis.call('TIME')";
    assert!(text.contains(time) || !text.contains("TIME"), "a script reads the time some other way");
    redis::Script::new(&text.replace(time, &format!("redis.call('HMGET', '{CLOCK}', 's', 'us')")))
}

/// A redis-server on a free loopback port, killed when dropped.
pub(crate) struct RedisServer {
    child: Child,
    pub(crate) url: String,
}

impl RedisServer {
    pub(crate) fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (.ci/test installs it)");
        let server = RedisServer { child, url: format!("redis://127.0.0.1:{port}") };
        let client = redis::Client::open(server.url.as_str()).expect("a redis url");
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.get_connection().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not answer on {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store on a fresh redis-server, its scripts on the test's clock, and that clock.
pub(crate) struct OnTestClock {
    pub(crate) store: Arc<RedisStore>,
    pub(crate) hasher: KeyHasher,
    pub(crate) clock: Arc<ManualClock>,
    admin: redis::aio::MultiplexedConnection,
    _server: RedisServer,
}

impl OnTestClock {
    pub(crate) async fn start() -> OnTestClock {
        let server = RedisServer::start();
        let target = Target::parse(&server.url).expect("a redis url");
        // Leases that outlive every test's clock: one that lapsed would free its permits.
        let settings = RedisSettings {
            timeout: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(100 * 86_400),
            ..RedisSettings::default()
        };
        let store = RedisStore::start_running(target, settings, on_test_clock);
        let mut secret = store.secret();
        let secret = tokio::time::timeout(Duration::from_secs(10), secret.wait_for(Option::is_some))
            .await
            .expect("the store answers")
            .expect("the store runs")
            .expect("a secret");
        let admin = redis::Client::open(server.url.as_str())
            .expect("a redis url")
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("a connection");
        let clock = Arc::new(ManualClock::default());
        OnTestClock { store, hasher: KeyHasher::with_secret(secret), clock, admin, _server: server }
    }

    /// Sets both clocks, the instance's and the scripts', to `micros`.
    pub(crate) async fn set(&mut self, micros: u64) {
        self.clock.set(Duration::from_micros(micros));
        let _: () = redis::cmd("HSET")
            .arg(CLOCK)
            .arg("s")
            .arg(micros / 1_000_000)
            .arg("us")
            .arg(micros % 1_000_000)
            .query_async(&mut self.admin)
            .await
            .expect("the clock is set");
    }

    /// A limiter on the instance's clock for a spec.
    pub(crate) fn limiter(&self, yaml: &str) -> Limiter {
        let source = crate::spec::Source::from_text(Path::new("exact.yaml"), yaml.to_string());
        let policy =
            Arc::new(crate::policy::load_source(source, &crate::Options::default()).expect("a valid spec").policy);
        Limiter::new(policy, self.clock.clone(), self.hasher.clone())
    }

    /// The plan of one request to `GET path`.
    fn plan(&self, limiter: &Limiter, path: &str, headers: &[(&str, &str)]) -> Plan {
        let given = Given {
            address: "192.0.2.1".parse().expect("an address"),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            query: None,
        };
        limiter.plan(limiter.policy().route("GET", path), &given, None, Stage::All)
    }

    /// One request to `GET path`, decided by the script: the deny cache, which would answer a
    /// refused caller from this instance until its retry, forgets it first.
    pub(crate) async fn decide(&self, limiter: &Limiter, path: &str, headers: &[(&str, &str)]) -> Decision {
        let policy = limiter.policy();
        let plan = self.plan(limiter, path, headers);
        for c in &plan.checks {
            self.store.deny.forget(policy.bounds[c.bound].fingerprint, c.key);
        }
        self.store.decide(limiter, &plan).await
    }

    /// Charges `delta` (a refund when negative) to the first bound of `GET path`, as a `settle`
    /// bound's response does: an estimate of what is refunded, corrected to what is charged.
    async fn charge(&self, limiter: &Limiter, path: &str, delta: i64) {
        let plan = self.plan(limiter, path, &[]);
        let estimate = u32::try_from(-delta.min(0)).expect("a small refund");
        let used = u64::try_from(delta.max(0)).expect("a small charge");
        let finished = Finished { counted: true, used: Some(used), cut_short: false, unreported: None };
        self.store.settle_now(limiter, &plan, 0, estimate, finished).await;
    }

    /// Takes back the request to `GET path` admitted at the clock's time under `lease`.
    async fn undo(&self, limiter: &Limiter, path: &str, cost: u32, lease: String) {
        let plan = self.plan(limiter, path, &[("x-cost", &cost.to_string())]);
        self.store.undo_now(limiter, &plan, lease, limiter.clock().now()).await;
    }

    /// The key of the first bound of `GET path`, and the members it holds (concurrency leases).
    async fn members(&mut self, limiter: &Limiter, path: &str) -> (String, Vec<String>) {
        let plan = self.plan(limiter, path, &[]);
        let key = self.store.key(limiter.policy(), &plan.checks[0]);
        let members = redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query_async(&mut self.admin).await;
        (key, members.expect("the leases"))
    }
}

/// Microseconds of a whole number of seconds from now, on a window boundary of `window` seconds:
/// expiries are set from the scripts' clock, so it stays near Redis's own.
pub(crate) fn boundary_near_now(window: u64) -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    (now / window + 1) * window * 1_000_000
}

/// Issue 63 on Redis: a bound of three per ten seconds admitted a fourth request in one second.
/// Three at 9.4 s and one at 10.3 s make the estimate 3 × 0.97 + 1 = 3.91, over 3.
#[tokio::test]
async fn three_per_ten_seconds_refuses_a_fourth_just_after_the_boundary_on_redis() {
    let mut redis = OnTestClock::start().await;
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n      x-rate-limit: \
                {per: route, limit: 3, window: PT10S}\n";
    let l = redis.limiter(spec);
    let base = boundary_near_now(10);
    redis.set(base + 9_400_000).await;
    for i in 0..3 {
        assert!(redis.decide(&l, "/x", &[]).await.allowed(), "request {i}");
    }
    let now = base + 10_300_000;
    redis.set(now).await;
    let d = redis.decide(&l, "/x", &[]).await;
    assert!(!d.allowed(), "3 × 0.97 + 1 = 3.91 > 3");
    let report = d.report.expect("a report");
    assert_eq!(report.remaining, 0);
    // Room for one once the three weigh 2: at 10 s + 10/3 s, rounded up to the microsecond.
    let retry: Nanos = (10_000_000 + 3_333_334 - 10_300_000) * 1_000;
    assert_eq!(report.retry, retry);
    assert_eq!(report.retry_after(), 4);
    redis.set(now + retry / 1_000 - 1).await;
    assert!(!redis.decide(&l, "/x", &[]).await.allowed(), "a microsecond early");
    redis.set(now + retry / 1_000).await;
    assert!(redis.decide(&l, "/x", &[]).await.allowed(), "at the instant");
}

/// A token bucket of three per ten seconds on Redis: a token is 3,333,333 1/3 us, which the
/// scripts rounded down, so requests 3,333,333 us apart all passed: four in 9.999999 s. Exactly,
/// each waits for its third of the window from the last, rounded up to the microsecond.
#[tokio::test]
async fn a_bucket_of_three_per_ten_seconds_never_admits_four_in_ten_seconds_on_redis() {
    let mut redis = OnTestClock::start().await;
    let spec = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n      x-rate-limit: \
                {per: route, algorithm: token-bucket, limit: 3, window: PT10S, burst: 1}\n";
    let l = redis.limiter(spec);
    let base = boundary_near_now(10);
    // After the second, the time is 6,666,667 1/3 us; after the third, 10,000,001 1/3.
    for (at, retry) in [
        (0, 0),
        (3_333_333, 1),
        (3_333_334, 0),
        (6_666_666, 2),
        (6_666_667, 1),
        (6_666_668, 0),
        (9_999_999, 3),
        (10_000_001, 1),
        (10_000_002, 0),
    ] {
        redis.set(base + at).await;
        let d = redis.decide(&l, "/x", &[]).await;
        assert_eq!(d.allowed(), retry == 0, "at {at} us");
        assert_eq!(d.report.expect("a report").retry, retry * 1_000, "at {at} us");
    }
}

/// The layout a token bucket's time is stored in, against the scripts before it that may share
/// the key in a rolling deploy: their whole number reads as exact; ours, read by their
/// `tonumber`, is no earlier than the exact time.
#[tokio::test]
async fn a_bucket_time_is_stored_so_old_and_new_scripts_never_read_it_in_the_callers_favour() {
    let mut redis = OnTestClock::start().await;
    let script = |body: &str| redis::Script::new(&format!("{}\n{body}", super::lua::CHARGE));
    // 10 1/3 us at a limit of 3: up to 11, short by 2 thirds.
    let written: String = script("tat_set(KEYS[1], 10, 1, 3, 0) return redis.call('GET', KEYS[1])")
        .key("b")
        .invoke_async(&mut redis.admin)
        .await
        .expect("written");
    assert_eq!(written, "11.2");
    let old: String = redis::Script::new("return tostring(tonumber(redis.call('GET', KEYS[1])))")
        .key("b")
        .invoke_async(&mut redis.admin)
        .await
        .expect("read the old way");
    assert!(old.parse::<f64>().expect("a number") >= 10.0 + 1.0 / 3.0, "{old}");
    for (stored, limit, want) in [("10", 3, (10, 0)), ("11.2", 3, (10, 1)), ("11.5", 3, (11, 0)), ("11.0", 3, (11, 0))]
    {
        let _: () = redis::cmd("SET").arg("b").arg(stored).query_async(&mut redis.admin).await.expect("set");
        let read: (i64, i64) = script("local q, f = tat_get(KEYS[1], tonumber(ARGV[1])) return {q, f}")
            .key("b")
            .arg(limit)
            .invoke_async(&mut redis.admin)
            .await
            .expect("read");
        assert_eq!(read, want, "{stored} at a limit of {limit}");
    }
}

/// The spec of one bound of a shape, its cost stated by the request (`x-cost`).
fn spec_of(shape: &Shape) -> String {
    let (limit, s, ms) = (shape.limit, shape.window_ms / 1000, shape.window_ms % 1000);
    let bound = match shape.algorithm {
        0 => format!("{{per: route, limit: {limit}, window: PT{s}.{ms:03}S"),
        1 => format!(
            "{{per: route, algorithm: token-bucket, limit: {limit}, window: PT{s}.{ms:03}S, burst: {}",
            shape.burst
        ),
        2 => format!("{{per: route, algorithm: concurrency, limit: {limit}"),
        _ => format!("{{per: route, algorithm: quota, limit: {limit}, period: P1D"),
    };
    let most = if shape.algorithm == 1 { shape.burst } else { limit };
    format!(
        "openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\npaths:\n  /x:\n    get:\n      x-rate-limit: \
         {bound}, cost-from: 'header:x-cost', max-cost: {most}}}\n"
    )
}

/// A shape the store takes: windows of one second to a day, a quota's period a day, at most a
/// thousand permits. A token bucket's limit need not divide its window: the scripts keep its
/// time exactly, as the engine does.
fn on_redis(mut shape: Shape) -> Shape {
    shape.window_ms = if shape.algorithm == 3 { 86_400_000 } else { shape.window_ms.clamp(1_000, 86_400_000) };
    // A lease is a member per permit: a cost of millions is a script of millions of ZADDs.
    if shape.algorithm == 2 {
        shape.limit = shape.limit.min(1_000);
    }
    shape
}

/// Runs one caller's ops through the scripts and the model, in microseconds: requests, clock
/// steps, charges and refunds (`settle.lua`, as a `settle` bound's response makes them), the
/// end of a concurrency request (its leases released), and a request taken back (`undo.lua`).
async fn run_on_redis(redis: &mut OnTestClock, shape: Shape, ops: &[Op]) -> Result<(), TestCaseError> {
    const UNIT: u64 = 1_000_000;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut redis.admin).await.expect("flushed");
    let l = redis.limiter(&spec_of(&shape));
    let mut model = shape.model(UNIT);
    let capacity = if shape.algorithm == 1 { shape.burst } else { shape.limit };
    let mut now = boundary_near_now(86_400) + shape.window(UNIT) / 3;
    let mut aim = None;
    // Kept to the end: a concurrency decision's permits go back to the store when dropped.
    let mut held = Vec::new();
    // The concurrency requests in flight, oldest first: their cost and their leases.
    let mut in_flight = std::collections::VecDeque::new();
    // The request the last op admitted, which an undo takes back: the model before it, its
    // cost and its lease.
    let mut last = None;
    for (step, op) in ops.iter().enumerate() {
        let undone = last.take();
        match *op {
            Op::Wait(t) => now += shape.step(UNIT, t),
            Op::ToRetry(early) => {
                if let Some(at) = aim {
                    now = now.max(at - early);
                }
            }
            Op::Request(cost) => {
                let cost = cost.min(capacity);
                redis.set(now).await;
                let leases = if shape.algorithm == 2 { redis.members(&l, "/x").await.1 } else { Vec::new() };
                let d = redis.decide(&l, "/x", &[("x-cost", &cost.to_string())]).await;
                let Some(r) = d.report else { panic!("step {step}: no report, {:?}", d.outcome) };
                let before = model.clone();
                let want = model.decide(now, cost);
                let got = (d.allowed(), u64::from(r.remaining), r.reset / 1_000, r.retry / 1_000);
                prop_assert_eq!(r.reset % 1_000, 0);
                aim = agree(&shape, got, want, now, step)?.or(aim);
                let mut lease = String::new();
                if shape.algorithm == 2 && d.allowed() {
                    let (key, after) = redis.members(&l, "/x").await;
                    let taken: Vec<String> = after.into_iter().filter(|m| !leases.contains(m)).collect();
                    prop_assert_eq!(taken.len(), cost as usize, "step {}: a lease per permit", step);
                    // Members are `lease:n`.
                    lease = taken[0].rsplit_once(':').map(|(lease, _)| lease.to_string()).unwrap_or_default();
                    in_flight.push_back((cost, key, taken));
                }
                if d.allowed() {
                    last = Some((before, cost, lease));
                }
                held.push(d);
            }
            Op::Charge(delta) if shape.algorithm != 2 => {
                redis.set(now).await;
                redis.charge(&l, "/x", delta).await;
                model.charge(now, delta);
            }
            // The oldest request in flight ends: what the store releases is its own leases.
            Op::Release(_) if shape.algorithm == 2 => {
                if let Some((cost, key, members)) = in_flight.pop_front() {
                    redis.store.release_now(&key, members).await;
                    model.release(cost);
                }
            }
            // Right after its decision, at the same time, as a refusal by another slot is.
            Op::Undo => {
                if let Some((before, cost, lease)) = undone {
                    redis.undo(&l, "/x", cost, lease).await;
                    model = Model::taken_back(before, now);
                    if shape.algorithm == 2 {
                        in_flight.pop_back();
                    }
                }
            }
            Op::Charge(_) | Op::Release(_) => {}
        }
    }
    Ok(())
}

/// Every algorithm's script decides as the exact model, in microseconds, over random traffic.
#[test]
fn the_scripts_decide_as_the_exact_model() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
    let redis = std::cell::RefCell::new(rt.block_on(OnTestClock::start()));
    // A round trip a request: 192 cases of up to 80 take a second or two.
    let mut runner = TestRunner::new(ProptestConfig { cases: 192, ..ProptestConfig::default() });
    let cases = shapes().prop_map(on_redis).prop_flat_map(|s| (Just(s), ops(s.limit)));
    let result = runner.run(&cases, |(shape, ops)| rt.block_on(run_on_redis(&mut redis.borrow_mut(), shape, &ops)));
    if let Err(e) = result {
        panic!("{e}");
    }
}
