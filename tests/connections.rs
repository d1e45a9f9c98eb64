//! What a connection may hold, against the real binary over loopback sockets: silent and idle
//! connections are closed, open connections are capped (overall and per address) and refused
//! cleanly, a low descriptor limit starves nobody, idle upstream connections are evicted, and a
//! malformed request body is the client's fault.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{Opbound, TempSpec, Upstream, raw};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: connection tests, version: '1'}
x-rate-limit:
  - {name: perimeter, per: address, limit: 100000, window: PT1M}
paths:
  /y:
    get: {operationId: getY}
    post: {operationId: postY}
  /hold/{n}:
    get: {operationId: hold}
"#;

/// How long a test waits for what must happen within a second or two: long enough for a loaded
/// machine, and only ever spent when something is wrong.
const PATIENCE: Duration = Duration::from_secs(10);

fn serve(upstream: &str, spec: &TempSpec, extra: &[&str]) -> Opbound {
    serve_under(&[], upstream, spec, extra)
}

fn serve_under(wrapper: &[&str], upstream: &str, spec: &TempSpec, extra: &[&str]) -> Opbound {
    let mut args = vec!["serve", "--spec", spec.arg(), "--upstream", upstream];
    args.extend_from_slice(extra);
    Opbound::start_under(wrapper, &args)
}

/// Runs blocking socket work off the runtime, so the upstream in this process keeps answering.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Polls `condition` until it holds or `PATIENCE` runs out.
async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_are_evicted() {
    // Hardening issue, item 10: pool_idle_timeout without a timer evicted nothing; 237 idle
    // upstream sockets were open 90 s after a burst.
    let up = Upstream::start().await;
    let spec = TempSpec::new("upstream-idle", SPEC);
    let ob = serve(&up.url(), &spec, &["--upstream-idle-timeout", "1s"]);
    burst(&ob, &up, 8).await;
    assert!(up.open.load(Ordering::SeqCst) > 0, "the burst left idle connections to evict");
    assert!(
        eventually(|| up.open.load(Ordering::SeqCst) == 0).await,
        "{} upstream connections still open",
        up.open.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_are_capped() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("upstream-max-idle", SPEC);
    let ob = serve(&up.url(), &spec, &["--upstream-max-idle", "2", "--upstream-idle-timeout", "60s"]);
    burst(&ob, &up, 8).await;
    assert!(
        eventually(|| up.open.load(Ordering::SeqCst) <= 2).await,
        "{} idle upstream connections kept, the cap is 2",
        up.open.load(Ordering::SeqCst)
    );
}

/// `n` requests held at the upstream at once, so the proxy opens `n` upstream connections,
/// then all released and answered.
async fn burst(ob: &Opbound, up: &Upstream, n: usize) {
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let addr = ob.addr;
            tokio::spawn(blocking(move || {
                raw("127.0.0.1", addr, format!("GET /hold/{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(), PATIENCE)
            }))
        })
        .collect();
    for _ in 0..n {
        up.wait_arrival().await;
    }
    assert_eq!(up.open.load(Ordering::SeqCst), n, "one upstream connection per request in flight");
    up.release.add_permits(n);
    for r in requests {
        let answer = r.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_body_is_a_quiet_400() {
    // Hardening issue, item 11: the client's broken body was answered 502 "the upstream did not
    // answer", with a warning per request.
    let up = Upstream::start().await;
    let spec = TempSpec::new("chunked", SPEC);
    let ob = serve(&up.url(), &spec, &[]);
    let addr = ob.addr;
    let answer = blocking(move || {
        raw(
            "127.0.0.1",
            addr,
            b"POST /y HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            Duration::from_secs(5),
        )
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("malformed-request"), "{answer}");
    assert!(answer.contains("the request body is malformed"), "{answer}");
    let log = ob.stop_and_read_log();
    let warned: Vec<&String> = log.iter().filter(|l| l.contains("upstream request failed")).collect();
    assert!(warned.is_empty(), "the client's fault is not the upstream's: {warned:?}");
}
