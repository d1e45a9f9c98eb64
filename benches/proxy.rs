//! Load through the proxy against nginx and Pingap, all on loopback: `cargo bench --bench proxy`
//! (needs `wrk`, `nginx` and `taskset`; it installs whichever is missing with apt-get, and says so
//! and skips only when that fails; Pingap is built when missing, see below).
//!
//! Eight targets, measured with `wrk --latency` in turn, round after round, so drift on a shared
//! machine hits all of them alike:
//!
//! 1. direct: the upstream itself, an nginx process answering `return 200` with a small JSON body;
//! 2. nginx `proxy_pass` to it, over a keep-alive upstream pool;
//! 3. the same with three `limit_req` zones never exceeded (per address, per `X-Api-Key`, one
//!    for the route), nginx's counterpart of opbound's three bounds;
//! 4. Pingap 0.13.1 (the Rust proxy on Cloudflare's Pingora) proxying to it;
//! 5. the same with three `limit` plugins never exceeded (per address, per `X-Api-Key`, one for
//!    the route), Pingap's counterpart of the three bounds;
//! 6. `opbound serve` with no bounds (limiting off);
//! 7. `opbound serve` with three bounds (per address, per `header:X-Api-Key`, per route), never
//!    exceeded, so every request is checked against all three and forwarded;
//! 8. `opbound decide --gateway nginx` with the same three bounds, asked directly the way nginx's
//!    `auth_request` asks it (every answer a 200).
//!
//! in two placements, each its own set of rounds: every process (both nginx, Pingap, opbound, wrk)
//! pinned to one CPU with `taskset -c 0`, then to two with `taskset -c 0,1` (nginx with as many
//! workers, Pingap with as many threads, opbound with as many `--workers` when the binary has
//! that flag). The one-CPU placement also compares a small JSON POST through one bound keyed on
//! the body (`per: json:/username`: opbound reads the body ahead, keys on it, and forwards it)
//! with the same POST through one bound keyed per address (the body streamed through unread).
//! After the throughput rounds, a paced round sends every GET target but Pingap's the same offered
//! load, well below the slowest one's capacity (wrk's Lua `delay()`), and compares their p99
//! latencies there.
//!
//! Every run also reads, from `/proc`, the CPU time (user and system) the measured server's
//! processes spent during it (nginx's master and workers; Pingap's and opbound's threads; for the
//! direct target the upstream), and prints it per request. On a machine where wrk and the
//! upstream share the server's CPUs, throughput mixes the three programs' costs; the server's own
//! CPU time per request is its cost alone, and the two placements' costs give the scaling two
//! workers would have on CPUs of their own: 2 x (cost with one worker) / (cost with two), 2.0
//! when a second worker adds no work per request.
//!
//! Last, idle connections: `opbound serve` with the three bounds holds 10,000 keep-alive
//! connections (from 100 loopback addresses, under the per-address cap), each having made one
//! request; its resident memory growth is printed against the goal, and every connection must
//! still answer a second request.
//!
//! Environment:
//! - `OPBOUND_BENCH_SECONDS` (default 5): the length of each wrk run.
//! - `OPBOUND_BENCH_ROUNDS` (default 3): the interleaved rounds per placement; medians are kept,
//!   and each ratio is the median of the ratios round by round (the runs of one round are
//!   seconds apart, while this VM's speed drifts from minute to minute).
//! - `OPBOUND_BENCH_BASELINE`: another `opbound` binary (say, one built from an older commit);
//!   its two serve targets join the same rounds, and the ratios of this build to it are printed.
//! - `OPBOUND_BENCH_CURRENT`: an `opbound` binary to measure as "this build" instead of the one
//!   cargo built with the bench: with `OPBOUND_BENCH_BASELINE`, an A/B of two builds of one
//!   commit (a build setting such as LTO).
//! - `OPBOUND_BENCH_PINGAP`: the `pingap` binary to measure. Without it, `pingap` on the PATH
//!   if it is 0.13.1, else one built before under the target directory, else one built there now
//!   with `cargo install --locked pingap@0.13.1` (cmake and protoc installed with apt-get first
//!   when missing; many minutes, once). When none can be had, its two targets are left out.
//! - `OPBOUND_BENCH_PART`: `load` for the throughput and latency rounds only, `idle` for the idle
//!   connections only; both when unset.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{BOUNDED, Killed, Settings, median, milliseconds, rss_kib};

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

/// What the upstream answers.
const ITEM: &str = r#"{"id":1,"name":"item"}"#;

/// The headers every GET target gets, the same for all so every request is the same size:
/// the key one bound counts, and what nginx's `auth_request` would tell `decide` (which the
/// others ignore). The address is a documentation one, believed from the trusted gateway.
const HEADERS: [&str; 4] =
    ["X-Api-Key: bench", "X-Original-Method: GET", "X-Original-URI: /items/7", "X-Forwarded-For: 192.0.2.1"];

/// The programs the benchmark runs besides opbound.
struct Tools {
    nginx: String,
    /// Pingap, when it can be had (see `find_pingap`); its targets are left out without it.
    pingap: Option<String>,
    /// The kernel's clock ticks a second, the unit of `/proc/PID/stat`'s CPU times.
    ticks: f64,
}

impl Tools {
    /// The tools, or the name of the first one missing.
    fn find() -> Result<Tools, &'static str> {
        if Command::new("wrk").arg("--version").output().is_err() {
            return Err("wrk");
        }
        if Command::new("taskset").arg("-V").output().is_err() {
            return Err("taskset");
        }
        let nginx = ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin", "/usr/local/nginx/sbin"]
            .iter()
            .map(|dir| Path::new(dir).join("nginx"))
            .find(|p| p.exists())
            .ok_or("nginx")?;
        let ticks = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .ok_or("getconf")?;
        Ok(Tools { nginx: nginx.display().to_string(), pingap: None, ticks })
    }
}

