//! The real nginx and Caddy, from Debian's packages, asking `opbound decide` about every request,
//! with the configuration snippets the book's gateway pages give. `.ci/test` installs both when
//! missing.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Killed, Opbound, TempSpec, Upstream, free_port, get, get_with, listening, raw, require};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: gateway tests, version: '1'}
paths:
  /limited:
    get:
      operationId: limited
      x-rate-limit: {per: address, limit: 2, window: PT1H}
  /keyed:
    get:
      operationId: keyed
      x-rate-limit: {per: 'header:X-Api-Key', limit: 5, window: PT1H, missing: reject}
"#;

/// Starts a server on a free loopback port with `spawn(port)` and waits until it listens there.
/// A port picked free can be taken again before the server binds it (tests run side by side,
/// and outgoing connections use the same range), so a server that exits with "address already
/// in use" in its `log` is started again on another port; any other early exit fails the test
/// with the log.
async fn start_listening(what: &str, log: &Path, spawn: impl Fn(u16) -> Killed) -> (Killed, SocketAddr) {
    'attempt: for _ in 0..5 {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut server = spawn(port);
        for _ in 0..200 {
            // Another test's server may hold the port meanwhile: nginx then logs the failed bind
            // and retries it for seconds while that server answers in its place.
            let taken = std::fs::read_to_string(log).is_ok_and(|text| text.contains("ddress already in use"));
            if taken {
                continue 'attempt;
            }
            if listening(addr) {
                return (server, addr);
            }
            if let Ok(Some(status)) = server.0.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                if text.contains("ddress already in use") {
                    continue 'attempt;
                }
                panic!("{what} exited at start: {status}\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{what} did not listen on {addr}");
    }
    panic!("{what} found no free port in five tries");
}

/// The nginx page's snippet, with the test's ports and a private prefix.
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
    let decide = Gateway::Nginx.decide(&spec);
    let (_server, addr) = start_nginx(&nginx, &spec, decide.addr, up.addr, false).await;
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
    // The body opbound serve would send, not one the snippet made up.
    assert_eq!(refused.json()["status"], 429);
    assert_eq!(refused.json()["retry_after"], retry);
    assert_eq!(refused.json()["bound"], "limited:0");
    assert_eq!(refused.json()["detail"], "2 per PT1H per address on operation limited");
    assert_eq!(refused.header("opbound-problem"), None, "the carrier headers stay between nginx and opbound");
    assert_eq!(up.targets(), ["/limited", "/limited"], "the refused request never reached the API");

    // A request without the key a `missing: reject` bound needs: opbound's 400 and its body.
    let missing = get(url("/keyed")).await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert_eq!(missing.header("content-type"), Some("application/problem+json"));
    assert_eq!(missing.json()["missing"], "header x-api-key");
    assert_eq!(missing.header("retry-after"), None);
    assert_eq!(get_with(&url("/keyed"), &[("x-api-key", "k")]).await.status, 200);
}

