//! Issue 50's table: requests per second and p99 of three `opbound serve` instances on a real
//! Redis Cluster (three masters, three replicas, `--cluster-node-timeout 2000`), healthy, with a
//! master killed before and after its replica takes over, and with a master hung, each in the
//! same run. A fast upstream (nginx answering 200 itself) and `wrk -t1 -c16` per instance with a
//! fresh `X-Key` per request, so keys spread over every slot, on a bound with
//! `on-store-error: local`.
//!
//! `cargo bench --bench store_faults` (needs redis-server, redis-cli, nginx and wrk).
//! `OPBOUND_BENCH_STORE_TIMEOUT` sets `--store-timeout` (50ms, the default).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Killed, milliseconds};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: store faults bench, version: '1'}
paths:
  /items/{id}:
    get:
      operationId: getItem
      x-rate-limit: {per: 'header:X-Key', limit: 1000000000, window: PT1M, on-store-error: local}
"#;

/// A fresh caller per request.
const SCRIPT: &str = r#"
request = function()
  return wrk.format(nil, nil, {["X-Key"] = tostring(math.random(1, 2000000000))})
end
"#;

/// Requests a second and p99 of the three instances together over one span.
#[derive(Clone, Copy)]
struct Span {
    rps: f64,
    p99_ms: f64,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A free port whose cluster bus port (the port + 10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55535 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn signal(child: &Killed, signal: &str) {
    Command::new("kill").arg(format!("-{signal}")).arg(child.0.id().to_string()).status().expect("kill runs");
}

struct Node {
    port: u16,
    process: Killed,
}

fn start_cluster(dir: &Path) -> Vec<Node> {
    let nodes: Vec<Node> = (0..6)
        .map(|i| {
            let port = cluster_port();
            let data = dir.join(format!("redis-{i}"));
            std::fs::create_dir_all(&data).unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0"])
                .args(["--dir", data.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            Node { port, process: Killed(child) }
        })
        .collect();
    for n in &nodes {
        wait_until(Duration::from_secs(10), "redis-server answers", || cli(n.port, &["PING"]).contains("PONG"));
    }
    let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
    wait_until(Duration::from_secs(30), "the cluster is ok and its replicas in sync", || {
        nodes.iter().all(|n| cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
            && nodes.iter().filter(|n| cli(n.port, &["INFO", "replication"]).contains("master_link_status:up")).count()
                == 3
    });
    nodes
}

/// Ports of the masters serving slots, as node `via` sees them.
fn masters(via: u16) -> Vec<u16> {
    cli(via, &["CLUSTER", "NODES"])
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 8 && f[2].contains("master") && !f[2].contains("fail")
        })
        .filter_map(|l| l.split(' ').nth(1)?.split(['@', ':']).nth(1)?.parse().ok())
        .collect()
}

fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn upstream(dir: &Path) -> (Killed, u16) {
    let port = free_port();
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(&prefix).unwrap();
    let p = prefix.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  client_body_temp_path {p}/body;\n  proxy_temp_path {p}/proxy;\n\
         fastcgi_temp_path {p}/fastcgi;\n  uwsgi_temp_path {p}/uwsgi;\n  scgi_temp_path {p}/scgi;\n\
         server {{ listen 127.0.0.1:{port}; location / {{ return 200 'ok'; }} }}\n}}\n"
    );
    std::fs::write(prefix.join("nginx.conf"), conf).unwrap();
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).exists()).expect("nginx");
    let child = Command::new(nginx)
        .args(["-c", prefix.join("nginx.conf").to_str().unwrap(), "-p", prefix.to_str().unwrap()])
        .args(["-e", prefix.join("error.log").to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts");
    wait_until(Duration::from_secs(10), "nginx listens", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    (Killed(child), port)
}

/// An instance, with every line it logs kept.
struct Instance {
    _process: Killed,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

fn instance(spec: &Path, upstream: u16, store: &str, timeout: &str) -> Instance {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(["serve", "--spec", spec.to_str().unwrap(), "--upstream", &format!("http://127.0.0.1:{upstream}")])
        .args(["--store", store, "--store-timeout", timeout, "--listen", &format!("127.0.0.1:{port}")])
        .args(["--log-format", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("opbound starts");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (stderr, kept) = (child.stderr.take().unwrap(), log.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    wait_until(Duration::from_secs(20), "opbound counts in the store", || {
        log.lock().unwrap().iter().any(|l| l.contains("store reachable: counts are shared"))
    });
    Instance { _process: Killed(child), port, log }
}

/// wrk on every instance at once for `seconds`; their requests a second summed, the highest p99.
fn measure(instances: &[Instance], script: &Path, seconds: u32) -> Span {
    let runs: Vec<_> = instances
        .iter()
        .map(|i| {
            Command::new("wrk")
                .args(["--latency", "-t1", "-c16", &format!("-d{seconds}s")])
                .arg("-s")
                .arg(script)
                .arg(format!("http://127.0.0.1:{}/items/1", i.port))
                .stdout(Stdio::piped())
                .spawn()
                .expect("wrk runs")
        })
        .collect();
    let mut span = Span { rps: 0.0, p99_ms: 0.0 };
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("Non-2xx"), "every request is admitted (on-store-error: local): {text}");
        span.rps += text
            .lines()
            .find_map(|l| l.strip_prefix("Requests/sec:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no Requests/sec from wrk: {text}"));
        let p99 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("99%"))
            .and_then(|v| milliseconds(v.trim()))
            .unwrap_or_else(|| panic!("no 99% from wrk: {text}"));
        span.p99_ms = span.p99_ms.max(p99);
    }
    span
}

fn lines(instances: &[Instance]) -> Vec<usize> {
    instances.iter().map(|i| i.log.lock().unwrap().len()).collect()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    for tool in ["redis-server", "redis-cli", "wrk"] {
        if Command::new("which").arg(tool).output().map_or(true, |o| !o.status.success()) {
            eprintln!("the store faults benchmark needs {tool}; skipped");
            return;
        }
    }
    let timeout = std::env::var("OPBOUND_BENCH_STORE_TIMEOUT").unwrap_or_else(|_| "50ms".into());
    let timeout_ms = milliseconds(&timeout).unwrap_or(50.0);
    let dir: PathBuf = std::env::temp_dir().join(format!("opbound-store-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, SPEC).unwrap();
    let script = dir.join("keys.lua");
    std::fs::write(&script, SCRIPT).unwrap();

    let nodes = start_cluster(&dir);
    let (_nginx, upstream) = upstream(&dir);
    let store = format!(
        "redis+cluster://{}",
        nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",")
    );
    let instances: Vec<Instance> = (0..3).map(|_| instance(&spec, upstream, &store, &timeout)).collect();
    measure(&instances, &script, 2); // warm up: connections, scripts loaded

    let mut table: Vec<(&str, Span)> = Vec::new();
    let healthy = measure(&instances, &script, 5);
    table.push(("healthy", healthy));

    // A master is killed: before its replica takes over (the cluster's node timeout is 2 s).
    let victim = masters(nodes[0].port)[0];
    let survivor = nodes.iter().find(|n| n.port != victim).unwrap().port;
    let before_kill = lines(&instances);
    let killed_at = Instant::now();
    signal(&nodes.iter().find(|n| n.port == victim).unwrap().process, "KILL");
    table.push(("one master killed, before its replica takes over", measure(&instances, &script, 2)));
    wait_until(Duration::from_secs(20), "the replica takes over", || {
        let m = masters(survivor);
        m.len() == 3 && !m.contains(&victim) && cli(survivor, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });
    let failover = killed_at.elapsed();
    table.push(("the first 2 s after the failover", measure(&instances, &script, 2)));
    table.push(("2 to 5 s after the failover", measure(&instances, &script, 3)));
    std::thread::sleep((killed_at + Duration::from_secs(10)).saturating_duration_since(Instant::now()));
    let killed_lines: Vec<usize> = lines(&instances).iter().zip(&before_kill).map(|(a, b)| a - b).collect();

    // A master hangs (SIGSTOP), for less than the cluster's node timeout.
    let hung = masters(survivor)[0];
    let hung_node = &nodes.iter().find(|n| n.port == hung).unwrap().process;
    let before_hang = lines(&instances);
    signal(hung_node, "STOP");
    table.push(("one master hung (SIGSTOP)", measure(&instances, &script, 1)));
    signal(hung_node, "CONT");
    table.push(("the 2 s after it answers again", measure(&instances, &script, 2)));
    let hung_lines: Vec<usize> = lines(&instances).iter().zip(&before_hang).map(|(a, b)| a - b).collect();

    println!("\nstore faults: 3 instances, --store-timeout {timeout}, wrk -t1 -c16 each, a fresh X-Key per request");
    println!("failover {:.1} s after the kill\n", failover.as_secs_f64());
    println!("| moment | requests/s (3 instances) | of healthy | p99 |");
    println!("|---|---|---|---|");
    for (moment, span) in &table {
        println!("| {moment} | {:.0} | {:.0}% | {:.1} ms |", span.rps, 100.0 * span.rps / healthy.rps, span.p99_ms);
    }
    println!("\nlog lines per instance: 10 s from the kill {killed_lines:?}; the hang and its end {hung_lines:?}");
    let ratio = |i: usize| table[i].1.rps / healthy.rps;
    let goals = [
        ("during the kill, at least 70% of healthy", ratio(1) >= 0.70),
        ("during the hang, at least 70% of healthy", ratio(4) >= 0.70),
        ("2 s after the failover, at least 90% of healthy", ratio(3) >= 0.90),
        ("p99 during each fault at most the store timeout", table[1].1.p99_ms.max(table[4].1.p99_ms) <= timeout_ms),
        ("at most 20 log lines per instance", killed_lines.iter().chain(&hung_lines).all(|&n| n <= 20)),
    ];
    for (goal, met) in goals {
        println!("{} {goal}", if met { "met:    " } else { "NOT MET:" });
    }
    let _ = std::fs::remove_dir_all(&dir);
}
