//! What the end-to-end tests share: the real binary started on a free loopback port, and a real
//! upstream server that records what reaches it.
#![allow(dead_code)]

pub mod apps;

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Semaphore, mpsc};

/// A running `opbound` process, killed when dropped.
pub struct Opbound {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Opbound {
    /// Starts `opbound ARGS --listen 127.0.0.1:0 --log-format json` and waits for the line that
    /// says where it listens.
    pub fn start(args: &[&str]) -> Opbound {
        Opbound::start_with(&[], args, true, Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// Starts `opbound ARGS --log-format json`, listening where its defaults say: for commands
    /// the book shows as they are written.
    pub fn start_as_written(args: &[&str]) -> Opbound {
        Opbound::start_with(&[], args, false, Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// Like `start_as_written`, run from `dir`, so the files a command names are found there.
    pub fn start_in(dir: &Path, args: &[&str]) -> Opbound {
        Opbound::start_with(&[], args, false, dir)
    }

    /// Like `start`, with the binary run by a wrapper: `["prlimit", "--nofile=128:256"]` starts
    /// it under other descriptor limits (prlimit execs it, so the pid is opbound's own).
    pub fn start_under(wrapper: &[&str], args: &[&str]) -> Opbound {
        Opbound::start_with(wrapper, args, true, Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    fn start_with(wrapper: &[&str], args: &[&str], free_port: bool, dir: &Path) -> Opbound {
        let listen: &[&str] = if free_port { &["--listen", "127.0.0.1:0"] } else { &[] };
        let binary = env!("CARGO_BIN_EXE_opbound");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(args)
            .args(listen)
            .args(["--log-format", "json"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("opbound starts");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = listen_addr(&line)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr);
                }
                keep.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let mut out = String::new();
                let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
                panic!("opbound did not start: {:?}\n{out}", lines.lock().unwrap());
            }
        };
        Opbound { child, addr, stderr: lines }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The admin listener's address, from its log line.
    pub fn admin(&self) -> Option<SocketAddr> {
        self.stderr.lock().unwrap().iter().find_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v["fields"]["message"] == "admin listening").then(|| v["fields"]["admin"].as_str()?.parse().ok())?
        })
    }

    /// Where the gRPC services listen, from their log line.
    pub fn grpc(&self) -> Option<SocketAddr> {
        self.logged_at_least("deciding over gRPC", 1).iter().find_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v["fields"]["message"] == "deciding over gRPC").then(|| v["fields"]["grpc"].as_str()?.parse().ok())?
        })
    }

    /// Log lines containing `needle`, once at least `n` have arrived (the log is read by another
    /// thread, so a line can trail the response it is about), or after five seconds.
    pub fn logged_at_least(&self, needle: &str, n: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let lines = self.logged(needle);
            if lines.len() >= n || std::time::Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Log lines containing `needle`.
    pub fn logged(&self, needle: &str) -> Vec<String> {
        self.stderr.lock().unwrap().iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Sends SIGTERM and returns the whole log once the line saying it stops has been read, so
    /// every line written before it is there too.
    pub fn stop_and_read_log(&self) -> Vec<String> {
        self.terminate();
        let stopping = self.logged_at_least("\"stopping", 1);
        assert!(!stopping.is_empty(), "opbound logged no stop: {:?}", self.stderr.lock().unwrap());
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
    }
}

impl Drop for Opbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `listen` field of the json log line that announces the listener.
fn listen_addr(line: &str) -> Option<SocketAddr> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let fields = v.get("fields")?;
    let field = match fields.get("message")?.as_str()? {
        "serving" | "deciding" => "listen",
        "deciding over gRPC" => "grpc",
        _ => return None,
    };
    fields.get(field)?.as_str()?.parse().ok()
}

/// A request the upstream received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, as received.
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// A real HTTP server on loopback that records every request. `/hold/...` waits for a permit
/// from `release` before answering; `/stream/...` sends its body in two parts with a permit
/// between them; `/big/N` answers N bytes; `/ws` accepts a protocol switch and echoes bytes;
/// anything else answers 200.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections ever accepted.
    pub connections: Arc<AtomicUsize>,
    /// Connections open now: down by one when a client closes its connection.
    pub open: Arc<AtomicUsize>,
    pub release: Arc<Semaphore>,
    /// Signalled when a request reaches a `/hold` or `/stream` handler.
    pub arrived: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Semaphore::new(0));
        let (arrived_tx, arrived_rx) = mpsc::unbounded_channel();
        let (s, c, o, r) = (seen.clone(), connections.clone(), open.clone(), release.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                c.fetch_add(1, Ordering::SeqCst);
                o.fetch_add(1, Ordering::SeqCst);
                let (s, o, r, a) = (s.clone(), o.clone(), r.clone(), arrived_tx.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(req, s.clone(), r.clone(), a.clone()));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Upstream { addr, seen, connections, open, release, arrived: tokio::sync::Mutex::new(arrived_rx) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn targets(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|s| s.target.clone()).collect()
    }

    /// Waits until a held request has reached the upstream.
    pub async fn wait_arrival(&self) -> String {
        let mut rx = self.arrived.lock().await;
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a request arrives in time")
            .expect("the upstream runs")
    }
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn handle(
    mut req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Semaphore>,
    arrived: mpsc::UnboundedSender<String>,
) -> Result<Response<UpBody>, Infallible> {
    let target = req.uri().path_and_query().map_or("/".to_string(), |p| p.to_string());
    let method = req.method().to_string();
    let headers = req.headers().clone();
    if req.uri().path() == "/ws" {
        let upgrade = hyper::upgrade::on(&mut req);
        seen.lock().unwrap().push(Seen { method, target, headers, body: Bytes::new() });
        tokio::spawn(async move {
            if let Ok(upgraded) = upgrade.await {
                let mut io = TokioIo::new(upgraded);
                let mut buf = [0u8; 1024];
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        });
        let r = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("upgrade", "echo")
            .header("connection", "upgrade")
            .body(Full::new(Bytes::new()).boxed())
            .unwrap();
        return Ok(r);
    }
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    seen.lock().unwrap().push(Seen { method, target: target.clone(), headers, body });
    if target.starts_with("/hold") {
        let _ = arrived.send(target.clone());
        release.acquire().await.unwrap().forget();
    }
    if let Some(size) = target.strip_prefix("/big/").and_then(|n| n.parse::<usize>().ok()) {
        // A body larger than the sockets between here and the client hold.
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; size])).boxed()));
    }
    if target.starts_with("/stream") {
        let _ = arrived.send(target.clone());
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
        tokio::spawn(async move {
            let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"first part,")))).await;
            release.acquire().await.unwrap().forget();
            let _ = tx.send(Ok(Frame::data(Bytes::from_static(b" second part")))).await;
        });
        let stream = tokio_stream_from(rx);
        return Ok(Response::new(StreamBody::new(stream).boxed()));
    }
    Ok(Response::new(Full::new(Bytes::from(format!("ok {target}"))).boxed()))
}

