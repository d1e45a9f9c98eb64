//! Load through the proxy, all on loopback: `cargo bench --bench proxy` (needs `wrk`).
//!
//! Five targets, measured in turn, round after round, so drift on a shared machine hits all of
//! them alike: the upstream directly, `opbound serve` with no bounds (limiting off), and
//! `opbound serve` with three active bounds on the route (never exceeded, so every request is
//! checked against all three and forwarded); then a small JSON POST through one bound keyed on
//! the body (`per: json:/username`: opbound reads the body ahead, keys on it, and forwards it)
//! against the same POST through one bound keyed per address (the body streamed through
//! unread). Prints requests per second and the ratios.
//!
//! To compare two builds, point `OPBOUND_BENCH_BASELINE` at another `opbound` binary (say, one
//! built from an older commit): its two proxies join the same rounds, and the ratios of this
//! build to it are printed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

mod common;
use common::{Killed, median};
use std::time::Duration;

const BOUNDED: &str = r#"
openapi: 3.0.3
info: {title: proxy bench, version: '1'}
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

const BODY: &str = r#"
openapi: 3.0.3
info: {title: proxy bench, version: '1'}
paths:
  /login:
    post:
      operationId: logIn
      requestBody: {content: {application/json: {schema: {type: object}}}}
      x-rate-limit:
        - {per: 'json:/username', limit: 1000000000, window: PT1M}
  /plain:
    post:
      operationId: plain
      requestBody: {content: {application/json: {schema: {type: object}}}}
      x-rate-limit:
        - {per: address, limit: 1000000000, window: PT1M}
"#;

/// wrk's script for a JSON POST like a sign-in's.
const POST: &str = r#"
wrk.method = "POST"
wrk.body = '{"username": "ada@example.com", "password": "correct horse battery staple"}'
wrk.headers["Content-Type"] = "application/json"
"#;

const OPEN: &str = r#"
openapi: 3.0.3
info: {title: proxy bench, version: '1'}
paths:
  /items/{id}:
    get: {operationId: getItem}
"#;

fn serve(binary: &str, spec: &str, upstream: SocketAddr, dir: &std::path::Path, name: &str) -> (Killed, SocketAddr) {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, spec).unwrap();
    let mut child = Command::new(binary)
        .args(["serve", "--spec", path.to_str().unwrap(), "--upstream", &format!("http://{upstream}")])
        .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
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
            if v["fields"]["message"] == "serving"
                && let Some(a) = v["fields"]["listen"].as_str().and_then(|a| a.parse::<SocketAddr>().ok())
            {
                let _ = tx.send(a);
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(20)).expect("opbound listens");
    (Killed(child), addr)
}

/// Requests per second that wrk reports for one run (with a wrk Lua script, when given).
fn wrk(url: &str, script: Option<&std::path::Path>, seconds: u32) -> f64 {
    let mut command = Command::new("wrk");
    command.args(["-t1", "-c32", &format!("-d{seconds}s"), "-H", "X-Api-Key: bench"]);
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let out = command.arg(url).output().expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("Requests/sec:")).unwrap_or_else(|| panic!("wrk said: {text}"));
    let non_2xx = text.lines().find(|l| l.contains("Non-2xx"));
    assert!(non_2xx.is_none(), "every request must be forwarded and answered 200: {text}");
    line.trim_start_matches("Requests/sec:").trim().parse().unwrap()
}

fn main() {
    // `cargo test --benches` runs this with `--test`? No: only `cargo bench` passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if Command::new("wrk").arg("--version").output().is_err() {
        eprintln!("the proxy benchmark needs wrk (apt-get install wrk); skipped");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let upstream = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"{\"id\":1,\"name\":\"item\"}"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    });
    let dir = std::env::temp_dir().join(format!("opbound-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let current = env!("CARGO_BIN_EXE_opbound");
    let (_open, open) = serve(current, OPEN, upstream, &dir, "open");
    let (_bounded, bounded) = serve(current, BOUNDED, upstream, &dir, "bounded");
    let (_body, body) = serve(current, BODY, upstream, &dir, "body");
    let post = dir.join("post.lua");
    std::fs::write(&post, POST).unwrap();
    let mut targets = vec![
        ("direct to the upstream", format!("http://{upstream}/items/7"), None),
        ("opbound, limiting off", format!("http://{open}/items/7"), None),
        ("opbound, three bounds", format!("http://{bounded}/items/7"), None),
        ("POST, per address", format!("http://{body}/plain"), Some(post.as_path())),
        ("POST, per json:/username", format!("http://{body}/login"), Some(post.as_path())),
    ];
    let baseline = std::env::var("OPBOUND_BENCH_BASELINE").ok();
    let mut _baseline_children = Vec::new();
    if let Some(binary) = &baseline {
        let (a, open) = serve(binary, OPEN, upstream, &dir, "baseline-open");
        let (b, bounded) = serve(binary, BOUNDED, upstream, &dir, "baseline-bounded");
        _baseline_children.extend([a, b]);
        targets.push(("baseline, limiting off", format!("http://{open}/items/7"), None));
        targets.push(("baseline, three bounds", format!("http://{bounded}/items/7"), None));
    }
    for (_, url, script) in &targets {
        wrk(url, *script, 1); // warm-up
    }
    let rounds = 3;
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (i, (_, url, script)) in targets.iter().enumerate() {
            results[i].push(wrk(url, *script, 5));
        }
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    println!("proxy load, wrk -t1 -c32, {rounds} interleaved rounds of 5 s, medians:");
    for ((name, ..), rps) in targets.iter().zip(&medians) {
        println!("  {name:<26} {rps:>10.0} requests/s");
    }
    println!("  three bounds / limiting off:  {:.2}", medians[2] / medians[1]);
    println!("  three bounds / direct:        {:.2}", medians[2] / medians[0]);
    println!("  limiting off / direct:        {:.2}", medians[1] / medians[0]);
    println!("  body key / per address:       {:.2}", medians[4] / medians[3]);
    if baseline.is_some() {
        println!("  this build / baseline, limiting off:  {:.2}", medians[1] / medians[5]);
        println!("  this build / baseline, three bounds:  {:.2}", medians[2] / medians[6]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
