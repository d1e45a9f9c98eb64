//! The real nginx and Caddy, from Debian's packages, asking `opbound decide` about every request,
//! with the configuration snippets the README gives. `.ci/test` installs both when missing.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Killed, Opbound, TempSpec, Upstream, free_port, get, get_with, raw, require};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: gateway tests, version: '1'}
paths:
  /limited:
    get:
      operationId: limited
      x-rate-limit: {per: address, limit: 2, window: PT1M}
  /keyed:
    get:
      operationId: keyed
      x-rate-limit: {per: 'header:X-Api-Key', limit: 5, window: PT1M, missing: reject}
"#;

/// Waits until `server` listens on `addr`; if it exits first, says why with its `log`.
async fn wait_listening(addr: SocketAddr, what: &str, server: &mut Killed, log: &Path) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("{what} exited at start: {status}\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what} did not listen on {addr}");
}

/// The README's nginx snippet, with the test's ports and a private prefix.
fn nginx_conf(dir: &Path, port: u16, decide: SocketAddr, upstream: SocketAddr) -> String {
    let snippet = include_str!("../fixtures/gateways/nginx.conf");
    let prefix = dir.display();
    format!(
        "daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log info;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n  upstream api {{ server {upstream}; }}\n  server {{\n    listen 127.0.0.1:{port};\n{}\n  }}\n}}\n",
        snippet.replace("127.0.0.1:9090", &decide.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_drives_decide() {
    let nginx = require("nginx");
    let up = Upstream::start().await;
    let spec = TempSpec::new("nginx", SPEC);
    // nginx turns any auth status but 2xx, 401 and 403 into a 500: refusals come back as 403.
    let decide = Opbound::start(&[
        "decide",
        "--spec",
        spec.arg(),
        "--gateway",
        "nginx",
        "--deny-status",
        "403",
        "--trusted-proxy",
        "127.0.0.1",
    ]);
    let port = free_port();
    let conf = spec.dir().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(spec.dir(), port, decide.addr, up.addr)).unwrap();
    let mut server = Killed(
        Command::new(nginx)
            .args(["-c", conf.to_str().unwrap(), "-p", spec.dir().to_str().unwrap(), "-e", "stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts"),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(addr, "nginx", &mut server, &spec.dir().join("error.log")).await;
    let url = |p: &str| format!("http://{addr}{p}");

    let first = get(url("/limited")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body, "ok /limited");
    assert_eq!((first.header("ratelimit-limit"), first.header("ratelimit-remaining")), (Some("2"), Some("1")));
    assert_eq!(get(url("/limited")).await.status, 200);
    let refused = get(url("/limited")).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(retry >= 1);
    assert_eq!(refused.header("ratelimit-remaining"), Some("0"));
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    assert_eq!(refused.json()["status"], 429);
    assert_eq!(refused.json()["retry_after"], retry);
    assert_eq!(up.targets(), ["/limited", "/limited"], "the refused request never reached the API");

    // A request without the key a `missing: reject` bound needs: a 403 without Retry-After,
    // which the snippet turns into a 400.
    let missing = get(url("/keyed")).await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert_eq!(get_with(&url("/keyed"), &[("x-api-key", "k")]).await.status, 200);
}

/// Caddy with the README's Caddyfile, on `port`, asking `decide` and proxying to `upstream`.
fn start_caddy(caddy: &str, spec: &TempSpec, port: u16, decide: SocketAddr, upstream: SocketAddr) -> Killed {
    let snippet = include_str!("../fixtures/gateways/Caddyfile")
        .replace("127.0.0.1:9090", &decide.to_string())
        .replace("127.0.0.1:3000", &upstream.to_string())
        .replace(":8080", &format!("http://127.0.0.1:{port}"));
    let file = spec.dir().join("Caddyfile");
    std::fs::write(&file, format!("{{\n  admin off\n  auto_https off\n}}\n{snippet}")).unwrap();
    Killed(
        Command::new(caddy)
            .args(["run", "--config", file.to_str().unwrap(), "--adapter", "caddyfile"])
            .env("HOME", spec.dir())
            .env("XDG_CONFIG_HOME", spec.dir())
            .env("XDG_DATA_HOME", spec.dir())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(spec.dir().join("caddy.log")).unwrap())
            .spawn()
            .expect("caddy starts"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_drives_decide() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy", SPEC);
    let decide =
        Opbound::start(&["decide", "--spec", spec.arg(), "--gateway", "caddy", "--trusted-proxy", "127.0.0.1"]);
    let port = free_port();
    let mut server = start_caddy(&caddy, &spec, port, decide.addr, up.addr);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(addr, "caddy", &mut server, &spec.dir().join("caddy.log")).await;
    let url = |p: &str| format!("http://{addr}{p}");

    let first = get(url("/limited")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body, "ok /limited");
    assert_eq!(first.header("ratelimit-remaining"), Some("1"));
    assert_eq!(get(url("/limited")).await.status, 200);
    // Caddy hands a refusal from the auth service back to the client as it is.
    let refused = get(url("/limited")).await;
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.header("ratelimit-remaining"), Some("0"));
    assert_eq!(refused.json()["bound"], "limited:0");
    assert_eq!(refused.json()["detail"], "2 per PT1M per address on operation limited");
    assert_eq!(get(url("/keyed")).await.status, 400);
    assert_eq!(up.targets(), ["/limited", "/limited"]);
}

/// What a client behind the gateway tries, to be charged for something else or not at all: every
/// header opbound could be fooled by, spelled by the client. Each line is one raw request for the
/// limited operation (2 per address), sent from 127.0.0.5.
fn spoofing_requests(host: SocketAddr) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..4 {
        let spoof = format!(
            "X-Original-URI: /x{i}\r\nX-Original-Method: POST\r\nX-Forwarded-Uri: /y{i}\r\nX-Forwarded-Method: PUT\r\n\
             X-Forwarded-For: 198.51.100.{i}\r\nForwarded: for=203.0.113.{i}\r\nX-Real-IP: 192.0.2.{i}\r\n"
        );
        for target in ["/limited".to_string(), format!("/limited?r=http://x/y{i}"), format!("/limited?x=\u{e9}{i}")] {
            out.push(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{spoof}Connection: close\r\n\r\n").into_bytes());
        }
        let mut latin1 = format!("GET /limited?x=\u{e9} HTTP/1.1\r\nHost: {host}\r\n").into_bytes();
        // `é` as Latin-1: one byte, not UTF-8.
        latin1.splice(15..17, [0xe9]);
        latin1.extend_from_slice(spoof.as_bytes());
        latin1.extend_from_slice(b"Connection: close\r\n\r\n");
        out.push(latin1);
    }
    out
}

/// Sends every spoofing request through a gateway at `addr`; the limited operation must have run
/// no more than its bound allows, whatever the client wrote.
fn assert_spoofing_fails(gateway: &str, addr: SocketAddr, up: &Upstream) {
    let before = up.targets().iter().filter(|t| t.starts_with("/limited")).count();
    let mut statuses = Vec::new();
    for request in spoofing_requests(addr) {
        let answer = raw("127.0.0.5", addr, &request, Duration::from_secs(5));
        statuses.push(answer.split(' ').nth(1).unwrap_or("(nothing)").to_string());
    }
    let ran: Vec<String> = up.targets().into_iter().filter(|t| t.starts_with("/limited")).skip(before).collect();
    assert!(
        ran.len() <= 2,
        "{gateway}: the limited operation (2 per address) ran {} times: {ran:?}; statuses {statuses:?}",
        ran.len()
    );
    assert!(!ran.is_empty(), "{gateway}: nothing got through at all; statuses {statuses:?}");
    assert!(statuses.iter().all(|s| s != "500" && s != "502"), "{gateway}: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_headers_through_nginx_change_nothing() {
    let nginx = require("nginx");
    let up = Upstream::start().await;
    let spec = TempSpec::new("nginx-spoof", SPEC);
    let decide = Opbound::start(&[
        "decide",
        "--spec",
        spec.arg(),
        "--gateway",
        "nginx",
        "--deny-status",
        "403",
        "--trusted-proxy",
        "127.0.0.1",
    ]);
    let port = free_port();
    let conf = spec.dir().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(spec.dir(), port, decide.addr, up.addr)).unwrap();
    let mut server = Killed(
        Command::new(nginx)
            .args(["-c", conf.to_str().unwrap(), "-p", spec.dir().to_str().unwrap(), "-e", "stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts"),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(addr, "nginx", &mut server, &spec.dir().join("error.log")).await;
    // One worker blocks on the raw client; the upstream runs on the other.
    assert_spoofing_fails("nginx", addr, &up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_headers_through_caddy_change_nothing() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy-spoof", SPEC);
    let decide =
        Opbound::start(&["decide", "--spec", spec.arg(), "--gateway", "caddy", "--trusted-proxy", "127.0.0.1"]);
    let port = free_port();
    let mut server = start_caddy(&caddy, &spec, port, decide.addr, up.addr);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(addr, "caddy", &mut server, &spec.dir().join("caddy.log")).await;
    // One worker blocks on the raw client; the upstream runs on the other.
    assert_spoofing_fails("caddy", addr, &up);
}

/// The snippets the README shows are the ones these tests run.
#[test]
fn the_readme_shows_the_tested_snippets() {
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(include_str!("../fixtures/gateways/nginx.conf")),
        "README's nginx snippet differs from the tested one"
    );
    assert!(
        readme.contains(include_str!("../fixtures/gateways/Caddyfile")),
        "README's Caddyfile differs from the tested one"
    );
}
