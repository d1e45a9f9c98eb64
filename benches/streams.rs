//! Issue 54's figures: what `opbound serve` adds to a streamed response whose bound is settled
//! from the stream (`settle: json:/usage/total_tokens`, per key and model), and its memory while
//! a thousand streams are open.
//!
//! An upstream in this process answers every request with server-sent events in OpenAI's chat
//! format, 5 ms apart, each stamped with the time it was written; the client reads them directly
//! and through opbound, in alternating rounds, and reports the time to the first event and each
//! event's delay from its stamp (p50 and p99 over every event of a side). Then a thousand
//! streams at once through opbound (all from one address, so `--max-connections-per-address`
//! is raised), events 100 ms apart for 3 s: opbound's resident memory
//! before, while they are all open, and after.
//!
//! `cargo bench --bench streams`.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;

use common::{Killed, median, rss_kib};

const SPEC: &str = r#"
openapi: 3.1.0
info: {title: streams bench, version: '1'}
paths:
  /v1/chat/completions:
    post:
      operationId: chat
      requestBody: {content: {application/json: {schema: {type: object, properties: {model: {type: string}, max_tokens: {type: integer}}}}}}
      x-rate-limit:
        - per: ['header:x-api-key', json:/model]
          limit: 1000000000
          window: PT1M
          cost-from: json:/max_tokens
          max-cost: 1000
          settle: json:/usage/total_tokens
  /v1/plain/completions:
    post:
      operationId: plain
      x-rate-limit: {per: 'header:x-api-key', limit: 1000000000, window: PT1M}
"#;

fn t0() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// How a stream is answered: so many events, so far apart.
fn parse_plan(path: &str) -> (u32, u64) {
    // /v1/chat/completions?events=N&gap=MS
    let query = path.split_once('?').map_or("", |(_, q)| q);
    let get = |name: &str, default: u64| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (get("events", 20) as u32, get("gap", 5))
}

async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                    let (events, gap) = parse_plan(&request.uri().to_string());
                    let _ = request.into_body().collect().await;
                    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_millis(gap));
                        for _ in 0..events {
                            tick.tick().await;
                            let t = t0().elapsed().as_nanos();
                            let event = format!(
                                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"t\":{t},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token \"}}}}],\"usage\":null}}\n\n"
                            );
                            if tx.send(Ok(Frame::data(Bytes::from(event)))).await.is_err() {
                                return;
                            }
                        }
                        let last = format!(
                            "data: {{\"id\":\"c\",\"choices\":[],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":{events},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
                            events + 10
                        );
                        let _ = tx.send(Ok(Frame::data(Bytes::from(last)))).await;
                    });
                    let body = StreamBody::new(tokio_stream_from(rx));
                    Ok::<_, Infallible>(
                        hyper::Response::builder().header("content-type", "text/event-stream").body(body).unwrap(),
                    )
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    addr
}

/// The receiver as a stream of frames.
fn tokio_stream_from<T>(rx: tokio::sync::mpsc::Receiver<T>) -> Frames<T> {
    Frames(rx)
}

