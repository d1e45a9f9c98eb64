//! The server commands' flags, parsed by clap as the binary parses them, into the typed
//! configurations they start from; and the refusals, word for word, with their exit codes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::error::ErrorKind;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::decide::DecideConfig;
use super::failure::Failure;
use super::serve::ServeConfig;
use super::server::{AdminConfig, StoreConfig};
use super::{Cli, Command, exit};
use crate::engine::headers::HeaderStyle;
use crate::router::canonical::EscapedSlashes;
use crate::server::decide::Gateway;
use crate::store::redis::Target;

/// `opbound serve --spec api.yaml --upstream UPSTREAM` and `more`.
fn serve(upstream: &str, more: &[&str]) -> Result<ServeConfig, Failure> {
    let args = [&["opbound", "serve", "--spec", "api.yaml", "--upstream", upstream][..], more].concat();
    match Cli::try_parse_from(args).expect("clap takes these flags").command {
        Command::Serve(args) => args.config(),
        _ => unreachable!("parsed as serve"),
    }
}

/// `opbound decide --spec api.yaml` and `more`.
fn decide(more: &[&str]) -> Result<DecideConfig, Failure> {
    let args = [&["opbound", "decide", "--spec", "api.yaml"][..], more].concat();
    match Cli::try_parse_from(args).expect("clap takes these flags").command {
        Command::Decide(args) => args.config(),
        _ => unreachable!("parsed as decide"),
    }
}

/// What clap itself refuses, before any config is built: its kind and its text.
fn refused_by_clap(args: &[&str]) -> (ErrorKind, String) {
    match Cli::try_parse_from(args) {
        Ok(_) => panic!("clap took {args:?}"),
        Err(e) => (e.kind(), e.to_string()),
    }
}

/// The exit code and the whole message of a refusal.
fn refusal<T>(config: Result<T, Failure>) -> (u8, String) {
    match config {
        Ok(_) => panic!("the flags were taken"),
        Err(f) => (f.code, f.message.expect("a refusal says why")),
    }
}

