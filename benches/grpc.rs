//! Decisions per second over gRPC against the HTTP decision service, side by side in one run:
//! `cargo bench --bench grpc` (uses `taskset` and `wrk` when they are there; runs without them).
//!
//! Two `opbound decide` processes with the same three bounds as the proxy benchmark's BOUNDED
//! spec (per address, per `header:X-Api-Key`, a token bucket per route), never exceeded, so every
//! decision is checked against all three and allowed:
//!
//! 1. `decide --grpc 127.0.0.1:0 --no-http`, asked Envoy's ext_authz v3
//!    `envoy.service.auth.v3.Authorization/Check` by tonic clients built from `envoy-types`:
//!    4 HTTP/2 connections (one tonic `Channel` each) with 8 calls in flight on each;
//! 2. `decide --gateway nginx`, asked the way nginx's `auth_request` asks it (`X-Original-Method`,
//!    `X-Original-URI`, and the `X-Api-Key` a bound counts) by hyper's HTTP/1.1 client over 32
//!    keep-alive connections, one request in flight on each;
//! 3. when `wrk` is installed, the same HTTP target with `wrk --latency -t1 -c32`, for reference
//!    against the proxy benchmark's `decide` numbers.
//!
//! Both in-process load generators are Rust on tokio with 32 requests in flight, so the two
//! protocols are measured alike. Every answer is checked: a Check that is not `OK`, or an HTTP
//! answer that is not 200, means the benchmark is wrong, and it stops there.
//!
//! Placement: with `taskset` and at least two CPUs, both opbound processes run under
//! `taskset -c 0` with `--workers 1`, and the load generators (this process, on one tokio thread,
//! and wrk) on CPU 1; otherwise nothing is pinned and it says so. Each run also reports the CPU
//! the opbound process used (of one CPU), to tell a server-bound run from a client-bound one.
//!
//! The targets are measured in turn, round after round (the order alternating), so drift on a
//! shared machine hits them alike; medians are printed at the end, with the ratio gRPC / HTTP.
//!
//! Environment:
//! - `OPBOUND_BENCH_SECONDS` (default 5): the length of each run.
//! - `OPBOUND_BENCH_ROUNDS` (default 3): the interleaved rounds; medians are kept.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress, address};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, check_response};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

mod common;
use common::{BOUNDED, Killed, Settings, median, milliseconds};

/// gRPC: HTTP/2 connections, and calls in flight on each.
const CHANNELS: usize = 4;
const PER_CHANNEL: usize = 8;
/// HTTP/1.1: keep-alive connections, one request in flight on each.
const CONNECTIONS: usize = CHANNELS * PER_CHANNEL;

/// Where opbound and the load generators run.
struct Placement {
    /// `taskset -c` for opbound, and its `--workers`; `None` when nothing is pinned.
    server: Option<&'static str>,
    /// The CPU this process (and wrk) are pinned to.
    client: Option<&'static str>,
}

impl Placement {
    /// opbound on CPU 0 and the load on CPU 1, when `taskset` exists and there are two CPUs.
    fn choose() -> (Placement, String) {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let taskset = Command::new("taskset").arg("-V").output().is_ok_and(|o| o.status.success());
        if taskset && cpus >= 2 {
            // Pins every thread this process has now; the ones started later inherit it.
            let pid = std::process::id().to_string();
            let pinned = Command::new("taskset")
                .args(["-a", "-p", "-c", "1", &pid])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if pinned {
                return (
                    Placement { server: Some("0"), client: Some("1") },
                    "opbound under taskset -c 0 with --workers 1; the load generators on CPU 1".to_string(),
                );
            }
        }
        let why = if taskset { format!("{cpus} CPU(s)") } else { "no taskset".to_string() };
        (Placement { server: None, client: None }, format!("nothing pinned ({why}); opbound picks its own workers"))
    }
}

/// A command run under `taskset -c cpus`, or as is.
fn pinned(cpus: Option<&str>, program: &str) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cpus, program]);
            command
        }
        None => Command::new(program),
    }
}

/// Starts `opbound decide --spec <spec> args...` and waits for the log line `ready` carrying
/// the address it listens on in `field`.
fn decide(
    placement: &Placement,
    spec: &Path,
    args: &[&str],
    ready: &'static str,
    field: &'static str,
) -> (Killed, SocketAddr) {
    let mut command = pinned(placement.server, env!("CARGO_BIN_EXE_opbound"));
    command.args(["decide", "--spec", spec.to_str().unwrap(), "--trusted-proxy", "127.0.0.1", "--log-format", "json"]);
    command.args(args);
    if placement.server.is_some() {
        command.args(["--workers", "1"]);
    }
    let mut child = command
        .env("OPBOUND_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("opbound starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["fields"]["message"] == ready
                && let Some(a) = v["fields"][field].as_str().and_then(|a| a.parse::<SocketAddr>().ok())
            {
                let _ = tx.send(a);
            } else if v["level"] == "ERROR"
                || (v["level"] == "WARN"
                    && !v["fields"]["message"].as_str().is_some_and(|m| m.starts_with("warning: ")))
            {
                eprintln!("opbound: {line}");
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(20)).expect("opbound listens");
    (Killed(child), addr)
}

/// CPU time a process has used so far (user and system), from `/proc/<pid>/stat`.
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15, 12 and 13 after the name; USER_HZ is 100 on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// One measured run.
#[derive(Clone, Copy)]
struct Run {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU the opbound process used over the run, in CPUs (1.0 = one CPU all the time).
    server_cpu: f64,
    /// CPU this process used, likewise (`NaN` for wrk).
    client_cpu: f64,
}

/// The latencies of every request, merged into a run.
fn summarize(latencies: Vec<Vec<Duration>>, elapsed: Duration, server: Duration, client: Duration) -> Run {
    let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
    assert!(!all.is_empty(), "no request completed");
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)].as_secs_f64() * 1000.0;
    let secs = elapsed.as_secs_f64();
    Run {
        rps: all.len() as f64 / secs,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        server_cpu: server.as_secs_f64() / secs,
        client_cpu: client.as_secs_f64() / secs,
    }
}