/// The Debian packages of the programs `Tools::find` looks for.
const PACKAGES: [&str; 3] = ["wrk", "nginx", "util-linux"];

/// Installs Debian packages (through sudo unless root), as `.ci/test` installs the tests'
/// programs; what apt-get cannot do is found missing again by whoever asked for it.
fn install(missing: &str, packages: &[&str]) {
    eprintln!("the proxy benchmark needs {missing}: installing {} with apt-get", packages.join(" "));
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let apt = |args: &[&str]| {
        let mut command = if root { Command::new("apt-get") } else { Command::new("sudo") };
        if !root {
            // sudo clears the environment; a variable given on its command line stays.
            command.args(["DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        }
        let status =
            command.args(args).env("DEBIAN_FRONTEND", "noninteractive").stdout(std::process::Stdio::null()).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("  apt-get {} did not succeed ({status:?})", args.join(" "));
        }
    };
    apt(&["update", "-qq"]);
    // `--no-upgrade`: what is already installed stays as it is.
    apt(&[&["install", "-y", "-qq", "--no-install-recommends", "--no-upgrade"][..], packages].concat());
}

/// Where the processes of one set of rounds run, and how hard wrk pushes there.
struct Placement {
    name: &'static str,
    /// The CPU list given to `taskset -c`.
    cpus: &'static str,
    /// nginx `worker_processes` and opbound `--workers`.
    workers: usize,
    wrk_threads: u32,
    wrk_connections: u32,
    /// Whether the POST comparison runs here too.
    post: bool,
}

const ONE_CPU: Placement =
    Placement { name: "one CPU", cpus: "0", workers: 1, wrk_threads: 1, wrk_connections: 32, post: true };
const TWO_CPUS: Placement =
    Placement { name: "two CPUs", cpus: "0,1", workers: 2, wrk_threads: 2, wrk_connections: 64, post: false };

/// A command run under `taskset -c cpus`, or as is without a CPU list.
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

/// A port free now, for nginx, which cannot be told to pick one and say which.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something accepts on `port`.
fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} does not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An nginx master in the foreground with its own prefix. Stopped with SIGTERM, not SIGKILL:
/// a killed master leaves its workers behind, still listening.
struct Nginx(Child);

impl Nginx {
    /// Starts nginx with `http` inside its `http {}` block, and waits for every port in `ports`.
    fn start(tools: &Tools, cpus: Option<&str>, workers: usize, dir: &Path, http: &str, ports: &[u16]) -> Nginx {
        std::fs::create_dir_all(dir).unwrap();
        let prefix = dir.display();
        let conf = format!(
            "daemon off;\nworker_processes {workers};\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\n\
             events {{ worker_connections 16384; }}\n\
             http {{\n  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
             client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n\
             uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n{http}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let log = dir.join("error.log");
        let child = pinned(cpus, &tools.nginx)
            .args(["-c", path.to_str().unwrap(), "-p", dir.to_str().unwrap(), "-e", log.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let nginx = Nginx(child);
        for &port in ports {
            wait_listening(port, &format!("nginx ({})", log.display()));
        }
        nginx
    }

    /// The upstream: answers every request with the item, itself.
    fn upstream(tools: &Tools, cpus: Option<&str>, workers: usize, dir: &Path) -> (Nginx, SocketAddr) {
        let port = free_port();
        let http = format!(
            "  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      default_type application/json;\n      \
             return 200 '{ITEM}';\n    }}\n  }}"
        );
        let nginx = Nginx::start(tools, cpus, workers, &dir.join("upstream"), &http, &[port]);
        (nginx, SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// The gateway: a plain `proxy_pass` on one port, and the same behind three `limit_req` zones
    /// that are never exceeded on the other.
    fn gateway(
        tools: &Tools,
        cpus: Option<&str>,
        workers: usize,
        dir: &Path,
        upstream: SocketAddr,
    ) -> (Nginx, u16, u16) {
        let (plain, limited) = (free_port(), free_port());
        let proxy = "proxy_pass http://u;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";";
        // Rates and bursts far above any load here: every request is counted in all three zones
        // and none is delayed or refused, as opbound's bounds are never exceeded.
        let never = "burst=1000000 nodelay";
        let http = format!(
            "  upstream u {{ server {upstream}; keepalive 64; keepalive_requests 1000000; }}\n  \
             limit_req_zone $binary_remote_addr zone=per_address:10m rate=1000000r/s;\n  \
             limit_req_zone $http_x_api_key zone=per_key:10m rate=1000000r/s;\n  \
             limit_req_zone $server_name zone=per_route:1m rate=1000000r/s;\n  \
             server {{\n    listen 127.0.0.1:{plain};\n    location / {{\n      {proxy}\n    }}\n  }}\n  \
             server {{\n    listen 127.0.0.1:{limited};\n    server_name items;\n    location / {{\n      \
             limit_req zone=per_address {never};\n      limit_req zone=per_key {never};\n      \
             limit_req zone=per_route {never};\n      {proxy}\n    }}\n  }}"
        );
        let nginx = Nginx::start(tools, cpus, workers, &dir.join("gateway"), &http, &[plain, limited]);
        (nginx, plain, limited)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

/// The Pingap release measured beside nginx: the Rust proxy on Cloudflare's Pingora that users
/// weigh opbound against.
const PINGAP_VERSION: &str = "0.13.1";

/// Pingap's binary: `$OPBOUND_BENCH_PINGAP`; else `pingap` on the PATH when it is the release
/// measured; else the one built under the target directory before; else built there now with
/// `cargo install`, cmake and protoc installed with apt-get first when missing. `None`, said on
/// stderr, when none can be had: the other targets are measured without it.
fn find_pingap() -> Option<String> {
    let version = |binary: &str| {
        let out = Command::new(binary).arg("--version").output().ok().filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    if let Ok(binary) = std::env::var("OPBOUND_BENCH_PINGAP") {
        let Some(v) = version(&binary) else {
            eprintln!("OPBOUND_BENCH_PINGAP={binary} does not run: pingap is left out");
            return None;
        };
        println!("pingap: {binary} ({v}, OPBOUND_BENCH_PINGAP)");
        return Some(binary);
    }
    // `pingap 0.13.1 (commit)`.
    if let Some(v) = version("pingap").filter(|v| v.split_whitespace().nth(1) == Some(PINGAP_VERSION)) {
        println!("pingap: pingap on the PATH ({v})");
        return Some("pingap".to_string());
    }
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pingap-{PINGAP_VERSION}"));
    let binary = root.join("bin").join("pingap");
    if !binary.exists() {
        // Its build runs cmake (zlib-ng, aws-lc) and protoc (etcd-client's protocol buffers).
        let has = |program: &str| Command::new(program).arg("--version").output().is_ok();
        if !has("cmake") || !has("protoc") {
            install("cmake and protoc to build pingap", &["cmake", "protobuf-compiler"]);
        }
        eprintln!(
            "pingap {PINGAP_VERSION} is not on the PATH (nor named by OPBOUND_BENCH_PINGAP): building it once with \
             `cargo install --locked pingap@{PINGAP_VERSION} --root {}`, which takes many minutes",
            root.display()
        );
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let status = Command::new(cargo)
            .args(["install", "--locked", &format!("pingap@{PINGAP_VERSION}"), "--root"])
            .arg(&root)
            // In a directory of its own that cargo removes afterwards, not in the target directory
            // this bench was built in.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::null())
            .status();
        if !status.as_ref().is_ok_and(|s| s.success()) || !binary.exists() {
            eprintln!("  cargo install pingap did not succeed ({status:?}): pingap is left out");
            return None;
        }
    }
    let binary = binary.display().to_string();
    let v = version(&binary)?;
    println!("pingap: {binary} ({v})");
    Some(binary)
}

/// A Pingap process in the foreground: a plain proxy on one port, and the same behind three
/// `limit` plugins that are never exceeded on the other. Stopped with SIGINT, Pingora's fast
/// shutdown: SIGTERM would wait out a grace period first.
struct Pingap(Child);

impl Pingap {
    fn gateway(
        binary: &str,
        cpus: Option<&str>,
        workers: usize,
        dir: &Path,
        upstream: SocketAddr,
    ) -> (Pingap, u16, u16) {
        let dir = dir.join("pingap");
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, limited) = (free_port(), free_port());
        let path = dir.join("pingap.toml");
        std::fs::write(&path, pingap_conf(&dir, workers, upstream, plain, limited)).unwrap();
        let log = std::fs::File::create(dir.join("pingap.log")).unwrap();
        let child = pinned(cpus, binary)
            .args(["-c", path.to_str().unwrap()])
            // Its certificate renewal task has nothing to do here.
            .env("PINGAP_DISABLE_ACME", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("pingap starts");
        let pingap = Pingap(child);
        for port in [plain, limited] {
            wait_answering(port, &format!("pingap ({})", dir.join("pingap.log").display()));
        }
        (pingap, plain, limited)
    }
}

/// Waits until a GET through `port` is answered 200. Pingap listens before it has loaded its
/// upstream's address (its log says so in that order), and wrk's warm-up fails on any other
/// answer.
fn wait_answering(port: u16, what: &str) {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(20);
    let get = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"GET /items/7 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        Ok(answer.starts_with(b"HTTP/1.1 200"))
    };
    while !get().is_ok_and(|ok| ok) {
        assert!(Instant::now() < deadline, "{what} does not answer 200 on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pingap's configuration: `threads` a server (each of the two servers has its own, and only one
/// of them is busy at a time) without work stealing (a runtime a thread, as opbound's workers
/// are: about 10% more requests/s than Pingap's default on one thread, measured by hand); logs at
/// warnings, no access log. The three `rate` plugins are keyed as opbound's bounds are: the
/// client's address (Pingap takes it from `X-Forwarded-For` first, and every request here carries
/// one), `X-Api-Key`, and one key for the route (`Host`, the same on every request, as nginx's
/// zone counts `$server_name`). Each allows `max` requests an `interval`, far above any load
/// here, as opbound's bounds do.
fn pingap_conf(dir: &Path, workers: usize, upstream: SocketAddr, plain: u16, limited: u16) -> String {
    let dir = dir.display();
    let never = "type = \"rate\"\nmax = 1000000000";
    format!(
        r#"[basic]
threads = {workers}
work_stealing = false
log_level = "warn"
pid_file = "{dir}/pingap.pid"
upgrade_sock = "{dir}/upgrade.sock"

[upstreams.u]
addrs = ["{upstream}"]

[locations.plain]
upstream = "u"

[locations.limited]
upstream = "u"
plugins = ["perAddress", "perKey", "perRoute"]

[servers.plain]
addr = "127.0.0.1:{plain}"
locations = ["plain"]

[servers.limited]
addr = "127.0.0.1:{limited}"
locations = ["limited"]

[plugins.perAddress]
category = "limit"
tag = "ip"
interval = "1m"
{never}

[plugins.perKey]
category = "limit"
tag = "header"
key = "X-Api-Key"
interval = "1m"
{never}

[plugins.perRoute]
category = "limit"
tag = "header"
key = "Host"
interval = "1s"
{never}
"#
    )
}

impl Drop for Pingap {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

/// Whether `binary`'s `sub` command takes `--workers` (it is new; an older baseline lacks it).
fn has_workers(binary: &str, sub: &str) -> bool {
    let help = Command::new(binary).args([sub, "--help"]).output().expect("opbound runs");
    String::from_utf8_lossy(&help.stdout).contains("--workers")
}

/// An opbound binary and how to start it in one placement.
struct Opbound<'a> {
    binary: &'a str,
    cpus: Option<&'a str>,
    /// `--workers`, when the binary has it.
    workers: Option<usize>,
}

impl Opbound<'_> {
    /// Runs `opbound sub --spec <spec> args...` and waits for the log line saying where it listens.
    fn start(&self, sub: &str, spec: &str, dir: &Path, name: &str, args: &[&str]) -> (Killed, SocketAddr) {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, spec).unwrap();
        let mut command = pinned(self.cpus, self.binary);
        command.args([sub, "--spec", path.to_str().unwrap(), "--listen", "127.0.0.1:0", "--log-format", "json"]);
        command.args(args);
        if let Some(n) = self.workers {
            command.args(["--workers", &n.to_string()]);
        }
        let mut child = command
            .env("OPBOUND_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("opbound starts");
        let stderr = child.stderr.take().unwrap();
        let ready = if sub == "decide" { "deciding" } else { "serving" };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v["fields"]["message"] == ready
                    && let Some(a) = v["fields"]["listen"].as_str().and_then(|a| a.parse::<SocketAddr>().ok())
                {
                    let _ = tx.send(a);
                } else if v["level"] == "ERROR"
                    || (v["level"] == "WARN"
                        && !v["fields"]["message"].as_str().is_some_and(|m| m.starts_with("warning: ")))
                {
                    // The spec's findings (`warning: ...`) are expected for these specs; what the
                    // server says about its settings is not.
                    eprintln!("opbound: {line}");
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(20)).expect("opbound listens");
        (Killed(child), addr)
    }

    fn serve(&self, spec: &str, upstream: SocketAddr, dir: &Path, name: &str) -> (Killed, SocketAddr) {
        self.start("serve", spec, dir, name, &["--upstream", &format!("http://{upstream}")])
    }
}

/// One wrk run's results.
#[derive(Clone, Copy)]
struct Run {
    rps: f64,
    p99_ms: f64,
    /// The server's CPU time during the run over the requests wrk completed, in microseconds.
    cpu_us: f64,
}

/// The CPU time (user and system, every thread) spent so far by `root` and every process under
/// it, in clock ticks. Read from `/proc/*/stat`: a process's parent is its fourth field, its
/// times the fourteenth and fifteenth (counted after the command name, which may hold spaces).
fn cpu_ticks(root: u32) -> u64 {
    let mut procs: Vec<(u32, u32, u64)> = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state (3), ppid (4), ..., utime (14), stime (15).
        let (Some(ppid), Some(utime), Some(stime)) = (fields.get(1), fields.get(11), fields.get(12)) else { continue };
        let (Ok(ppid), Ok(utime), Ok(stime)) = (ppid.parse(), utime.parse::<u64>(), stime.parse::<u64>()) else {
            continue;
        };
        procs.push((pid, ppid, utime + stime));
    }
    let mut tree = vec![root];
    let mut total = 0;
    while let Some(pid) = tree.pop() {
        for &(child, parent, ticks) in &procs {
            if child == pid {
                total += ticks;
            }
            if parent == pid {
                tree.push(child);
            }
        }
    }
    total
}

/// How wrk is run in a placement: the same for every target there.
struct Wrk<'a> {
    placement: &'a Placement,
    seconds: u32,
    /// Clock ticks a second.
    ticks: f64,
}

impl Wrk<'_> {
    fn describe(&self) -> String {
        let p = self.placement;
        format!("taskset -c {} wrk --latency -t{} -c{} -d{}s", p.cpus, p.wrk_threads, p.wrk_connections, self.seconds)
    }

    /// Runs wrk once (with a Lua script, when given) and checks that every answer was a 2xx.
    /// `server` is the process whose CPU time (with its children's) is charged to the run.
    fn run(&self, url: &str, script: Option<&Path>, seconds: u32, server: u32) -> Run {
        let p = self.placement;
        let mut command = pinned(Some(p.cpus), "wrk");
        command.args(["--latency", &format!("-t{}", p.wrk_threads), &format!("-c{}", p.wrk_connections)]);
        command.arg(format!("-d{seconds}s"));
        for h in HEADERS {
            command.args(["-H", h]);
        }
        if let Some(script) = script {
            command.arg("-s").arg(script);
        }
        let before = cpu_ticks(server);
        let out = command.arg(url).output().expect("wrk runs");
        let spent = cpu_ticks(server).saturating_sub(before) as f64 / self.ticks;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("Non-2xx"), "every request must be answered with a 2xx ({url}): {text}");
        let rps = text
            .lines()
            .find_map(|l| l.strip_prefix("Requests/sec:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no Requests/sec from wrk ({url}): {text}"));
        let p99_ms = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("99%"))
            .and_then(|v| milliseconds(v.trim()))
            .unwrap_or_else(|| panic!("no 99% latency from wrk ({url}): {text}"));
        let requests: f64 = text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in"))
            .and_then(|(n, _)| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no request count from wrk ({url}): {text}"));
        Run { rps, p99_ms, cpu_us: spent * 1e6 / requests.max(1.0) }
    }
}

/// Something wrk measures.
struct Target {
    /// A short name the ratios refer to.
    key: &'static str,
    label: &'static str,
    url: String,
    script: Option<PathBuf>,
    /// The process (with those under it) that answers it: its CPU time is the target's cost.
    server: u32,
    /// Whether the paced latency round includes it (the GET targets do).
    paced: bool,
}

/// One placement's rounds, per target key: every run, and the medians.
struct Medians(Vec<(&'static str, Run, Vec<Run>)>);

impl Medians {
    fn get(&self, key: &str) -> Run {
        self.runs(key).0
    }

    fn runs(&self, key: &str) -> (Run, &[Run]) {
        self.0
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|(_, m, r)| (*m, &r[..]))
            .unwrap_or_else(|| panic!("no target {key}"))
    }

    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, ..)| *k == key)
    }

    /// The median of the ratios round by round: the two runs of a round are seconds apart, so
    /// the VM's drift from one minute to the next, larger here than the differences measured,
    /// moves both alike.
    fn rps_ratio(&self, a: &str, b: &str) -> f64 {
        let (a, b) = (self.runs(a).1, self.runs(b).1);
        median(a.iter().zip(b).map(|(a, b)| a.rps / b.rps).collect())
    }

    /// [`rps_ratio`](Self::rps_ratio) with the lowest and highest ratio of a round beside it:
    /// how far one round may be from the median.
    fn rps_spread(&self, a: &str, b: &str) -> String {
        let (runs_a, runs_b) = (self.runs(a).1, self.runs(b).1);
        let ratios = runs_a.iter().zip(runs_b).map(|(a, b)| a.rps / b.rps);
        let (low, high) = ratios.fold((f64::INFINITY, 0.0f64), |(l, h), r| (l.min(r), h.max(r)));
        format!("{:.2}  (rounds {low:.2} to {high:.2})", self.rps_ratio(a, b))
    }

    /// The same for the server's CPU time a request.
    fn cpu_ratio(&self, a: &str, b: &str) -> f64 {
        let (a, b) = (self.runs(a).1, self.runs(b).1);
        median(a.iter().zip(b).map(|(a, b)| a.cpu_us / b.cpu_us).collect())
    }

    /// The same for p99 latencies.
    fn p99_ratio(&self, a: &str, b: &str) -> f64 {
        let (a, b) = (self.runs(a).1, self.runs(b).1);
        median(a.iter().zip(b).map(|(a, b)| a.p99_ms / b.p99_ms).collect())
    }
}

/// Runs every target round after round, and keeps every run and the median of each.
fn rounds(wrk: &Wrk, targets: &[&Target], rounds: usize, script: impl Fn(&Target) -> Option<PathBuf>) -> Medians {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (i, t) in targets.iter().enumerate() {
            runs[i].push(wrk.run(&t.url, script(t).as_deref(), wrk.seconds, t.server));
        }
    }
    Medians(
        targets
            .iter()
            .zip(runs)
            .map(|(t, runs)| {
                let rps = median(runs.iter().map(|r| r.rps).collect());
                let p99_ms = median(runs.iter().map(|r| r.p99_ms).collect());
                let cpu_us = median(runs.iter().map(|r| r.cpu_us).collect());
                (t.key, Run { rps, p99_ms, cpu_us }, runs)
            })
            .collect(),
    )
}

/// Measures one placement and prints what it found; returns the throughput medians.
fn placement(
    tools: &Tools,
    settings: &Settings,
    p: &Placement,
    dir: &Path,
    current: &str,
    baseline: Option<&str>,
) -> Medians {
    let dir = dir.join(p.name.replace(' ', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    let cpus = Some(p.cpus);
    let (upstream_server, upstream) = Nginx::upstream(tools, cpus, p.workers, &dir);
    let (gateway, plain, limited) = Nginx::gateway(tools, cpus, p.workers, &dir, upstream);
    let pingap = tools.pingap.as_deref().map(|binary| Pingap::gateway(binary, cpus, p.workers, &dir, upstream));

    let workers = |binary: &str, name: &str| {
        if has_workers(binary, "serve") && has_workers(binary, "decide") {
            Some(p.workers)
        } else {
            println!("  ({name} has no --workers: it runs as it chooses on {})", p.name);
            None
        }
    };
    let this = Opbound { binary: current, cpus, workers: workers(current, "this build") };
    let (open_server, open) = this.serve(OPEN, upstream, &dir, "open");
    let (bounded_server, bounded) = this.serve(BOUNDED, upstream, &dir, "bounded");
    let nginx_gateway = ["--gateway", "nginx", "--trusted-proxy", "127.0.0.1"];
    let (decide_server, decide) = this.start("decide", BOUNDED, &dir, "decide", &nginx_gateway);
    let mut targets = vec![
        Target {
            key: "direct",
            label: "direct to the upstream",
            url: format!("http://{upstream}/items/7"),
            server: upstream_server.0.id(),
            script: None,
            paced: true,
        },
        Target {
            key: "nginx",
            label: "nginx proxy_pass",
            url: format!("http://127.0.0.1:{plain}/items/7"),
            server: gateway.0.id(),
            script: None,
            paced: true,
        },
        Target {
            key: "nginx+limit",
            label: "nginx + 3 limit_req",
            url: format!("http://127.0.0.1:{limited}/items/7"),
            server: gateway.0.id(),
            script: None,
            paced: true,
        },
    ];
    if let Some((pingap, plain, limited)) = &pingap {
        targets.push(Target {
            key: "pingap",
            label: "pingap proxy",
            url: format!("http://127.0.0.1:{plain}/items/7"),
            server: pingap.0.id(),
            script: None,
            paced: false,
        });
        targets.push(Target {
            key: "pingap+limit",
            label: "pingap + 3 limit plugins",
            url: format!("http://127.0.0.1:{limited}/items/7"),
            server: pingap.0.id(),
            script: None,
            // Kept out so that its throughput, likely the lowest, does not set the paced load.
            paced: false,
        });
    }
    targets.extend([
        Target {
            key: "open",
            label: "serve, no bounds",
            url: format!("http://{open}/items/7"),
            server: open_server.0.id(),
            script: None,
            paced: true,
        },
        Target {
            key: "bounded",
            label: "serve, 3 bounds",
            url: format!("http://{bounded}/items/7"),
            server: bounded_server.0.id(),
            script: None,
            paced: true,
        },
        Target {
            key: "decide",
            label: "decide, 3 bounds",
            url: format!("http://{decide}/_opbound"),
            server: decide_server.0.id(),
            script: None,
            paced: true,
        },
    ]);
    let mut children = Vec::new();
    if p.post {
        let (body_child, body) = this.serve(BODY, upstream, &dir, "body");
        let body_server = body_child.0.id();
        children.push(body_child);
        let post = dir.join("post.lua");
        std::fs::write(&post, POST).unwrap();
        targets.push(Target {
            key: "post-address",
            label: "POST, per address",
            url: format!("http://{body}/plain"),
            server: body_server,
            script: Some(post.clone()),
            paced: false,
        });
        targets.push(Target {
            key: "post-json",
            label: "POST, per json:/username",
            url: format!("http://{body}/login"),
            server: body_server,
            script: Some(post),
            paced: false,
        });
    }
    if let Some(binary) = baseline {
        let old = Opbound { binary, cpus, workers: workers(binary, "the baseline") };
        let (a, open) = old.serve(OPEN, upstream, &dir, "baseline-open");
        let (b, bounded) = old.serve(BOUNDED, upstream, &dir, "baseline-bounded");
        let (open_server, bounded_server) = (a.0.id(), b.0.id());
        children.extend([a, b]);
        let url = |a: SocketAddr| format!("http://{a}/items/7");
        targets.push(Target {
            key: "base-open",
            label: "baseline serve, no bounds",
            url: url(open),
            server: open_server,
            script: None,
            paced: false,
        });
        targets.push(Target {
            key: "base-bounded",
            label: "baseline serve, 3 bounds",
            url: url(bounded),
            server: bounded_server,
            script: None,
            paced: false,
        });
    }

    let wrk = Wrk { placement: p, seconds: settings.seconds, ticks: tools.ticks };
    for t in &targets {
        wrk.run(&t.url, t.script.as_deref(), 1, t.server); // warm-up
    }
    let all: Vec<&Target> = targets.iter().collect();
    let m = rounds(&wrk, &all, settings.rounds, |t| t.script.clone());
    println!(
        "{}: every process under taskset -c {}, nginx worker_processes {}, {}; {} rounds, medians (lowest to highest round):",
        p.name,
        p.cpus,
        p.workers,
        wrk.describe(),
        settings.rounds
    );
    for t in &targets {
        let (r, runs) = m.runs(t.key);
        let (low, high) = runs.iter().fold((f64::INFINITY, 0.0f64), |(l, h), r| (l.min(r.rps), h.max(r.rps)));
        println!(
            "  {:<26} {:>9.0} requests/s ({low:.0} to {high:.0})   p99 {:>7.2} ms   server CPU {:>6.2} us/request",
            t.label, r.rps, r.p99_ms, r.cpu_us
        );
    }
    println!("  serve 3 bounds / nginx + limit_req:     {}", m.rps_spread("bounded", "nginx+limit"));
    println!("  serve 3 bounds / serve no bounds:       {}, the limiter tax", m.rps_spread("bounded", "open"));
    println!("  decide / serve 3 bounds:                {:.2}", m.rps_ratio("decide", "bounded"));
    println!("  nginx + limit_req / nginx proxy_pass:   {:.2}", m.rps_ratio("nginx+limit", "nginx"));
    if m.has("pingap+limit") {
        println!("  serve 3 bounds / pingap + 3 limit:      {}", m.rps_spread("bounded", "pingap+limit"));
        println!("  pingap + 3 limit / pingap proxy:        {:.2}", m.rps_ratio("pingap+limit", "pingap"));
    }
    println!(
        "  server CPU a request, serve 3 bounds / nginx + limit_req: {:.2}; serve 3 bounds / no bounds: {:.2}",
        m.cpu_ratio("bounded", "nginx+limit"),
        m.cpu_ratio("bounded", "open")
    );
    if m.has("pingap+limit") {
        println!(
            "  server CPU a request, serve 3 bounds / pingap + 3 limit: {:.2}",
            m.cpu_ratio("bounded", "pingap+limit")
        );
    }
    println!(
        "  p99, serve 3 bounds vs nginx + limit_req: {:.2} ms vs {:.2} ms ({:.2}x)",
        m.get("bounded").p99_ms,
        m.get("nginx+limit").p99_ms,
        m.p99_ratio("bounded", "nginx+limit")
    );
    if m.has("post-json") {
        println!("  POST body key / per address:            {:.2}", m.rps_ratio("post-json", "post-address"));
    }
    if m.has("base-bounded") {
        println!("  this build / baseline, no bounds:       {:.2}", m.rps_ratio("open", "base-open"));
        println!("  this build / baseline, 3 bounds:        {:.2}", m.rps_ratio("bounded", "base-bounded"));
    }
    paced(&wrk, &targets, &m, settings, &dir);
    drop(children);
    m
}

/// The GET targets again, each connection waiting between requests so that every target gets
/// about the same offered load: half of what the slowest of them managed, which all can carry.
fn paced(wrk: &Wrk, targets: &[Target], m: &Medians, settings: &Settings, dir: &Path) {
    let paced: Vec<&Target> = targets.iter().filter(|t| t.paced).collect();
    let slowest = paced.iter().map(|t| m.get(t.key).rps).fold(f64::INFINITY, f64::min);
    let connections = f64::from(wrk.placement.wrk_connections);
    // wrk's delay() is in whole milliseconds; each connection sends at most 1000/delay a second.
    let delay_ms = (connections * 1000.0 / (slowest / 2.0)).ceil().max(1.0) as u64;
    let script = dir.join("paced.lua");
    std::fs::write(&script, format!("function delay()\n  return {delay_ms}\nend\n")).unwrap();
    let r = rounds(wrk, &paced, settings.rounds, |_| Some(script.clone()));
    println!(
        "  paced: each of the {} connections waits {delay_ms} ms between requests, offering at most {:.0} requests/s \
         (half the slowest target's throughput is {:.0}); p99 medians:",
        wrk.placement.wrk_connections,
        connections * 1000.0 / delay_ms as f64,
        slowest / 2.0
    );
    for t in &paced {
        let run = r.get(t.key);
        println!("    {:<26} {:>7.2} ms at a measured {:>7.0} requests/s", t.label, run.p99_ms, run.rps);
    }
    println!("  paced p99, serve 3 bounds / nginx + limit_req: {:.2}", r.p99_ratio("bounded", "nginx+limit"));
}

/// How many idle connections the memory measurement holds, and its goal for their growth.
const IDLE_CONNECTIONS: usize = 10_000;
const IDLE_SOURCES: usize = 100;
const IDLE_GOAL_MIB: f64 = 64.0;

/// Sends one GET on a kept-alive connection and reads the whole answer; returns its status.
async fn exchange(stream: &mut tokio::net::TcpStream) -> std::io::Result<u16> {
    use std::io::{Error, ErrorKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"GET /items/7 HTTP/1.1\r\nHost: bench\r\nX-Api-Key: bench\r\n\r\n").await?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let bad = |what: &str| Error::new(ErrorKind::InvalidData, what.to_string());
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(Error::new(ErrorKind::UnexpectedEof, "closed before the answer ended"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("a head that is not text"))?;
        let status = head.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| bad(head))?;
        let length = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok())?
        });
        let complete = |buf: &[u8]| match length {
            Some(length) => buf.len() >= end + 4 + length,
            None => buf.ends_with(b"0\r\n\r\n"),
        };
        while !complete(&buf) {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(Error::new(ErrorKind::UnexpectedEof, "closed in the body"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Ok(status);
    }
}

/// One request on each connection, at most `parallel` at a time; every answer must be a 200.
async fn one_request_each(streams: Vec<tokio::net::TcpStream>, parallel: usize) -> Vec<tokio::net::TcpStream> {
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel));
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let permits = permits.clone();
            tokio::spawn(async move {
                let _permit = permits.acquire().await.unwrap();
                let status = exchange(&mut stream).await.expect("an answer on a kept-alive connection");
                assert_eq!(status, 200);
                stream
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("every connection answered 200"));
    }
    out
}

/// Memory of idle keep-alive connections: `opbound serve` with the three bounds holds 10,000 of
/// them, each after one request, spread over 100 loopback source addresses so that the
/// per-address cap (256 by default) is not what limits them.
fn idle_connections(tools: &Tools, dir: &Path, current: &str) {
    // Each side holds a descriptor per connection, opbound one more per upstream connection.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("idle connections: the descriptor limit could not be raised ({e})");
    }
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    if soft < (IDLE_CONNECTIONS + 1000) as u64 {
        println!("idle connections: skipped, {IDLE_CONNECTIONS} connections need a descriptor limit above {soft}");
        return;
    }
    let dir = dir.join("idle");
    std::fs::create_dir_all(&dir).unwrap();
    let (_upstream, upstream) = Nginx::upstream(tools, None, 1, &dir);
    let this = Opbound { binary: current, cpus: None, workers: None };
    let (server, addr) = this.start(
        "serve",
        BOUNDED,
        &dir,
        "idle",
        &["--upstream", &format!("http://{upstream}"), "--max-connections", "12000"],
    );
    let pid = server.0.id();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // One request first, so what opbound builds on its first request is not counted.
        let mut warm = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert_eq!(exchange(&mut warm).await.unwrap(), 200);
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_kib(pid);

        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
        let connects: Vec<_> = (0..IDLE_CONNECTIONS)
            .map(|i| {
                let permits = permits.clone();
                tokio::spawn(async move {
                    let _permit = permits.acquire().await.unwrap();
                    let source = Ipv4Addr::new(127, 0, 0, 2 + (i % IDLE_SOURCES) as u8);
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.bind(SocketAddr::from((source, 0))).expect("a loopback source address");
                    socket.connect(addr).await.expect("opbound accepts")
                })
            })
            .collect();
        let mut streams = Vec::with_capacity(IDLE_CONNECTIONS);
        for c in connects {
            streams.push(c.await.unwrap());
        }
        let streams = one_request_each(streams, 256).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib(pid);
        let growth = after.saturating_sub(before) as f64 / 1024.0;
        println!(
            "idle connections: opbound serve (3 bounds, --max-connections 12000) holding {IDLE_CONNECTIONS} keep-alive \
             connections from {IDLE_SOURCES} loopback addresses, each after one GET answered 200:"
        );
        println!(
            "  VmRSS {:.1} MiB before, {:.1} MiB after: +{growth:.1} MiB, {:.1} KiB a connection (goal: at most +{IDLE_GOAL_MIB:.0} MiB{})",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            (after.saturating_sub(before)) as f64 / IDLE_CONNECTIONS as f64,
            if growth <= IDLE_GOAL_MIB { ", met" } else { ", NOT met" }
        );
        let streams = one_request_each(streams, 256).await;
        println!("  a second GET on every one of the {} connections: all answered 200", streams.len());
    });
    drop(server);
    idle_http2_connections(&dir, upstream, current, &rt);
}

