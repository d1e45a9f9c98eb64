//! Decisions per second through Redis, against `redis-benchmark` running EVALSHA of the same
//! script, with the same arguments, at the same concurrency, in turn, in one run.
//! `cargo bench --bench store` (needs `redis-server` and `redis-benchmark`).

use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{Killed, median};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opbound::engine::{KeyHasher, Limiter, Stage, SystemClock};
use opbound::request::Given;
use opbound::spec::Source;
use opbound::store::redis::{RedisSettings, RedisStore, Target};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: store bench, version: '1'}
x-rate-limit: {per: route, limit: 4000000000, window: PT1M}
paths: {}
"#;

const CONCURRENCY: usize = 32;
const SECONDS: u64 = 5;

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// redis-benchmark's requests per second for EVALSHA with these arguments.
fn redis_benchmark(port: u16, args: &[String]) -> f64 {
    // About as many calls as ours makes in the same time, so both run for similar spans.
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-c", &CONCURRENCY.to_string(), "-n", "300000", "--csv"])
        .args(args)
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    line.split(',')
        .nth(1)
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("redis-benchmark said: {text}"))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    for tool in ["redis-server", "redis-benchmark", "redis-cli"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("the store benchmark needs {tool} (apt-get install redis-server); skipped");
            return;
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("opbound-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _redis = Killed(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts"),
    );
    while cli(port, &["PING"]) != "PONG" {
        std::thread::sleep(Duration::from_millis(20));
    }

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let source = Source::from_text(Path::new("bench.yaml"), SPEC.to_string());
    let policy = Arc::new(opbound::policy::load_source(source, &opbound::Options::default()).unwrap().policy);
    let (store, limiter) = rt.block_on(async {
        let store = RedisStore::start(
            Target::Single(format!("redis://127.0.0.1:{port}")),
            RedisSettings { timeout: Duration::from_secs(1), ..RedisSettings::default() },
        );
        let secret = store.secret().wait_for(Option::is_some).await.unwrap().unwrap();
        (store, Arc::new(Limiter::new(policy, Arc::new(SystemClock::new()), KeyHasher::with_secret(secret))))
    });
    let facts = Given { address: "127.0.0.1".parse().unwrap(), headers: Vec::new(), query: None };
    let plan = Arc::new(limiter.plan(None, &facts, None, Stage::All));
    // One decision, to learn the key it writes; redis-benchmark then runs the very same call.
    assert!(rt.block_on(store.decide(&limiter, &plan)).allowed());
    let key = cli(port, &["KEYS", "opbound:route*"]);
    let sha = redis::Script::new(include_str!("../src/store/redis/decide.lua")).get_hash().to_string();
    let evalsha: Vec<String> =
        ["EVALSHA", &sha, "1", &key, "1", "4000000000", "60000000", "0", "1", "1", "300000000", "lease"]
            .iter()
            .map(|s| s.to_string())
            .collect();

    let ours = || -> f64 {
        rt.block_on(async {
            let done = Arc::new(AtomicU64::new(0));
            let until = Instant::now() + Duration::from_secs(SECONDS);
            let tasks: Vec<_> = (0..CONCURRENCY)
                .map(|_| {
                    let (store, limiter, plan, done) = (store.clone(), limiter.clone(), plan.clone(), done.clone());
                    tokio::spawn(async move {
                        while Instant::now() < until {
                            assert!(store.decide(&limiter, &plan).await.allowed());
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let started = Instant::now();
            for t in tasks {
                t.await.unwrap();
            }
            done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
        })
    };
    let errors_before = store.stats.errors.load(Ordering::Relaxed);
    ours(); // warm-up
    redis_benchmark(port, &evalsha);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        a.push(ours());
        b.push(redis_benchmark(port, &evalsha));
    }
    assert_eq!(store.stats.errors.load(Ordering::Relaxed), errors_before, "no store call failed");
    let (ours, theirs) = (median(a), median(b));
    println!("decisions through Redis, {CONCURRENCY} at a time, 3 interleaved rounds, medians:");
    println!("  opbound RedisStore::decide        {ours:>10.0} decisions/s");
    println!("  redis-benchmark EVALSHA (same)    {theirs:>10.0} calls/s");
    println!("  ratio                             {:.2}", ours / theirs);
    let _ = std::fs::remove_dir_all(&dir);
}