/// The Check every gRPC call sends: Envoy describing `GET /items/7` with the key, from 127.0.0.1.
fn check_request() -> CheckRequest {
    let http = HttpRequest {
        method: "GET".into(),
        path: "/items/7".into(),
        host: "bench".into(),
        headers: [("x-api-key".to_string(), "bench".to_string())].into_iter().collect(),
        ..Default::default()
    };
    let source = Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: "127.0.0.1".into(),
                port_specifier: Some(
                    envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(40000),
                ),
                ..Default::default()
            })),
        }),
        ..Default::default()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(source),
            request: Some(Request { http: Some(http), ..Default::default() }),
            ..Default::default()
        }),
    }
}

/// gRPC Checks for `length`: `CHANNELS` connections, `PER_CHANNEL` calls in flight on each.
async fn grpc_run(addr: SocketAddr, server_pid: &str, length: Duration) -> Run {
    let mut channels = Vec::with_capacity(CHANNELS);
    for _ in 0..CHANNELS {
        // One Endpoint connected once is one HTTP/2 connection; its clones share it.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("a gRPC connection to opbound");
        channels.push(channel);
    }
    let request = check_request();
    let (server0, client0) = (cpu_time(server_pid), cpu_time("self"));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = channels
        .iter()
        .flat_map(|channel| std::iter::repeat_n(channel, PER_CHANNEL))
        .map(|channel| {
            let mut client = AuthorizationClient::new(channel.clone());
            let request = request.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 16);
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let answer = client.check(request.clone()).await.expect("a Check answered").into_inner();
                    latencies.push(sent.elapsed());
                    let ok = answer.status.as_ref().is_some_and(|s| s.code == 0)
                        && matches!(answer.http_response, Some(check_response::HttpResponse::OkResponse(_)));
                    assert!(ok, "a Check was refused, so the benchmark is wrong: {answer:?}");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(tasks.len());
    for t in tasks {
        latencies.push(t.await.expect("every Check allowed"));
    }
    let elapsed = start.elapsed();
    summarize(latencies, elapsed, cpu_time(server_pid) - server0, cpu_time("self") - client0)
}

/// HTTP decisions for `length` the way nginx's `auth_request` asks: `CONNECTIONS` keep-alive
/// HTTP/1.1 connections, one request in flight on each, every body read.
async fn http_run(addr: SocketAddr, server_pid: &str, length: Duration) -> Run {
    let mut senders = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("an HTTP connection to opbound");
        stream.set_nodelay(true).unwrap();
        let (sender, connection) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        senders.push(sender);
    }
    let (server0, client0) = (cpu_time(server_pid), cpu_time("self"));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|mut sender| {
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 16);
                while Instant::now() < deadline {
                    let request = http::Request::get("/_opbound")
                        .header(http::header::HOST, "bench")
                        .header("x-original-method", "GET")
                        .header("x-original-uri", "/items/7")
                        .header("x-api-key", "bench")
                        .body(Empty::new())
                        .unwrap();
                    let sent = Instant::now();
                    sender.ready().await.expect("the connection stays open");
                    let answer = sender.send_request(request).await.expect("a decision answered");
                    let status = answer.status();
                    let body = answer.into_body().collect().await.expect("the whole answer").to_bytes();
                    latencies.push(sent.elapsed());
                    assert_eq!(status, 200, "a decision was refused, so the benchmark is wrong: {body:?}");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(tasks.len());
    for t in tasks {
        latencies.push(t.await.expect("every decision allowed"));
    }
    let elapsed = start.elapsed();
    summarize(latencies, elapsed, cpu_time(server_pid) - server0, cpu_time("self") - client0)
}

/// wrk's `-t1 -c32` against the HTTP decision service, for reference.
fn wrk_run(placement: &Placement, addr: SocketAddr, server_pid: &str, seconds: u32) -> Run {
    let url = format!("http://{addr}/_opbound");
    let server0 = cpu_time(server_pid);
    let started = Instant::now();
    let out = pinned(placement.client, "wrk")
        .args(["--latency", "-t1", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
        .args(["-H", "X-Original-Method: GET", "-H", "X-Original-URI: /items/7", "-H", "X-Api-Key: bench"])
        .arg(&url)
        .output()
        .expect("wrk runs");
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed ({url}): {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("Non-2xx"), "some decisions were not 200, so the benchmark is wrong: {text}");
    let rps: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec from wrk ({url}): {text}"));
    let percentile = |p: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(p))
            .and_then(|v| milliseconds(v.trim()))
            .unwrap_or_else(|| panic!("no {p} latency from wrk ({url}): {text}"))
    };
    Run {
        rps,
        p50_ms: percentile("50%"),
        p99_ms: percentile("99%"),
        server_cpu: (cpu_time(server_pid) - server0).as_secs_f64() / elapsed.as_secs_f64(),
        client_cpu: f64::NAN,
    }
}

/// What is measured, in the order of the first round.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    Grpc,
    Http,
    Wrk,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Grpc => "gRPC Check (tonic, 4x8)",
            Target::Http => "HTTP decide (hyper, 32)",
            Target::Wrk => "HTTP decide (wrk -c32)",
        }
    }
}