/// Memory of idle h2c connections, which cannot be parked: a fresh `opbound serve` with the
/// default `--max-idle-http2-connections`, 10,000 h2c clients asking once each, RSS once those
/// over the budget could have been closed; then a second GET from every client, over a new
/// connection where its old one was closed.
fn idle_http2_connections(dir: &Path, upstream: SocketAddr, current: &str, rt: &tokio::runtime::Runtime) {
    type Sender = hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>;
    let this = Opbound { binary: current, cpus: None, workers: None };
    let (server, addr) = this.start(
        "serve",
        BOUNDED,
        dir,
        "idle-h2",
        &["--upstream", &format!("http://{upstream}"), "--max-connections", "12000"],
    );
    let pid = server.0.id();
    /// A new h2c connection from the `i`th client's source address.
    async fn connect(addr: SocketAddr, i: usize) -> Sender {
        let source = Ipv4Addr::new(127, 0, 0, 2 + (i % IDLE_SOURCES) as u8);
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((source, 0))).expect("a loopback source address");
        let stream = socket.connect(addr).await.expect("opbound accepts");
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .expect("an h2c handshake");
        tokio::spawn(connection);
        sender
    }
    /// The status of a GET, or `None` when the connection was closed before it was answered
    /// (a GOAWAY crossing the request: it was not processed, and is sent again, as h2 clients do).
    async fn get(sender: &mut Sender, addr: SocketAddr) -> Option<u16> {
        let request = http::Request::get(format!("http://{addr}/items/7"))
            .header("x-api-key", "bench")
            .body(http_body_util::Empty::new())
            .unwrap();
        let response = sender.send_request(request).await.ok()?;
        let status = response.status().as_u16();
        http_body_util::BodyExt::collect(response.into_body()).await.expect("a whole body");
        Some(status)
    }
    /// Every client asks once, 256 at a time; a client whose connection was closed reconnects.
    async fn ask_each(senders: Vec<Option<Sender>>, addr: SocketAddr) -> (Vec<Option<Sender>>, usize) {
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
        let tasks: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(i, sender)| {
                let permits = permits.clone();
                tokio::spawn(async move {
                    let _permit = permits.acquire().await.unwrap();
                    let (mut sender, mut new) = match sender {
                        Some(s) if !s.is_closed() => (s, false),
                        _ => (connect(addr, i).await, true),
                    };
                    let mut status = get(&mut sender, addr).await;
                    if status.is_none() && !new {
                        (sender, new) = (connect(addr, i).await, true);
                        status = get(&mut sender, addr).await;
                    }
                    assert_eq!(status, Some(200));
                    (Some(sender), new)
                })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        let mut reconnected = 0;
        for t in tasks {
            let (sender, new) = t.await.expect("every client answered 200");
            out.push(sender);
            reconnected += usize::from(new);
        }
        (out, reconnected)
    }
    rt.block_on(async {
        let mut warm = connect(addr, 0).await;
        assert_eq!(get(&mut warm, addr).await, Some(200));
        drop(warm);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = rss_kib(pid);
        let (senders, _) = ask_each((0..IDLE_CONNECTIONS).map(|_| None).collect(), addr).await;
        // Idle for a second is when a connection counts against the budget.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let after = rss_kib(pid);
        let open = senders.iter().flatten().filter(|s| !s.is_closed()).count();
        let growth = after.saturating_sub(before) as f64 / 1024.0;
        println!(
            "idle h2c connections: a new opbound serve (default --max-idle-http2-connections), {IDLE_CONNECTIONS} h2c \
             clients, each after one GET answered 200:"
        );
        println!(
            "  VmRSS {:.1} MiB before, {:.1} MiB after: +{growth:.1} MiB (goal: at most +{IDLE_GOAL_MIB:.0} MiB{}); {open} \
             connections still open, the rest closed with a GOAWAY",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            if growth <= IDLE_GOAL_MIB { ", met" } else { ", NOT met" }
        );
        let (senders, reconnected) = ask_each(senders, addr).await;
        println!(
            "  a second GET from every one of the {} clients: all answered 200 ({reconnected} over a new connection)",
            senders.len()
        );
    });
}

