//! `opbound demo`: a stub upstream, opbound in front of it, and the curl lines that show it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::headers::HeaderStyle;
use crate::engine::{KeyHasher, Limiter, SystemClock};
use crate::server::demo::{PETSTORE, StubUpstream, showcase};
use crate::server::judge::Shared;
use crate::server::net::admission::Peer;
use crate::server::net::listen::{ListenSettings, serve, stop_signal};
use crate::server::proxy::Proxy;
use crate::server::upstream::Upstream;
use crate::spec::Source;

use super::exit;
use super::failure::Failure;
use super::specs::report;
use super::start::{init_logging, runtime};

/// Where the demo listens unless told: the address the README's curl lines use.
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

#[derive(clap::Args)]
pub(super) struct Args {
    /// The spec to serve; by default specs/petstore.yaml (a built-in copy when it is not here).
    #[arg(long, value_name = "SPEC")]
    spec: Option<PathBuf>,
    /// Where opbound listens [default: 127.0.0.1:8080, or a free port when that one is taken].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Which RateLimit headers to send: legacy, draft, both or none.
    #[arg(long, default_value = "legacy", value_name = "STYLE")]
    headers: HeaderStyle,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    init_logging("text");
    let (source, shown) = match &args.spec {
        Some(p) => (Source::read(p).map_err(|e| Failure::unreadable(e.to_string()))?, p.display().to_string()),
        None => match Source::read(Path::new("specs/petstore.yaml")) {
            Ok(s) => (s, "specs/petstore.yaml".to_string()),
            Err(_) => (
                Source::from_text(Path::new("petstore.yaml"), PETSTORE.to_string()),
                "the built-in petstore".to_string(),
            ),
        },
    };
    let loaded = report(crate::policy::load_source(source, &crate::Options::default()), "not serving it")?;
    let policy = Arc::new(loaded.policy);
    crate::server::net::descriptors::raise_descriptor_limit();
    runtime()?.block_on(async move {
        let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Failure::unreadable(format!("cannot listen for the stub upstream: {e}")))?;
        let listener = match args.listen {
            Some(addr) => tokio::net::TcpListener::bind(addr).await,
            None => match tokio::net::TcpListener::bind(DEFAULT_LISTEN).await {
                Ok(l) => Ok(l),
                Err(taken) => {
                    let moved = tokio::net::TcpListener::bind("127.0.0.1:0").await;
                    // A reader who typed the README's 8080 URLs must know why they fail.
                    if let Ok(Ok(addr)) = moved.as_ref().map(tokio::net::TcpListener::local_addr) {
                        let why = if taken.kind() == std::io::ErrorKind::AddrInUse {
                            format!("{DEFAULT_LISTEN} is taken")
                        } else {
                            format!("cannot listen on {DEFAULT_LISTEN} ({taken})")
                        };
                        errln!("opbound demo: {why}; the demo listens on {addr} instead");
                    }
                    moved
                }
            },
        };
        let listener = listener.map_err(|e| Failure::unreadable(format!("cannot listen for opbound: {e}")))?;
        let (Ok(upstream_addr), Ok(addr)) = (upstream_listener.local_addr(), listener.local_addr()) else {
            return Err(Failure::unreadable("cannot read the listening addresses"));
        };
        let stub = Arc::new(StubUpstream { policy: policy.clone() });
        tokio::spawn(serve(
            upstream_listener,
            ListenSettings::default(),
            move |req, peer: Peer| stub.clone().handle(req, peer.addr),
            std::future::pending(),
        ));

        let shared = Arc::new(Shared::new(
            Limiter::new(policy.clone(), Arc::new(SystemClock::new()), KeyHasher::random()),
            Default::default(),
            Default::default(),
            args.headers,
            shown.clone(),
            crate::store::Store::Memory,
        ));
        let upstream =
            Upstream::parse(&format!("http://{upstream_addr}"), Duration::from_secs(5), Duration::from_secs(30))
                .map_err(|e| Failure::unreadable(e.to_string()))?;
        print_guide(&policy, &shown, upstream_addr, addr);
        let proxy = Arc::new(Proxy::new(
            shared,
            upstream,
            crate::router::canonical::EscapedSlashes::Reject,
            crate::server::proxy::DEFAULT_MAX_KEY_BODY,
        ));
        serve(listener, ListenSettings::default(), move |req, peer| proxy.clone().handle(req, peer), stop_signal())
            .await;
        Ok(exit::OK)
    })
}

fn print_guide(policy: &crate::Policy, spec: &str, upstream: SocketAddr, addr: SocketAddr) {
    outln!("opbound demo: {spec}, bounded, in front of a stub upstream\n");
    outln!("  stub upstream   http://{upstream}   answers every operation with a little JSON");
    outln!("  opbound         http://{addr}   checks every request against the spec's bounds\n");
    match showcase(policy) {
        Some((path, what, limit)) => {
            let url = format!("http://{addr}{path}");
            outln!("Try it in another terminal:\n");
            outln!("  curl -i {url}");
            outln!("      200, with RateLimit-Limit, -Remaining and -Reset");
            outln!("  for i in $(seq {}); do curl -s -o /dev/null -w '%{{http_code}} ' {url}; done; echo", limit + 1);
            outln!("      the budget runs out: 200 ... 429");
            outln!("  curl -i {url}");
            outln!("      429 Too Many Requests, with Retry-After and a problem+json body naming the bound\n");
            outln!("The bound: {what}.");
        }
        None => outln!("Send requests to http://{addr}; `opbound routes` lists what is bounded."),
    }
    outln!("Ctrl-C stops the demo.");
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
