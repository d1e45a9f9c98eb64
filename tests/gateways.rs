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

/// An nginx snippet (the nginx page's, or one `decide --print-gateway nginx` printed) in a server
/// block, with the test's ports, a private prefix and `http_extra` at the http level.
fn nginx_conf(
    snippet: &str,
    http_extra: &str,
    dir: &Path,
    port: u16,
    decide: SocketAddr,
    upstream: SocketAddr,
) -> String {
    let prefix = dir.display();
    format!(
        "daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log info;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n{http_extra}  upstream api {{ server {upstream}; }}\n  server {{\n    listen 127.0.0.1:{port};\n{}\n  }}\n}}\n",
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
    start_caddy_with(caddy, spec, include_str!("../fixtures/gateways/Caddyfile"), decide, upstream, fail_open).await
}

/// Caddy with `snippet` (the Caddy page's Caddyfile, or one `decide --print-gateway caddy` printed).
async fn start_caddy_with(
    caddy: &str,
    spec: &TempSpec,
    snippet: &str,
    decide: SocketAddr,
    upstream: SocketAddr,
    fail_open: bool,
) -> (Killed, SocketAddr) {
    let mut snippet = snippet.to_string();
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
    let snippet = include_str!("../fixtures/gateways/nginx.conf");
    start_nginx_with(nginx, spec, snippet, "", decide, upstream, fail_open).await
}

/// nginx with `snippet` (the nginx page's, or one `decide --print-gateway nginx` printed) and
/// `http_extra` at the http level.
async fn start_nginx_with(
    nginx: &str,
    spec: &TempSpec,
    snippet: &str,
    http_extra: &str,
    decide: SocketAddr,
    upstream: SocketAddr,
    fail_open: bool,
) -> (Killed, SocketAddr) {
    let log = spec.dir().join("error.log");
    start_listening("nginx", &log, |port| {
        let _ = std::fs::remove_file(&log);
        let conf = spec.dir().join("nginx.conf");
        let mut text = nginx_conf(snippet, http_extra, spec.dir(), port, decide, upstream);
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

/// Issue 10, item 1: the documented `decide` command listened where its own nginx snippet listens.
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

/// Runs `opbound decide ARGS` to completion (`--print-gateway`, or a start it refuses) and
/// returns its exit code, stdout and stderr; a decide still running after ten seconds fails the
/// test.
fn decide_to_completion(args: &[&str]) -> (i32, String, String) {
    common::run_to_end(&[&["decide"][..], args].concat())
}

/// What `opbound decide ARGS --print-gateway GATEWAY` prints.
fn printed(gateway: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--print-gateway", gateway]);
    let (code, out, err) = decide_to_completion(&all);
    assert_eq!(code, 0, "decide {all:?} printed nothing: {err}");
    out
}

/// Issue 47, item 4: the snippets the gateway pages show (and the tests above run) are what
/// `decide --print-gateway` prints for the flags the pages run decide with.
#[test]
fn the_fixtures_are_what_print_gateway_prints() {
    let spec = TempSpec::new("print-fixtures", SPEC);
    for (gateway, flags, fixture) in [
        ("nginx", &["--deny-status", "403"][..], include_str!("../fixtures/gateways/nginx.conf")),
        ("caddy", &[], include_str!("../fixtures/gateways/Caddyfile")),
        ("traefik", &[], include_str!("../fixtures/gateways/traefik.yaml")),
        ("envoy", &["--path-prefix", "/check"], include_str!("../fixtures/gateways/envoy.yaml")),
    ] {
        let mut args = vec!["--spec", spec.arg(), "--trusted-proxy", "127.0.0.1"];
        args.extend_from_slice(flags);
        assert_eq!(printed(gateway, &args), fixture, "{gateway}");
        // Given as --gateway too, the same.
        args.extend(["--gateway", gateway]);
        assert_eq!(printed(gateway, &args), fixture, "{gateway} with --gateway");
    }
}

/// A spec whose one operation counts per user, refusing requests without one.
const IDENTITY_SPEC: &str = r#"
openapi: 3.0.3
info: {title: identity through a gateway, version: '1'}
paths:
  /mine:
    get:
      operationId: mine
      x-rate-limit: {per: user, limit: 2, window: PT1H, missing: reject}
"#;

/// `decide` for `gateway` believing `X-User-Id` from it, and the snippet it prints for itself
/// (asking where it listens), with `extra` flags for the printing.
fn decide_with_identity(gateway: &str, spec: &TempSpec, extra: &[&str]) -> (Opbound, String) {
    let mut args = vec!["decide", "--spec", spec.arg(), "--trusted-proxy", "127.0.0.1", "--gateway", gateway];
    args.extend(["--identity-header", "user=X-User-Id"]);
    if gateway == "nginx" {
        args.extend(["--deny-status", "403"]);
    }
    let decide = Opbound::start(&args);
    let listen = decide.addr.to_string();
    let mut print: Vec<&str> = args[1..].to_vec();
    print.extend(["--listen", &listen]);
    print.extend_from_slice(extra);
    let snippet = printed(gateway, &print);
    (decide, snippet)
}

/// Sends `/mine` through a gateway at `addr` six times, each with another `X-User-Id` (and the
/// `auth` headers a client authenticates with), and returns the statuses.
async fn spoofed_users(addr: SocketAddr, auth: &[(&str, &str)]) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 1..=6 {
        let user = format!("mallory{i}");
        let mut headers = vec![("x-user-id", user.as_str())];
        headers.extend_from_slice(auth);
        statuses.push(get_with(&format!("http://{addr}/mine"), &headers).await.status);
    }
    statuses
}

/// Issue 47, item 4: through the shipped nginx snippet a client's own `X-User-Id: mallory2` was
/// believed (nginx passes client headers to the auth subrequest, and nginx is the trusted
/// proxy), so each made-up user got a fresh budget. The printed snippet clears it: with no
/// authentication in nginx, no request has a user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_chosen_identity_through_nginx_is_cleared() {
    let nginx = require("nginx");
    let up = Upstream::start().await;
    let spec = TempSpec::new("nginx-identity", IDENTITY_SPEC);
    let (decide, snippet) = decide_with_identity("nginx", &spec, &[]);
    assert!(snippet.contains("proxy_set_header X-User-Id \"\";"), "{snippet}");
    let (_server, addr) = start_nginx_with(&nginx, &spec, &snippet, "", decide.addr, up.addr, false).await;
    let statuses = spoofed_users(addr, &[]).await;
    assert_eq!(statuses, [400; 6], "every request lacks a user; none is counted as the one it named");
    assert!(up.targets().is_empty(), "a made-up user reached the API: {:?}", up.targets());
}

/// The same through Caddy, whose `forward_auth` also passes a client's headers on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_chosen_identity_through_caddy_is_cleared() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy-identity", IDENTITY_SPEC);
    let (decide, snippet) = decide_with_identity("caddy", &spec, &[]);
    assert!(snippet.contains("request_header -X-User-Id"), "{snippet}");
    let (_server, addr) = start_caddy_with(&caddy, &spec, &snippet, decide.addr, up.addr, false).await;
    let statuses = spoofed_users(addr, &[]).await;
    assert_eq!(statuses, [400; 6], "every request lacks a user; none is counted as the one it named");
    assert!(up.targets().is_empty(), "a made-up user reached the API: {:?}", up.targets());
}

/// With `--identity-set-by-gateway` the printed nginx snippet sends the user nginx's
/// authentication verified (here a stand-in: a map from a session cookie, where the snippet
/// says to put it): alice gets her 2, whatever `X-User-Id` she writes, and a request with no
/// session has no user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_set_by_nginx_is_the_one_counted() {
    let nginx = require("nginx");
    let up = Upstream::start().await;
    let spec = TempSpec::new("nginx-identity-set", IDENTITY_SPEC);
    let (decide, snippet) = decide_with_identity("nginx", &spec, &["--identity-set-by-gateway"]);
    assert!(snippet.contains("proxy_set_header X-User-Id $opbound_user;"), "{snippet}");
    let auth = "  map $cookie_session $opbound_user { s-alice alice; default \"\"; }\n";
    let (_server, addr) = start_nginx_with(&nginx, &spec, &snippet, auth, decide.addr, up.addr, false).await;
    let statuses = spoofed_users(addr, &[("cookie", "session=s-alice")]).await;
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429], "alice's budget, whoever she claims to be");
    assert_eq!(spoofed_users(addr, &[]).await, [400; 6], "no session, no user");
    assert_eq!(up.targets(), ["/mine", "/mine"]);
}