struct Frames<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for Frames<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// One stream read to its end: the time to its first byte, and each event's delay from the
/// moment it was written (milliseconds).
async fn one(url: &str, key: &str) -> (f64, Vec<f64>) {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = r#"{"model":"m","max_tokens":100,"stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let request = hyper::Request::post(url)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let sent = Instant::now();
    let response = client.request(request).await.expect("the stream starts");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let (mut first, mut delays, mut buffered) = (None, Vec::new(), Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("the stream does not break").into_data() else { continue };
        let now = t0().elapsed().as_nanos() as f64;
        first.get_or_insert_with(|| sent.elapsed().as_secs_f64() * 1e3);
        buffered.extend_from_slice(&data);
        while let Some(end) = buffered.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffered.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            if let Some(t) =
                text.split("\"t\":").nth(1).and_then(|r| r.split(',').next()).and_then(|t| t.parse::<f64>().ok())
            {
                delays.push((now - t) / 1e6);
            }
        }
    }
    (first.unwrap_or(f64::NAN), delays)
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // `cargo test --all-targets` runs this too, without `--bench`: only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let _ = rlimit::increase_nofile_limit(16384);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let _ = t0();
        let up = upstream().await;
        let dir = std::env::temp_dir().join(format!("opbound-streams-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = dir.join("spec.yaml");
        std::fs::write(&spec, SPEC).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let ob = Killed(
            Command::new(env!("CARGO_BIN_EXE_opbound"))
                .args(["serve", "--spec", spec.to_str().unwrap(), "--upstream", &format!("http://{up}")])
                .args(["--listen", &listen, "--workers", "1", "--max-connections-per-address", "4096"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("opbound starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(Instant::now() < deadline, "opbound did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let direct = format!("http://{up}/v1/chat/completions?events=20&gap=5");
        let through = format!("http://{listen}/v1/chat/completions?events=20&gap=5");

        // Latency: alternating rounds of 10 streams at once, each side's events pooled.
        let (mut sides, mut firsts) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for round in 0..20 {
            for (side, url) in [&direct, &through].into_iter().enumerate() {
                let streams: Vec<_> = (0..10)
                    .map(|i| {
                        let (url, key) = (url.clone(), format!("k{round}-{i}"));
                        tokio::spawn(async move { one(&url, &key).await })
                    })
                    .collect();
                for s in streams {
                    let (first, delays) = s.await.unwrap();
                    if round > 1 {
                        firsts[side].push(first);
                        sides[side].extend(delays);
                    }
                }
            }
        }
        println!("streams, 20 events 5 ms apart, 10 at once, 180 streams a side after warm-up:");
        println!("| | first byte p50 | first byte p99 | event delay p50 | event delay p99 |");
        println!("|---|---|---|---|---|");
        for (side, name) in ["upstream directly", "through opbound serve"].iter().enumerate() {
            println!(
                "| {name} | {:.2} ms | {:.2} ms | {:.3} ms | {:.3} ms |",
                median(firsts[side].clone()),
                percentile(firsts[side].clone(), 0.99),
                median(sides[side].clone()),
                percentile(sides[side].clone(), 0.99),
            );
        }

        // Memory: a thousand streams open at once, settled from the stream and not; resident
        // memory read three times while they are all open.
        let pid = ob.0.id();
        println!();
        println!("1,000 streams open at once (30 events 100 ms apart), opbound's resident memory (MiB):");
        println!("| bound | idle | open, at 1.0 s | at 2.0 s | at 2.8 s | after | event delay p50 | p99 |");
        println!("|---|---|---|---|---|---|---|---|");
        for (name, path) in [("settled from the stream", "chat"), ("not settled", "plain")] {
            let idle = rss_kib(pid);
            let slow = format!("http://{listen}/v1/{path}/completions?events=30&gap=100");
            let started = Instant::now();
            let streams: Vec<_> = (0..1000)
                .map(|i| {
                    let (url, key) = (slow.clone(), format!("slow-{path}-{i}"));
                    tokio::spawn(async move { one(&url, &key).await })
                })
                .collect();
            let mut open = Vec::new();
            for at in [1000, 2000, 2800] {
                tokio::time::sleep_until((started + Duration::from_millis(at)).into()).await;
                open.push(rss_kib(pid));
            }
            let mut delays = Vec::new();
            for s in streams {
                delays.extend(s.await.unwrap().1);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let after = rss_kib(pid);
            let mib = |k: u64| k as f64 / 1024.0;
            println!(
                "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} ms | {:.2} ms |",
                mib(idle),
                mib(open[0]),
                mib(open[1]),
                mib(open[2]),
                mib(after),
                median(delays.clone()),
                percentile(delays, 0.99),
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