/// A file holding `text`, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("opbound-config-{}-{name}", std::process::id()));
        std::fs::write(&path, text).expect("the temporary directory is writable");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn serve_defaults() {
    let ServeConfig { server, upstream, strip_headers, .. } =
        serve("http://127.0.0.1:3000/api/", &["--max-connections", "500"]).unwrap();
    assert!(strip_headers.is_empty());
    assert_eq!(upstream.base, "http://127.0.0.1:3000/api/");
    assert!(upstream.tls.is_none());
    assert_eq!(upstream.connect_timeout, Duration::from_secs(5));
    assert_eq!(upstream.response_timeout, Duration::from_secs(60));
    assert_eq!((upstream.pool.idle_timeout, upstream.pool.max_idle), (Duration::from_secs(30), 64));

    assert_eq!(server.spec, PathBuf::from("api.yaml"));
    assert_eq!(server.listen, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
    assert!(matches!(server.store, StoreConfig::Memory));
    let o = &server.options;
    assert_eq!((o.shared_store, o.decision_service, o.shadow), (false, false, false));
    assert_eq!(o.max_counters, crate::policy::DEFAULT_MAX_COUNTERS);
    assert_eq!(server.headers, HeaderStyle::Legacy);
    assert_eq!(server.escaped_slashes, EscapedSlashes::Reject);
    assert_eq!(server.admin, None);
    assert!(server.watch);
    assert_eq!(server.identity.headers.names().count(), 0);
    assert!(server.identity.jwt.is_none());
    let l = &server.listen_settings;
    assert_eq!(l.header_read_timeout, Duration::from_secs(10));
    assert_eq!(l.idle_timeout, Duration::from_secs(60));
    assert_eq!(l.shutdown_timeout, Duration::from_secs(30));
    assert_eq!((l.max_connections, l.max_connections_per_address), (500, 256));
    assert_eq!(l.max_idle_http2, crate::server::net::idle_http2::DEFAULT_MAX_IDLE);
    assert!(!server.trusted.trusts(IpAddr::from([127, 0, 0, 1])), "no proxy is trusted unless named");
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(server.workers, cpus, "a worker per CPU this process may run on");
}

#[test]
fn workers_are_counted_and_split_the_upstream_pool() {
    let three = decide(&["--gateway", "nginx", "--trusted-proxy", "10.0.0.0/8", "--workers", "3"]).unwrap();
    assert_eq!(three.server.workers, 3);
    let (kind, text) =
        refused_by_clap(&["opbound", "serve", "--spec", "a.yaml", "--upstream", "http://u", "--workers", "0"]);
    assert_eq!(kind, ErrorKind::ValueValidation);
    assert!(text.contains("0 workers would serve nothing"), "{text}");
    let (_, text) =
        refused_by_clap(&["opbound", "decide", "--spec", "a.yaml", "--gateway", "nginx", "--workers", "5000"]);
    assert!(text.contains("more than 1024"), "{text}");
    // The idle cap is the whole proxy's: each worker keeps its share, at least one.
    let pool = serve("http://u:1", &["--upstream-max-idle", "64"]).unwrap().upstream.pool;
    assert_eq!(pool.per_worker(4).max_idle, 16);
    assert_eq!(pool.per_worker(100).max_idle, 1);
    let none = serve("http://u:1", &["--upstream-max-idle", "0"]).unwrap().upstream.pool;
    assert_eq!(none.per_worker(4).max_idle, 0, "0 keeps none, on any worker");
}

#[test]
fn serve_with_every_kind_of_flag() {
    let ServeConfig { server, upstream, .. } = serve(
        "http://upstream.internal:8000",
        &[
            "--listen",
            "0.0.0.0:9000",
            "--connect-timeout",
            "250ms",
            "--upstream-timeout",
            "2m",
            "--upstream-idle-timeout",
            "5s",
            "--upstream-max-idle",
            "3",
            "--store",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "--store-timeout",
            "20ms",
            "--lease-ttl",
            "1h",
            "--store-prefix",
            "shop",
            "--identity-header",
            "user=X-User-Id",
            "--identity-header",
            "roles = X-Roles",
            "--trusted-proxy",
            "10.0.0.0/8",
            "--client-address-header",
            "forwarded",
            "--header-read-timeout",
            "3s",
            "--idle-timeout",
            "0s",
            "--max-connections",
            "100",
            "--max-connections-per-address",
            "7",
            "--max-idle-http2-connections",
            "9",
            "--shutdown-timeout",
            "0s",
            "--escaped-slashes",
            "keep",
            "--headers",
            "draft",
            "--max-counters",
            "1000",
            "--shadow",
            "--no-watch",
        ],
    )
    .unwrap();
    assert_eq!(upstream.base, "http://upstream.internal:8000/");
    assert_eq!(upstream.connect_timeout, Duration::from_millis(250));
    assert_eq!(upstream.response_timeout, Duration::from_secs(120));
    assert_eq!((upstream.pool.idle_timeout, upstream.pool.max_idle), (Duration::from_secs(5), 3));

    assert_eq!(server.listen, "0.0.0.0:9000".parse::<SocketAddr>().unwrap());
    let StoreConfig::Redis(target, settings) = &server.store else { panic!("{:?}", server.store) };
    let nodes = vec!["redis://10.0.0.1:7000".to_string(), "redis://10.0.0.2:7000".to_string()];
    assert_eq!(target, &Target::Cluster(nodes));
    assert_eq!(settings.timeout, Duration::from_millis(20));
    assert_eq!(settings.lease_ttl, Duration::from_secs(3600));
    assert_eq!(settings.prefix, "shop");
    assert_eq!(settings.ca, None);
    let o = &server.options;
    assert_eq!((o.shared_store, o.decision_service, o.shadow, o.max_counters), (true, false, true, 1000));
    let h = &server.identity.headers;
    assert_eq!(h.user.as_ref().map(|n| n.as_str()), Some("x-user-id"));
    assert_eq!(h.roles.as_ref().map(|n| n.as_str()), Some("x-roles"));
    assert_eq!(h.org, None);
    assert_eq!(server.headers, HeaderStyle::Draft);
    assert_eq!(server.escaped_slashes, EscapedSlashes::Keep);
    assert!(!server.watch);

    // Trusted from 10/8, and the client's address read from `Forwarded`, not X-Forwarded-For.
    assert!(server.trusted.trusts(IpAddr::from([10, 1, 2, 3])));
    assert!(!server.trusted.trusts(IpAddr::from([11, 0, 0, 1])));
    let mut headers = HeaderMap::new();
    headers.insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
    headers.insert("forwarded", HeaderValue::from_static("for=203.0.113.9"));
    assert_eq!(
        server.trusted.client_address(IpAddr::from([10, 1, 2, 3]), (&headers).into()),
        IpAddr::from([203, 0, 113, 9])
    );

    let l = &server.listen_settings;
    assert_eq!(
        (l.header_read_timeout, l.idle_timeout, l.shutdown_timeout),
        (Duration::from_secs(3), Duration::ZERO, Duration::ZERO)
    );
    assert_eq!((l.max_connections, l.max_connections_per_address, l.max_idle_http2), (100, 7, 9));
    assert!(l.trusted.trusts(IpAddr::from([10, 9, 9, 9])), "trusted proxies are exempt from the per-address cap");
}

#[test]
fn strip_header_is_repeatable_and_checked() {
    let more = ["--strip-header", "X-Usage-Tokens", "--strip-header", "x-cost"];
    let ServeConfig { strip_headers, .. } = serve("http://127.0.0.1:3000", &more).unwrap();
    assert_eq!(strip_headers, ["x-usage-tokens", "x-cost"]);
    let args = ["opbound", "serve", "--spec", "a.yaml", "--upstream", "http://a", "--strip-header", "bad name"];
    let (kind, text) = refused_by_clap(&args);
    assert_eq!(kind, ErrorKind::ValueValidation);
    assert!(text.contains(r#""bad name" is not an HTTP header name"#), "{text}");
}

#[test]
fn bad_upstreams_are_refused_before_the_server_flags() {
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "ftp://files.example",
            &[],
            r#"upstream "ftp://files.example" must be an http:// or https:// URL with a host, like http://127.0.0.1:3000"#,
        ),
        ("/only/a/path", &[], r#"upstream "/only/a/path" must be an http:// or https:// URL with a host"#),
        ("http://api.example/?v=2", &[], r#"upstream "http://api.example/?v=2" cannot have a query"#),
        ("http://a b", &[], r#"upstream "http://a b" is not a URL: "#),
        // Both wrong: the upstream is said first, as before the server flags were checked.
        ("ftp://x", &["--admin-token-file", "t"], r#"upstream "ftp://x" must be"#),
    ];
    for (upstream, more, says) in cases {
        let (code, message) = refusal(serve(upstream, more));
        assert_eq!(code, exit::UNREADABLE, "{upstream}");
        assert!(message.starts_with(says), "{upstream}: {message}");
    }
}

#[test]
fn tls_flags_are_for_an_https_upstream() {
    for flag in [["--upstream-ca-file", "ca.pem"], ["--upstream-server-name", "api.internal"]] {
        let (code, message) = refusal(serve("http://10.0.0.5:8443", &flag));
        assert_eq!(code, exit::UNREADABLE);
        assert_eq!(message, "--upstream-ca-file and --upstream-server-name are for an https:// upstream");
    }

    let (code, message) =
        refusal(serve("https://10.0.0.5:8443", &["--upstream-ca-file", "/nonexistent/opbound-ca.pem"]));
    assert_eq!(code, exit::UNREADABLE);
    assert!(message.starts_with("cannot read --upstream-ca-file /nonexistent/opbound-ca.pem: "), "{message}");

    let not_pem = TempFile::new("not-a-ca.pem", "hello\n");
    let (_, message) = refusal(serve("https://10.0.0.5:8443", &["--upstream-ca-file", not_pem.path()]));
    assert_eq!(message, "the upstream CA file holds no PEM certificate");

    let (_, message) = refusal(serve("https://10.0.0.5:8443", &["--upstream-server-name", "not a name"]));
    assert_eq!(message, r#"--upstream-server-name "not a name" is not a host name or an address"#);

    // The system's roots, and the name asked for and verified instead of the address.
    let ServeConfig { upstream, .. } =
        serve("https://10.0.0.5:8443", &["--upstream-server-name", "api.internal"]).unwrap();
    assert!(upstream.is_https());
    let tls = format!("{:?}", upstream.tls.expect("https:// is reached over TLS"));
    assert!(tls.contains(r#"server_name: Some("api.internal")"#), "{tls}");
}

#[test]
fn durations_and_counts_are_refused_by_clap_with_the_fix() {
    let base = ["opbound", "serve", "--spec", "api.yaml", "--upstream", "http://127.0.0.1:3000"];
    let cases: [(&[&str], &str); 6] = [
        (&["--store-timeout", "50"], "50 has no unit; write 50ms or 50s (units: ms, s, m, h)"),
        (&["--idle-timeout", "5d"], r#""5d" has an unknown unit; use ms, s, m or h"#),
        (&["--upstream-timeout", "0s"], "0s would answer every request with a 504"),
        (&["--lease-ttl", "0m"], "0m would let a concurrency lease lapse"),
        (&["--max-connections", "0"], "0 would refuse every connection; give at least 1"),
        (&["--max-connections-per-address", "many"], r#""many" is not a whole number"#),
    ];
    for (flag, says) in cases {
        let (kind, text) = refused_by_clap(&[&base[..], flag].concat());
        assert_eq!(kind, ErrorKind::ValueValidation, "{flag:?}");
        assert!(text.contains(flag[0]) && text.contains(says), "{flag:?}: {text}");
    }
}

#[test]
fn store_urls() {
    let ServeConfig { server, .. } = serve("http://127.0.0.1:3000", &["--store", "redis://127.0.0.1:6379/2"]).unwrap();
    let StoreConfig::Redis(target, settings) = &server.store else { panic!("{:?}", server.store) };
    assert_eq!(target, &Target::Single("redis://127.0.0.1:6379/2".to_string()));
    assert_eq!((settings.timeout, settings.lease_ttl), (Duration::from_millis(50), Duration::from_secs(300)));
    assert_eq!(settings.prefix, "opbound");
    assert!(server.options.shared_store);

    let base = ["opbound", "serve", "--spec", "api.yaml", "--upstream", "http://127.0.0.1:3000"];
    for bad in ["memroy", "http://127.0.0.1:6379", "redis+cluster://", "redis+sentinel://s:26379"] {
        let (kind, text) = refused_by_clap(&[&base[..], &["--store", bad]].concat());
        assert_eq!(kind, ErrorKind::ValueValidation, "{bad}");
        assert!(text.contains("--store") && text.contains(bad), "{bad}: {text}");
    }

    let (code, message) =
        refusal(serve("http://127.0.0.1:3000", &["--store", "rediss://r:6380", "--store-ca-file", "/nonexistent/ca"]));
    assert_eq!(code, exit::UNREADABLE);
    assert!(message.starts_with("cannot read --store-ca-file /nonexistent/ca: "), "{message}");
    let ca = TempFile::new("store-ca.pem", "-----BEGIN CERTIFICATE-----\n");
    let ServeConfig { server, .. } =
        serve("http://127.0.0.1:3000", &["--store", "rediss://r:6380", "--store-ca-file", ca.path()]).unwrap();
    let StoreConfig::Redis(_, settings) = &server.store else { panic!("{:?}", server.store) };
    assert_eq!(settings.ca.as_deref(), Some(&b"-----BEGIN CERTIFICATE-----\n"[..]), "read, checked when connecting");
}

#[test]
fn shared_store_flags_with_the_memory_store_are_refused() {
    let (code, message) = refusal(serve("http://127.0.0.1:3000", &["--store-prefix", "billing"]));
    assert_eq!(code, exit::UNREADABLE);
    assert_eq!(
        message,
        "--store-prefix applies only to a shared store, and counters are in memory here (--store memory, the default); \
         remove it or pass --store redis://HOST"
    );
    let (_, message) = refusal(decide(&[
        "--gateway",
        "nginx",
        "--trusted-proxy",
        "127.0.0.1",
        "--store",
        "memory",
        "--store-timeout",
        "20ms",
        "--lease-ttl",
        "1m",
        "--store-ca-file",
        "ca",
    ]));
    assert!(
        message.starts_with("--store-timeout, --lease-ttl, --store-ca-file apply only to a shared store"),
        "{message}"
    );
    assert!(message.ends_with("remove them or pass --store redis://HOST"), "{message}");
    // With a shared store they are what they say.
    let ServeConfig { server, .. } =
        serve("http://127.0.0.1:3000", &["--store", "redis://r:6379", "--store-prefix", "billing"]).unwrap();
    let StoreConfig::Redis(_, settings) = &server.store else { panic!("{:?}", server.store) };
    assert_eq!(settings.prefix, "billing");
}

#[test]
fn identity_header_flags() {
    let cases = [
        ("user", r#"--identity-header "user" must look like user=X-User-Id, org=... or roles=..."#),
        ("name=X-User", r#"--identity-header identity field "name" is not user, org or roles"#),
        ("org=X Org", r#"--identity-header "X Org" is not a valid header name"#),
    ];
    for (flag, says) in cases {
        let (code, message) = refusal(serve("http://127.0.0.1:3000", &["--identity-header", flag]));
        assert_eq!((code, message.as_str()), (exit::UNREADABLE, says), "{flag}");
    }
    let ServeConfig { server, .. } = serve("http://127.0.0.1:3000", &["--identity-header", "org=X-Org"]).unwrap();
    let names: Vec<&str> = server.identity.headers.names().map(|n| n.as_str()).collect();
    assert_eq!(names, ["x-org"]);
}

#[test]
fn jwt_and_admin_flags() {
    let (code, message) = refusal(serve("http://127.0.0.1:3000", &["--jwt-audience", "api"]));
    assert_eq!(code, exit::UNREADABLE);
    assert_eq!(message, "--jwt-issuer and --jwt-audience need --jwt-secret-file or --jwt-public-key-file");
    let secret = TempFile::new("jwt-secret", "s3cret\n");
    let ServeConfig { server, .. } =
        serve("http://127.0.0.1:3000", &["--jwt-secret-file", secret.path(), "--jwt-issuer", "idp"]).unwrap();
    assert!(server.identity.jwt.is_some());

    let (code, message) = refusal(serve("http://127.0.0.1:3000", &["--admin-token-file", "token"]));
    assert_eq!(code, exit::UNREADABLE);
    assert_eq!(message, "--admin-token-file is for the admin listener; give --admin ADDR too");
    let empty = TempFile::new("empty-token", " \n");
    let (_, message) =
        refusal(serve("http://127.0.0.1:3000", &["--admin", "127.0.0.1:0", "--admin-token-file", empty.path()]));
    assert_eq!(message, format!("--admin-token-file {} is empty", empty.path()));
    let token = TempFile::new("token", "t0ken\n");
    let ServeConfig { server, .. } =
        serve("http://127.0.0.1:3000", &["--admin", "127.0.0.1:9901", "--admin-token-file", token.path()]).unwrap();
    let admin = AdminConfig { addr: "127.0.0.1:9901".parse().unwrap(), token: Some("t0ken".to_string()) };
    assert_eq!(server.admin, Some(admin));
}

#[test]
fn decide_config() {
    let DecideConfig { server, settings, grpc } = decide(&[
        "--gateway",
        "Envoy",
        "--trusted-proxy",
        "127.0.0.1",
        "--path-prefix",
        "/authz",
        "--deny-status",
        "403",
    ])
    .unwrap();
    assert_eq!(grpc, None, "gRPC only when asked for");
    let settings = settings.expect("an HTTP listener unless --no-http");
    assert_eq!(settings.gateway, Gateway::Envoy);
    assert_eq!(settings.path_prefix, "/authz");
    assert_eq!(settings.deny_status, Some(StatusCode::FORBIDDEN));
    assert_eq!(settings.escaped_slashes, EscapedSlashes::Reject);
    assert_eq!(server.listen, "127.0.0.1:9090".parse::<SocketAddr>().unwrap(), "beside a gateway on 8080");
    assert!(server.options.decision_service);
    assert!(server.trusted.trusts(IpAddr::from([127, 0, 0, 1])));

    let DecideConfig { settings, .. } =
        decide(&["--gateway", "nginx", "--trusted-proxy", "10.0.0.0/8", "--escaped-slashes", "unescape"]).unwrap();
    let settings = settings.unwrap();
    assert_eq!((settings.gateway, settings.deny_status), (Gateway::Nginx, None));
    assert_eq!(settings.escaped_slashes, EscapedSlashes::Unescape);

    // gRPC beside the HTTP listener, or instead of it (then no --gateway is needed).
    let grpc_addr: SocketAddr = "127.0.0.1:9091".parse().unwrap();
    let DecideConfig { settings, grpc, .. } =
        decide(&["--gateway", "envoy", "--trusted-proxy", "127.0.0.1", "--grpc", "127.0.0.1:9091"]).unwrap();
    assert_eq!((settings.map(|s| s.gateway), grpc), (Some(Gateway::Envoy), Some(grpc_addr)));
    let DecideConfig { settings, grpc, .. } =
        decide(&["--trusted-proxy", "127.0.0.1", "--grpc", "127.0.0.1:9091", "--no-http"]).unwrap();
    assert_eq!((settings.is_none(), grpc), (true, Some(grpc_addr)));
}

#[test]
fn decide_grpc_refusals() {
    let (code, message) =
        refusal(decide(&["--gateway", "envoy", "--trusted-proxy", "127.0.0.1", "--grpc", "127.0.0.1:9090"]));
    assert_eq!(code, exit::UNREADABLE);
    assert!(message.contains("is where the HTTP decision service listens"), "{message}");
    let base = ["opbound", "decide", "--spec", "api.yaml", "--trusted-proxy", "127.0.0.1"];
    let with = |more: &[&'static str]| base.iter().copied().chain(more.iter().copied()).collect::<Vec<_>>();
    let (kind, _) = refused_by_clap(&with(&["--no-http"]));
    assert_eq!(kind, ErrorKind::MissingRequiredArgument, "--no-http needs --grpc");
    for clash in [&["--gateway", "envoy"][..], &["--listen", "127.0.0.1:1"], &["--deny-status", "403"]] {
        let mut args = with(&["--grpc", "127.0.0.1:9091", "--no-http"]);
        args.extend_from_slice(clash);
        let (kind, _) = refused_by_clap(&args);
        assert_eq!(kind, ErrorKind::ArgumentConflict, "{clash:?} means nothing without the HTTP listener");
    }
}

#[test]
fn decide_refusals() {
    let no_proxy = "decide believes what a gateway says about a request only from the gateway: give its address with \
                    --trusted-proxy (for example --trusted-proxy 127.0.0.1)";
    let deny = "--deny-status must be an HTTP error status from 400 to 599";
    let cases: [(&[&str], &str); 6] = [
        (&["--gateway", "nginx"], no_proxy),
        (
            &["--gateway", "caddy", "--trusted-proxy", "127.0.0.1", "--path-prefix", "/authz"],
            "--path-prefix is only for --gateway envoy; the others send the original path in a header",
        ),
        (&["--gateway", "nginx", "--trusted-proxy", "127.0.0.1", "--deny-status", "302"], deny),
        (&["--gateway", "nginx", "--trusted-proxy", "127.0.0.1", "--deny-status", "1000"], deny),
        // Several wrong: the deny status first, then the missing proxy, as always.
        (&["--gateway", "nginx", "--deny-status", "200", "--path-prefix", "/x"], deny),
        (&["--gateway", "nginx", "--path-prefix", "/x"], no_proxy),
    ];
    for (flags, says) in cases {
        let (code, message) = refusal(decide(flags));
        assert_eq!((code, message.as_str()), (exit::UNREADABLE, says), "{flags:?}");
    }
    let (kind, text) = refused_by_clap(&["opbound", "decide", "--spec", "api.yaml", "--gateway", "apache"]);
    assert_eq!(kind, ErrorKind::ValueValidation);
    assert!(text.contains(r#""apache" is not nginx, caddy, traefik or envoy"#), "{text}");
    let (kind, _) = refused_by_clap(&["opbound", "decide", "--spec", "api.yaml", "--trusted-proxy", "127.0.0.1"]);
    assert_eq!(kind, ErrorKind::MissingRequiredArgument, "--gateway is required");
}

#[test]
fn max_key_body_is_a_size_with_a_unit_and_a_cap() {
    assert_eq!(serve("http://127.0.0.1:9", &[]).unwrap().max_key_body, 64 * 1024);
    assert_eq!(serve("http://127.0.0.1:9", &["--max-key-body", "1MiB"]).unwrap().max_key_body, 1 << 20);
    assert_eq!(serve("http://127.0.0.1:9", &["--max-key-body", "4096"]).unwrap().max_key_body, 4096);
    let (kind, text) =
        refused_by_clap(&["opbound", "serve", "--spec", "a", "--upstream", "http://x", "--max-key-body", "1GB"]);
    assert_eq!(kind, ErrorKind::ValueValidation);
    assert!(text.contains("\"1GB\" is not a size; write bytes, KiB or MiB, e.g. 64KiB"), "{text}");
    let (_, text) =
        refused_by_clap(&["opbound", "serve", "--spec", "a", "--upstream", "http://x", "--max-key-body", "65MiB"]);
    assert!(text.contains("is above 64MiB"), "{text}");
}

#[test]
fn request_log_flags() {
    use crate::server::observe::request_log::{KeyMode, Settings, secret_from};
    let upstream = "http://127.0.0.1:3000";
    assert_eq!(serve(upstream, &[]).unwrap().request_log, None, "off unless asked for");
    let ServeConfig { request_log, .. } = serve(upstream, &["--request-log", "requests.log"]).unwrap();
    let hashed = Settings { path: PathBuf::from("requests.log"), keys: KeyMode::Hashed, secret: None };
    assert_eq!(request_log, Some(hashed), "hashed with a random secret by default");
    let ServeConfig { request_log, .. } =
        serve(upstream, &["--request-log", "r.log", "--request-log-keys", "plain"]).unwrap();
    assert_eq!(request_log.map(|s| s.keys), Some(KeyMode::Plain));

    let secret = TempFile::new("request-log-secret", "0123456789abcdef0123\n");
    let ServeConfig { request_log, .. } =
        serve(upstream, &["--request-log", "r.log", "--request-log-secret-file", secret.path()]).unwrap();
    assert_eq!(request_log.and_then(|s| s.secret), Some(secret_from(b"0123456789abcdef0123").unwrap()));

    let short = TempFile::new("request-log-short", "too short\n");
    let (code, message) =
        refusal(serve(upstream, &["--request-log", "r.log", "--request-log-secret-file", short.path()]));
    assert_eq!(code, exit::UNREADABLE);
    assert_eq!(
        message,
        format!(
            "--request-log-secret-file {} holds 9 bytes, and a secret needs at least 16; write one with `head -c 32 /dev/urandom | base64`",
            short.path()
        )
    );
    let (_, message) = refusal(serve(upstream, &["--request-log-keys", "plain"]));
    assert_eq!(
        message,
        "--request-log-keys and --request-log-secret-file are for the request log; give --request-log PATH too"
    );
    let (_, message) = refusal(serve(
        upstream,
        &["--request-log", "r.log", "--request-log-keys", "plain", "--request-log-secret-file", secret.path()],
    ));
    assert_eq!(
        message,
        "--request-log-secret-file is for hashed keys, and --request-log-keys plain writes them as they came; remove one"
    );
    let (kind, text) =
        refused_by_clap(&["opbound", "serve", "--spec", "a.yaml", "--upstream", upstream, "--request-log-keys", "raw"]);
    assert_eq!(kind, ErrorKind::InvalidValue);
    assert!(text.contains("[possible values: hashed, plain]"), "{text}");
}