/// The same through Caddy, with `basicauth` where the printed Caddyfile says authentication goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_set_by_caddy_is_the_one_counted() {
    let caddy = require("caddy");
    let up = Upstream::start().await;
    let spec = TempSpec::new("caddy-identity-set", IDENTITY_SPEC);
    let (decide, snippet) = decide_with_identity("caddy", &spec, &["--identity-set-by-gateway"]);
    let setting = "\t\trequest_header X-User-Id {http.auth.user.id}\n";
    let at = snippet.find(setting).unwrap_or_else(|| panic!("no place for authentication in: {snippet}"));
    let hash = Command::new(&caddy).args(["hash-password", "--plaintext", "secret"]).output().expect("caddy hashes");
    let hash = String::from_utf8(hash.stdout).unwrap();
    let mut snippet = snippet.clone();
    snippet.insert_str(at, &format!("\t\tbasicauth {{\n\t\t\talice {}\n\t\t}}\n", hash.trim()));
    let (_server, addr) = start_caddy_with(&caddy, &spec, &snippet, decide.addr, up.addr, false).await;
    // alice:secret
    let statuses = spoofed_users(addr, &[("authorization", "Basic YWxpY2U6c2VjcmV0")]).await;
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429], "alice's budget, whoever she claims to be");
    assert_eq!(up.targets(), ["/mine", "/mine"]);
}