/// An mpsc receiver as a stream of frames, without another dependency.
fn tokio_stream_from(
    rx: mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    struct S(mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);
    impl futures_core::Stream for S {
        type Item = Result<Frame<Bytes>, Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }
    S(rx)
}

/// A pooled HTTP/1.1 client.
pub fn client() -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// A response, with its body read.
pub struct Got {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
}

pub async fn send(req: Request<Full<Bytes>>) -> Got {
    let r = client().request(req).await.expect("the request completes");
    let (parts, body) = r.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Got { status: parts.status.as_u16(), headers: parts.headers, body: String::from_utf8_lossy(&body).into_owned() }
}

pub async fn get(url: impl AsRef<str>) -> Got {
    send(Request::get(url.as_ref()).body(Full::new(Bytes::new())).unwrap()).await
}

/// Sends `total` GETs with `headers` from 16 tasks, spread round-robin over `urls`: a burst of
/// concurrent requests across instances. The answers come grouped by task.
pub async fn spread(urls: &[String], headers: &[(&str, &str)], total: usize) -> Vec<Got> {
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (urls, headers) = (urls.to_vec(), headers.clone());
            tokio::spawn(async move {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let mut got = Vec::new();
                for i in (t..total).step_by(16) {
                    got.push(get_with(&urls[i % urls.len()], &headers).await);
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

pub async fn get_with(url: &str, headers: &[(&str, &str)]) -> Got {
    let mut b = Request::get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(b.body(Full::new(Bytes::new())).unwrap()).await
}

/// Sends raw bytes from a given local address and returns what comes back until the server
/// closes or `timeout` passes.
pub fn raw(from: &str, to: SocketAddr, request: &[u8], timeout: Duration) -> String {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&format!("{from}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream.set_read_timeout(Some(timeout)).unwrap();
    stream.write_all(request).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") && complete(&out) {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a raw HTTP/1.1 response with a content-length has all of its body.
fn complete(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head.lines().find_map(|l| {
        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))
    });
    length.is_some_and(|n| body.len() >= n)
}

/// A child process stopped when dropped: asked with SIGTERM first, so a server with workers
/// (nginx) takes them down with it, then killed if it lingers.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether something listens on `addr`. A connect alone can succeed with nothing listening: when
/// the kernel picks the port itself as the connection's source port, the socket connects to
/// itself (a TCP simultaneous open), and `free_port` hands out ports from that very range.
pub fn listening(addr: SocketAddr) -> bool {
    std::net::TcpStream::connect(addr).is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
}

/// Reads a response head and nothing after it (a byte at a time), as text: what follows a
/// protocol switch's head belongs to the tunnel.
pub fn read_head(stream: &mut impl std::io::Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("a whole response head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Runs `opbound ARGS` to its end (a command that prints and exits, or a start it refuses) and
/// returns its exit code, stdout and stderr; still running after ten seconds fails the test.
#[allow(dead_code)]
pub fn run_to_end(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("opbound starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (mut out, mut err) = (String::new(), String::new());
            child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code().unwrap_or(-1), out, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("opbound {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The path of a program from Debian's packages; a missing one fails the test loudly.
pub fn require(binary: &str) -> String {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let p = Path::new(dir).join(binary);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("{binary} is not installed; the README's test command (.ci/test) installs it with apt-get");
}

/// Writes a spec to a temporary file that lives as long as the returned guard.
pub struct TempSpec {
    pub path: PathBuf,
}

impl TempSpec {
    pub fn new(name: &str, text: &str) -> TempSpec {
        // Numbered: tests running at once in one binary may ask for the same name, and one's drop
        // removed the other's spec under it.
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("opbound-test-{}-{n}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("spec.yaml");
        std::fs::write(&path, text).unwrap();
        TempSpec { path }
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }

    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap()
    }
}

impl Drop for TempSpec {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir());
    }
}

/// Starts Debian's nginx answering over TLS with `cert` and `key` in `dir`, on a free port, as
/// `location` (an nginx `location` block) says.
pub async fn tls_nginx(dir: &Path, cert: &str, key: &str, location: &str) -> (Killed, u16) {
    let port = free_port();
    let prefix = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\nevents {{ worker_connections 32; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {prefix}/{cert};\n    ssl_certificate_key {prefix}/{key};\n    {location}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let log = dir.join("error.log");
    let nginx = Killed(
        Command::new(require("nginx"))
            .args([
                "-c",
                dir.join("nginx.conf").to_str().unwrap(),
                "-p",
                &prefix.to_string(),
                "-e",
                log.to_str().unwrap(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    (nginx, port)
}

/// Makes a private CA and a server certificate for `san` (`DNS:api.test,IP:127.0.0.1`) with
/// openssl in `dir`: `ca.pem`, `server.pem`, `server.key`.
pub fn tls_files(dir: &Path, san: &str) {
    let openssl = |args: &[&str]| {
        let out = Command::new(require("openssl")).args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (ca, key) = (["-keyout", "ca.key", "-out", "ca.pem"], ["-keyout", "server.key", "-out", "server.csr"]);
    openssl(
        &[&["req", "-x509", "-newkey", "rsa:2048", "-nodes"][..], &ca, &["-days", "2", "-subj", "/CN=opbound test CA"]]
            .concat(),
    );
    openssl(&[&["req", "-newkey", "rsa:2048", "-nodes"][..], &key, &["-subj", "/CN=opbound test server"]].concat());
    let ext = format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n");
    std::fs::write(dir.join("ext.cnf"), ext).unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

/// A redis-server on a free loopback port, shut down when dropped.
pub struct Redis {
    _server: Killed,
    pub port: u16,
    /// Removed when the server is gone.
    _dir: TempSpec,
}

impl Redis {
    pub fn start(name: &str, extra: &[&str]) -> Redis {
        Redis::on_port(name, free_port(), extra)
    }

    pub fn on_port(name: &str, port: u16, extra: &[&str]) -> Redis {
        let dir = TempSpec::new(&format!("redis-{name}-{port}"), "");
        let child = Command::new(require("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.dir().to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let redis = Redis { _server: Killed(child), port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis.cli(&["PING"]).trim() != "PONG" {
            assert!(Instant::now() < deadline, "redis-server did not answer on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(require("redis-cli")).args(["-p", &self.port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Calls of a command so far, from `INFO commandstats`.
    pub fn calls(&self, command: &str) -> u64 {
        let info = self.cli(&["INFO", "commandstats"]);
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Sends the server a signal (`KILL`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self._server.0.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} redis-server on {}", self.port);
    }

    /// Stops the server (by dropping it) and says which port it had.
    pub fn stop(self) -> u16 {
        self.port
    }
}

/// `../shared/specs` (or `OPBOUND_SHARED_SPECS`): the real specs the sweeps run over; `None`
/// only when `OPBOUND_SKIP_SWEEP` says to skip them knowingly, a missing folder otherwise fails.
pub fn shared_specs() -> Option<PathBuf> {
    let dir = std::env::var_os("OPBOUND_SHARED_SPECS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs"));
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var_os("OPBOUND_SKIP_SWEEP").is_some() {
        eprintln!(
            "\n!!! SWEEP SKIPPED: {} is absent and OPBOUND_SKIP_SWEEP is set; real specs were NOT checked\n",
            dir.display()
        );
        return None;
    }
    panic!(
        "{} is absent: the sweep over real specs cannot run. Set OPBOUND_SHARED_SPECS=DIR to point at the specs, or OPBOUND_SKIP_SWEEP=1 to skip it knowingly",
        dir.display()
    );
}

/// Every JSON or YAML file under `dir`, sorted.
pub fn spec_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "yaml" | "yml")) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Waits until the instance says its store is up (or down), from its admin `/metrics`.
pub async fn wait_store(ob: &Opbound, up: bool) {
    let admin = ob.admin().unwrap();
    let want = format!("opbound_store_up {}", u8::from(up));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = get(format!("http://{admin}/metrics")).await.body;
        if m.lines().any(|l| l == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the store never became {}:\n{}",
            if up { "up" } else { "down" },
            m.lines().filter(|l| l.contains("store")).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