fn print_run(label: &str, r: &Run) {
    let client = if r.client_cpu.is_nan() { "    -".to_string() } else { format!("{:5.2}", r.client_cpu) };
    println!(
        "  {label:<26} {:>9.0} decisions/s   p50 {:>6.3} ms   p99 {:>6.3} ms   CPU opbound {:4.2} load {client}",
        r.rps, r.p50_ms, r.p99_ms, r.server_cpu
    );
}

fn main() {
    // `cargo test --all-targets` runs this too, without `--bench`: only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let settings = Settings::from_env();
    let (placement, described) = Placement::choose();
    let wrk = Command::new("wrk").arg("--version").output().is_ok();
    let dir = std::env::temp_dir().join(format!("opbound-grpc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("bounded.yaml");
    std::fs::write(&spec, BOUNDED).unwrap();

    let (grpc_server, grpc) =
        decide(&placement, &spec, &["--grpc", "127.0.0.1:0", "--no-http"], "deciding over gRPC", "grpc");
    let (http_server, http) =
        decide(&placement, &spec, &["--gateway", "nginx", "--listen", "127.0.0.1:0"], "deciding", "listen");
    let grpc_pid = grpc_server.0.id().to_string();
    let http_pid = http_server.0.id().to_string();

    // One thread: the load generators get CPU 1 and no more, as wrk -t1 does.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let length = Duration::from_secs(u64::from(settings.seconds));
    let mut targets = vec![Target::Grpc, Target::Http];
    if wrk {
        targets.push(Target::Wrk);
    }
    let measure = |t: Target, length: Duration| match t {
        Target::Grpc => rt.block_on(grpc_run(grpc, &grpc_pid, length)),
        Target::Http => rt.block_on(http_run(http, &http_pid, length)),
        Target::Wrk => wrk_run(&placement, http, &http_pid, length.as_secs() as u32),
    };

    println!("gRPC Check against opbound decide --grpc --no-http, and HTTP decide --gateway nginx, same three bounds");
    println!("placement: {described}");
    println!(
        "load: gRPC {CHANNELS} HTTP/2 connections x {PER_CHANNEL} calls in flight; HTTP {CONNECTIONS} keep-alive \
         HTTP/1.1 connections x 1{}; {} s runs, {} rounds",
        if wrk { "; wrk -t1 -c32 for reference" } else { " (no wrk: its reference run skipped)" },
        settings.seconds,
        settings.rounds
    );
    println!(
        "(CPU columns: CPU time over the run, in CPUs; opbound near 1.00 with --workers 1 means it is the bottleneck)"
    );
    for &t in &targets {
        measure(t, Duration::from_secs(1)); // warm-up
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); targets.len()];
    for round in 0..settings.rounds {
        println!("round {}:", round + 1);
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let r = measure(targets[i], length);
            print_run(targets[i].label(), &r);
            runs[i].push(r);
        }
        let (g, h) = (runs[0].last().unwrap(), runs[1].last().unwrap());
        println!("  gRPC / HTTP (hyper): {:.2}", g.rps / h.rps);
    }
    let medians: Vec<Run> = runs
        .iter()
        .map(|runs| {
            let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
            Run {
                rps: m(|r| r.rps),
                p50_ms: m(|r| r.p50_ms),
                p99_ms: m(|r| r.p99_ms),
                server_cpu: m(|r| r.server_cpu),
                client_cpu: m(|r| r.client_cpu),
            }
        })
        .collect();
    println!("medians of {} rounds:", settings.rounds);
    for (t, r) in targets.iter().zip(&medians) {
        print_run(t.label(), r);
    }
    println!("  gRPC / HTTP decide (both in-process Rust clients): {:.2}", medians[0].rps / medians[1].rps);
    if let Some(w) = targets.iter().position(|t| *t == Target::Wrk) {
        println!("  gRPC / HTTP decide (wrk):                         {:.2}", medians[0].rps / medians[w].rps);
    }
    drop((grpc_server, http_server));
    let _ = std::fs::remove_dir_all(&dir);
}