fn main() {
    // `cargo test --all-targets` runs this too, without `--bench`: only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // Installed when missing, as the test command (.ci/test) installs what the tests run.
    let mut tools = match Tools::find().or_else(|missing| {
        install(missing, &PACKAGES);
        Tools::find()
    }) {
        Ok(tools) => tools,
        Err(missing) => {
            eprintln!("the proxy benchmark needs {missing} (apt-get install wrk nginx util-linux); skipped");
            return;
        }
    };
    let settings = Settings::from_env();
    let dir = std::env::temp_dir().join(format!("opbound-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Another build to measure as this one: an A/B of a build setting (say, LTO) on one commit.
    let current = match std::env::var("OPBOUND_BENCH_CURRENT") {
        Ok(binary) => {
            println!("this build: {binary} (OPBOUND_BENCH_CURRENT)");
            binary
        }
        Err(_) => env!("CARGO_BIN_EXE_opbound").to_string(),
    };
    let baseline = std::env::var("OPBOUND_BENCH_BASELINE").ok();
    let part = std::env::var("OPBOUND_BENCH_PART").ok();
    if part.as_deref() != Some("idle") {
        tools.pingap = find_pingap();
        load(&tools, &settings, &dir, &current, baseline.as_deref());
    }
    if part.as_deref() != Some("load") {
        idle_connections(&tools, &dir, &current);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The throughput and latency rounds, on one CPU and then on two, and how each target scales.
fn load(tools: &Tools, settings: &Settings, dir: &Path, current: &str, baseline: Option<&str>) {
    println!("every GET target gets the same headers: {}", HEADERS.join(", "));
    let one = placement(tools, settings, &ONE_CPU, dir, current, baseline);
    let two = placement(tools, settings, &TWO_CPUS, dir, current, baseline);
    // Pingap's only when both placements measured it.
    let pingap =
        [("pingap+limit", "pingap + 3 limit plugins")].into_iter().filter(|(key, _)| one.has(key) && two.has(key));
    println!("scaling, two CPUs / one CPU (requests/s):");
    let measured = [("bounded", "serve, 3 bounds"), ("nginx+limit", "nginx + 3 limit_req")];
    for (key, label) in measured.into_iter().chain(pingap.clone()).chain([("direct", "direct")]) {
        println!("  {label:<26} {:.2}", two.get(key).rps / one.get(key).rps);
    }
    // wrk and the upstream share the two CPUs, so the throughput above cannot show what a second
    // worker adds; what a request costs the server in CPU time can.
    println!("scaling projected from the server's CPU time a request, 2 x one CPU / two CPUs:");
    for (key, label) in measured.into_iter().chain(pingap).chain([("decide", "decide")]) {
        let (one, two) = (one.get(key).cpu_us, two.get(key).cpu_us);
        println!("  {label:<26} {:.2}  ({one:.2} us a request on one CPU, {two:.2} on two)", 2.0 * one / two);
    }
}
