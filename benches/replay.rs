//! Replay throughput and memory: `opbound replay` and `opbound suggest` (release builds) over a
//! generated nginx `combined` log of `OPBOUND_REPLAY_MB` megabytes (default 1024), against one a
//! tenth of its size, to show memory stays flat as the log grows; and `suggest` over logs of
//! 10,000 and 1,000,000 distinct callers, to show its memory does not follow the callers.
//!
//! Run: `cargo bench --bench replay` (logs are generated once under target/replay-bench/).
//! Prints lines per second and peak resident memory (VmHWM, polled from /proc) per run.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/replay/shop.yaml");

/// A log of about `mb` megabytes from `callers` addresses, a day starting 2026-11-30, in time
/// order. Returns its path and line count.
fn generate(mb: u64, callers: u32) -> (PathBuf, u64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/replay-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let path = dir.join(format!("access-{mb}mb-{callers}.log"));
    let lines_path = path.with_extension("lines");
    if let (true, Ok(n)) = (path.exists(), std::fs::read_to_string(&lines_path)) {
        return (path, n.trim().parse().expect("line count"));
    }
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).expect("log file"));
    let target = mb * 1024 * 1024;
    let (mut written, mut lines, mut state) = (0u64, 0u64, 0x2545_F491_4F6C_DD1Du64);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let day = 86_400u64;
    let expected_lines = target / 150;
    while written < target {
        let second = lines * day / expected_lines.max(1);
        let (h, m, s) = (second / 3600 % 24, second / 60 % 60, second % 60);
        let r = next();
        let caller = (r % u64::from(callers)) as u32;
        let address = format!("10.{}.{}.{}", caller >> 16 & 255, caller >> 8 & 255, caller & 255);
        let request = match r >> 32 & 7 {
            0..=3 => format!("GET /search?q={} HTTP/1.1", r >> 40 & 1023),
            4 => "POST /orders HTTP/1.1".to_string(),
            _ => format!("GET /items/{} HTTP/1.1", r >> 40 & 4095),
        };
        let line = format!(
            "{address} - - [30/Nov/2026:{h:02}:{m:02}:{s:02} +0000] \"{request}\" 200 {} \"-\" \"bench/1.0\" rt={}.{:03}\n",
            r >> 20 & 4095,
            0,
            r >> 50 & 511
        );
        out.write_all(line.as_bytes()).expect("write");
        written += line.len() as u64;
        lines += 1;
    }
    out.flush().expect("flush");
    std::fs::write(&lines_path, lines.to_string()).expect("line count");
    (path, lines)
}

/// Runs opbound with `args`, returning seconds taken and peak RSS in MiB.
fn measure(args: &[&str]) -> (f64, f64) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("opbound starts");
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            assert!(status.success(), "opbound {args:?} failed: {status}");
            break;
        }
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kb) = text
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        {
            peak_kb = peak_kb.max(kb);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (started.elapsed().as_secs_f64(), peak_kb as f64 / 1024.0)
}

fn main() {
    // `cargo test --all-targets` runs this too, without `--bench`: only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mb: u64 = std::env::var("OPBOUND_REPLAY_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    println!("generating logs (cached under target/replay-bench/) ...");
    let (big, big_lines) = generate(mb, 1_000_000);
    let (small, small_lines) = generate((mb / 10).max(1), 1_000_000);
    let (few, few_lines) = generate((mb / 10).max(1), 10_000);

    println!("\n| run | log | lines | seconds | lines/s | peak RSS MiB |");
    println!("|---|---|---:|---:|---:|---:|");
    for (what, path, lines, name) in [
        ("replay", &small, small_lines, format!("{} MB, 1M callers", (mb / 10).max(1))),
        ("replay", &big, big_lines, format!("{mb} MB, 1M callers")),
        ("suggest", &few, few_lines, format!("{} MB, 10k callers", (mb / 10).max(1))),
        ("suggest", &small, small_lines, format!("{} MB, 1M callers", (mb / 10).max(1))),
    ] {
        let path = path.to_str().expect("utf-8 path");
        let args: Vec<&str> = match what {
            "replay" => vec!["replay", SPEC, path, "--format", "json"],
            _ => vec!["suggest", SPEC, path, "--format", "json"],
        };
        let (seconds, rss) = measure(&args);
        // suggest reads the log twice (measure, then replay the proposals).
        let passes = if what == "suggest" { 2.0 } else { 1.0 };
        println!("| {what} | {name} | {lines} | {seconds:.1} | {:.0} | {rss:.0} |", lines as f64 * passes / seconds);
    }
}