/// Caddy with the Caddy page's Caddyfile, on a free loopback port, asking `decide` and proxying to
/// `upstream`; `fail_open` applies the change the snippet's comment describes.
async fn start_caddy(
    caddy: &str,
    spec: &TempSpec,
    decide: SocketAddr,
    upstream: SocketAddr,
    fail_open: bool,
) -> (Killed, SocketAddr) {
    let mut snippet = include_str!("../fixtures/gateways/Caddyfile").to_string();
    if fail_open {
        let at = snippet.find("\t\t\theader Content-Type application/problem+json\n").expect("the fail-closed lines");
        let end = at + snippet[at..].find(" 503\n").unwrap() + 5;
        snippet.replace_range(at..end, "\t\t\treverse_proxy 127.0.0.1:3000\n");
    }
    let snippet =
        snippet.replace("127.0.0.1:9090", &decide.to_string()).replace("127.0.0.1:3000", &upstream.to_string());
    let log = spec.dir().join("caddy.log");
    start_listening("caddy", &log, |port| {
        // Loopback only: a site address alone makes Caddy listen on every interface.
        let site = snippet.replace(":8080 {\n", &format!("http://127.0.0.1:{port} {{\n\tbind 127.0.0.1\n"));
        let file = spec.dir().join("Caddyfile");
        std::fs::write(&file, format!("{{\n  admin off\n  auto_https off\n}}\n{site}")).unwrap();
        Killed(
            Command::new(caddy)
                .args(["run", "--config", file.to_str().unwrap(), "--adapter", "caddyfile"])
                .env("HOME", spec.dir())
                .env("XDG_CONFIG_HOME", spec.dir())
                .env("XDG_DATA_HOME", spec.dir())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("caddy starts"),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_drives_decide() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy", SPEC);
    let decide = Gateway::Caddy.decide(&spec);
    let (_server, addr) = start_caddy(&caddy, &spec, decide.addr, up.addr, false).await;
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
    assert_eq!(refused.json()["detail"], "2 per PT1H per address on operation limited");
    assert_eq!(get(url("/keyed")).await.status, 400);
    assert_eq!(up.targets(), ["/limited", "/limited"]);
}

/// nginx with the nginx page's snippet in front of `upstream`, asking `decide`, on a free port;
/// `fail_open` applies the change the snippet's comment describes.
async fn start_nginx(
    nginx: &str,
    spec: &TempSpec,
    decide: SocketAddr,
    upstream: SocketAddr,
    fail_open: bool,
) -> (Killed, SocketAddr) {
    let log = spec.dir().join("error.log");
    start_listening("nginx", &log, |port| {
        let _ = std::fs::remove_file(&log);
        let conf = spec.dir().join("nginx.conf");
        let mut text = nginx_conf(spec.dir(), port, decide, upstream);
        if fail_open {
            let closed = "        default_type application/problem+json;\n        return 503 '{\"type\":\"tag:opbound.dev,2026:limiter-unavailable\"";
            let at = text.find(closed).expect("the fail-closed lines are in the snippet");
            let end = at + text[at..].find("';\n").unwrap() + 3;
            text.replace_range(at..end, "        proxy_pass http://api;\n");
        }
        std::fs::write(&conf, text).unwrap();
        Killed(
            Command::new(nginx)
                .args(["-c", conf.to_str().unwrap(), "-p", spec.dir().to_str().unwrap(), "-e", log.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx starts"),
        )
    })
    .await
}

/// The gateways whose snippets the book gives and these tests run.
#[derive(Clone, Copy, Debug)]
enum Gateway {
    Nginx,
    Caddy,
}

impl Gateway {
    /// `opbound decide` run as its page says for this gateway (nginx needs refusals as 403).
    fn decide(self, spec: &TempSpec) -> Opbound {
        let mut args = vec!["decide", "--spec", spec.arg(), "--trusted-proxy", "127.0.0.1"];
        match self {
            Gateway::Nginx => args.extend(["--gateway", "nginx", "--deny-status", "403"]),
            Gateway::Caddy => args.extend(["--gateway", "caddy"]),
        }
        Opbound::start(&args)
    }

    /// The gateway with its page's snippet, asking `decide`, in front of `upstream`.
    async fn start(
        self,
        spec: &TempSpec,
        decide: SocketAddr,
        upstream: SocketAddr,
        fail_open: bool,
    ) -> (Killed, SocketAddr) {
        match self {
            Gateway::Nginx => start_nginx(&require("nginx"), spec, decide, upstream, fail_open).await,
            Gateway::Caddy => start_caddy(&require("caddy"), spec, decide, upstream, fail_open).await,
        }
    }
}

/// With opbound not answering, the snippet fails closed with a problem body, or open as its
/// comment says.
async fn fails_closed_or_open_when_decide_cannot_be_asked(gateway: Gateway) {
    let up = Upstream::start().await;
    let nobody: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    for fail_open in [false, true] {
        let spec = TempSpec::new(&format!("{gateway:?}-down-{fail_open}"), SPEC);
        let (_server, addr) = gateway.start(&spec, nobody, up.addr, fail_open).await;
        let r = get(format!("http://{addr}/limited")).await;
        if fail_open {
            assert_eq!((r.status, r.body.as_str()), (200, "ok /limited"), "{gateway:?}");
        } else {
            assert_eq!(r.status, 503, "{gateway:?}: {}", r.body);
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
            assert_eq!(r.json()["type"], "tag:opbound.dev,2026:limiter-unavailable");
        }
    }
    assert_eq!(up.targets(), ["/limited"], "{gateway:?}: only the fail-open request reached the API");
}

/// Issue 10, item 1: with opbound stopped, every request through nginx was a bare 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_fails_closed_or_open_when_decide_cannot_be_asked() {
    fails_closed_or_open_when_decide_cannot_be_asked(Gateway::Nginx).await;
}

/// Caddy answered a bare 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_fails_closed_or_open_when_decide_cannot_be_asked() {
    fails_closed_or_open_when_decide_cannot_be_asked(Gateway::Caddy).await;
}

/// Issue 10, item 1: the README's `decide` command listened where its own nginx snippet listens.
/// Each gateway page's command, run as written, listens where the page's snippet asks, which is
/// not where the snippet itself listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_commands_listen_where_the_snippets_ask() {
    for (gateway, page, snippet, listens) in [
        ("nginx", NGINX_PAGE, include_str!("../fixtures/gateways/nginx.conf"), "listen 8080;"),
        ("caddy", CADDY_PAGE, include_str!("../fixtures/gateways/Caddyfile"), ":8080 {"),
    ] {
        let command = page
            .lines()
            .find(|l| l.starts_with(&format!("opbound decide --spec api.yaml --gateway {gateway} ")))
            .unwrap_or_else(|| panic!("the {gateway} page shows no decide command"));
        let spec = TempSpec::new(&format!("readme-{gateway}"), SPEC);
        let args: Vec<&str> =
            command.split_whitespace().skip(1).map(|a| if a == "api.yaml" { spec.arg() } else { a }).collect();
        let decide = Opbound::start_as_written(&args);
        assert!(snippet.contains(&decide.addr.to_string()), "{gateway}: the snippet does not ask {}", decide.addr);
        assert!(page.contains(listens) && !listens.contains(&decide.addr.port().to_string()));
        drop(decide);
    }
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
    let decide = Gateway::Nginx.decide(&spec);
    let (_server, addr) = start_nginx(&nginx, &spec, decide.addr, up.addr, false).await;
    // One worker blocks on the raw client; the upstream runs on the other.
    assert_spoofing_fails("nginx", addr, &up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_headers_through_caddy_change_nothing() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy-spoof", SPEC);
    let decide = Gateway::Caddy.decide(&spec);
    let (_server, addr) = start_caddy(&caddy, &spec, decide.addr, up.addr, false).await;
    // One worker blocks on the raw client; the upstream runs on the other.
    assert_spoofing_fails("caddy", addr, &up);
}

/// The book's gateway pages, whose snippets and commands these tests run.
const NGINX_PAGE: &str = include_str!("../docs/src/gateways/nginx.md");
const CADDY_PAGE: &str = include_str!("../docs/src/gateways/caddy.md");

/// The snippets the gateway pages show are the ones these tests run.
#[test]
fn the_pages_show_the_tested_snippets() {
    assert!(
        NGINX_PAGE.contains(include_str!("../fixtures/gateways/nginx.conf")),
        "docs/src/gateways/nginx.md's snippet differs from the tested one"
    );
    assert!(
        CADDY_PAGE.contains(include_str!("../fixtures/gateways/Caddyfile")),
        "docs/src/gateways/caddy.md's Caddyfile differs from the tested one"
    );
}
