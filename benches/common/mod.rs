//! What the load benchmarks share.
#![allow(dead_code)]

use std::process::Child;

/// The three bounds the load benchmarks count (per address, per route as a token bucket, per
/// header), one key each for their clients and never exceeded: opbound's side of nginx's three
/// `limit_req` zones.
pub const BOUNDED: &str = r#"
openapi: 3.0.3
info: {title: bench, version: '1'}
x-rate-limit:
  - {per: address, limit: 1000000000, window: PT1M}
paths:
  /items/{id}:
    get:
      operationId: getItem
      x-rate-limit:
        - {per: route, algorithm: token-bucket, limit: 1000000000, window: PT1S}
        - {per: 'header:X-Api-Key', limit: 1000000000, window: PT1M}
"#;

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A wrk duration (`512.00us`, `1.20ms`, `2.00s`, `1.00m`, `1.00h`) in milliseconds.
pub fn milliseconds(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (value, unit) = text.split_at(split);
    let value: f64 = value.parse().ok()?;
    let scale = match unit {
        "us" => 0.001,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    Some(value * scale)
}

/// The median of some measurements.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// How long and how often each target is measured.
pub struct Settings {
    pub seconds: u32,
    pub rounds: usize,
}

impl Settings {
    /// `OPBOUND_BENCH_SECONDS` (default 5) and `OPBOUND_BENCH_ROUNDS` (default 3).
    pub fn from_env() -> Settings {
        let read = |name: &str, default: u32| match std::env::var(name) {
            Ok(v) => v
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("{name}={v:?} is not a whole number above 0")),
            Err(_) => default,
        };
        Settings { seconds: read("OPBOUND_BENCH_SECONDS", 5), rounds: read("OPBOUND_BENCH_ROUNDS", 3) as usize }
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}