/// Traefik and Envoy cannot be installed here (no Debian package), so their printed snippets are
/// parsed and checked for the parts that keep a client from choosing its identity.
#[test]
fn traefik_and_envoy_snippets_clear_identity_headers() {
    let spec = TempSpec::new("print-identity", IDENTITY_SPEC);
    let yaml = |text: String| {
        opbound::spec::Source::from_text(Path::new("snippet.yaml"), text).parse().expect("the snippet is YAML")
    };
    let base = ["--spec", spec.arg(), "--trusted-proxy", "127.0.0.1", "--identity-header", "user=X-User-Id"];
    let listen = ["--listen", "127.0.0.1:9191"];

    let traefik = yaml(printed("traefik", &[&base[..], &listen[..]].concat()));
    let middlewares = &traefik["http"]["middlewares"];
    assert_eq!(middlewares["opbound-identity"]["headers"]["customRequestHeaders"]["X-User-Id"], "");
    assert_eq!(middlewares["opbound"]["forwardAuth"]["address"], "http://127.0.0.1:9191/");
    assert_eq!(middlewares["opbound"]["forwardAuth"]["trustForwardHeader"], false);
    assert_eq!(traefik["http"]["routers"]["api"]["middlewares"], serde_json::json!(["opbound-identity", "opbound"]));
    let set = yaml(printed("traefik", &[&base[..], &["--identity-set-by-gateway"]].concat()));
    assert_eq!(
        set["http"]["routers"]["api"]["middlewares"],
        serde_json::json!(["opbound-identity", "your-authentication", "opbound"]),
        "cleared first, then set by the authentication, then asked"
    );

    let envoy = yaml(printed("envoy", &[&base[..], &listen[..], &["--path-prefix", "/check"]].concat()));
    let filters = envoy["http_filters"].as_array().expect("a filter list");
    let names: Vec<&str> = filters.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["envoy.filters.http.header_mutation", "envoy.filters.http.ext_authz", "envoy.filters.http.router"],
        "the client's copy is removed before ext_authz"
    );
    let mutations = &filters[0]["typed_config"]["mutations"]["request_mutations"];
    assert_eq!(mutations, &serde_json::json!([{"remove": "x-user-id"}]));
    let http = &filters[1]["typed_config"]["http_service"];
    assert_eq!(http["server_uri"]["uri"], "127.0.0.1:9191");
    assert_eq!(http["path_prefix"], "/check");
    let allowed = http["authorization_request"]["allowed_headers"]["patterns"].as_array().unwrap();
    assert!(allowed.contains(&serde_json::json!({"exact": "x-user-id"})), "ext_authz sends the header: {allowed:?}");
}

/// Printing refuses what the gateway cannot carry safely: nginx without --deny-status 403 (its
/// auth_request makes any other refusal a 500), an address read from `Forwarded` (the snippets
/// write X-Forwarded-For, and a client's Forwarded passes through), another --gateway.
#[test]
fn print_gateway_refuses_what_the_gateway_cannot_carry() {
    let spec = TempSpec::new("print-refused", SPEC);
    let base = ["--spec", spec.arg(), "--trusted-proxy", "127.0.0.1"];
    for (extra, needle) in [
        (&["--print-gateway", "nginx"][..], "--deny-status 403"),
        (&["--print-gateway", "caddy", "--client-address-header", "forwarded"], "x-forwarded-for"),
        (&["--print-gateway", "caddy", "--gateway", "nginx"], "--gateway nginx"),
        (&["--print-gateway", "caddy", "--identity-set-by-gateway"], "--identity-header"),
    ] {
        let (code, out, err) = decide_to_completion(&[&base[..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        assert!(out.is_empty() && err.contains(needle), "{extra:?}: {err}");
    }
}

/// Issue 47, item 5: the sign-in recipe (docs) (a body key with `missing: reject`) behind a
/// gateway answered 400 to every sign-in, since a gateway sends decide no body. decide now
/// refuses to start with it, saying where and what to do.
#[test]
fn decide_refuses_a_body_key_that_would_refuse_every_request() {
    let spec = TempSpec::new(
        "sign-in",
        r#"
openapi: 3.1.0
info: {title: sign-in, version: '1'}
paths:
  /login:
    post:
      operationId: login
      x-rate-limit:
        - {per: address, limit: 20, window: PT1M}
        - {per: json:/username, limit: 5, window: PT15M, count-when: [401, 403],
           missing: reject, on-store-error: closed}
"#,
    );
    let args = ["--spec", spec.arg(), "--gateway", "nginx", "--trusted-proxy", "127.0.0.1", "--listen", "127.0.0.1:0"];
    let (code, _, err) = decide_to_completion(&args);
    assert_eq!(code, 1, "{err}");
    let error = err.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error in: {err}"));
    assert!(error.contains("/paths/~1login/post/x-rate-limit/1/per in POST /login (line 10, column"), "{error}");
    assert!(error.contains("opbound serve") && error.contains("forwards"), "says what to do: {error}");
}
