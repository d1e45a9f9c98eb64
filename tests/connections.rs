//! What a connection may hold, against the real binary over loopback sockets: silent and idle
//! connections are closed, open connections are capped (overall and per address) and refused
//! cleanly, a low descriptor limit starves nobody, idle upstream connections are evicted, and a
//! malformed request body is the client's fault.

mod common;

use std::time::Duration;

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
