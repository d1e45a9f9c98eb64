//! `opbound decide --spec SPEC`

use std::sync::Arc;

use crate::server::admission::Peer;
use crate::server::decide::{DecideSettings, Decider, Gateway};
use crate::server::grpc::{Grpc, Services};
use http::StatusCode;

use super::server::{ServerArgs, ServerConfig};
use super::start::{Started, init_logging, runtime};
use super::{Failure, exit};

#[derive(clap::Args)]
// decide refuses to start without a trusted proxy (saying why), so it is listed with the flags
// it needs.
#[command(mut_arg("trusted_proxies", |a| a.display_order(0)))]
pub(super) struct Args {
    #[command(flatten)]
    server: ServerArgs,
    /// The status of every refusal (nginx auth_request needs 403). Default: 429, or 400 for a
    /// request missing a key that `missing: reject` requires.
    #[arg(long, value_name = "N")]
    deny_status: Option<u16>,
    /// The gateway in front, which says where the original request is read from: nginx
    /// (X-Original-Method, X-Original-URI), caddy or traefik (X-Forwarded-Method,
    /// X-Forwarded-Uri), envoy (the decision request's own method and path after --path-prefix).
    /// Not needed with --no-http.
    #[arg(long, value_name = "GATEWAY", display_order = 0, required_unless_present = "no_http")]
    gateway: Option<Gateway>,
    /// Also serve Envoy's gRPC services here (HTTP/2 without TLS): ext_authz v3 Check, the
    /// rate-limit service v3 ShouldRateLimit, and grpc.health.v1.
    #[arg(long, value_name = "ADDR")]
    grpc: Option<std::net::SocketAddr>,
    /// Serve only gRPC (--grpc), with no HTTP decision listener.
    #[arg(long, requires = "grpc", conflicts_with_all = ["gateway", "deny_status", "path_prefix", "listen"])]
    no_http: bool,
    /// For Envoy ext_authz: the original path follows this prefix on the service's own requests.
    #[arg(long, default_value = "", value_name = "P")]
    path_prefix: String,
}

/// `decide`'s flags, checked and with their files read: what it starts from.
pub(super) struct DecideConfig {
    /// What every server command starts from.
    pub server: ServerConfig,
    /// Where the gateway's question is read from, and how a refusal answers; `None` with no
    /// HTTP listener (`--no-http`).
    pub settings: Option<DecideSettings>,
    /// Where the gRPC services listen, if anywhere.
    pub grpc: Option<std::net::SocketAddr>,
}

impl Args {
    /// Checks decide's own flags, then the server's, and reads the files they name. Call it
    /// after raising the descriptor limit, which sets the default --max-connections.
    pub(super) fn config(&self) -> Result<DecideConfig, Failure> {
        let deny_status = match self.deny_status.map(StatusCode::from_u16).transpose() {
            Ok(s) if s.is_none_or(|s| s.as_u16() >= 400) => s,
            _ => return Err(Failure::usage("--deny-status must be an HTTP error status from 400 to 599")),
        };
        if self.server.trusted_proxies.is_empty() {
            return Err(Failure::usage(
                "decide believes what a gateway says about a request only from the gateway: give its address with \
                 --trusted-proxy (for example --trusted-proxy 127.0.0.1)",
            ));
        }
        if self.gateway.is_some_and(|g| g != Gateway::Envoy) && !self.path_prefix.is_empty() {
            return Err(Failure::usage(
                "--path-prefix is only for --gateway envoy; the others send the original path in a header",
            ));
        }
        let mut server = self.server.config(true)?;
        // Only gRPC alone may be sent bodies (Envoy's ext_authz with_request_body); a gateway
        // asking over HTTP never sends one.
        server.options.decision_bodies = self.no_http;
        if self.grpc.is_some_and(|g| !self.no_http && g == server.listen && g.port() != 0) {
            return Err(Failure::usage(format!(
                "--grpc {} is where the HTTP decision service listens (--listen); give each its own port, or --no-http",
                server.listen
            )));
        }
        let settings = self.gateway.map(|gateway| DecideSettings {
            gateway,
            deny_status,
            path_prefix: self.path_prefix.clone(),
            escaped_slashes: server.escaped_slashes,
        });
        Ok(DecideConfig { server, settings, grpc: self.grpc })
    }
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    init_logging(&args.server.log_format);
    crate::server::descriptors::raise_descriptor_limit();
    let DecideConfig { server, settings, grpc } = args.config()?;
    let listen_settings = server.listen_settings.clone();
    let spec = server.spec.clone();
    let escaped_slashes = server.escaped_slashes;
    let mut traffic = Vec::new();
    if settings.is_some() {
        traffic.push((server.listen, "decisions"));
    }
    if let Some(addr) = grpc {
        traffic.push((addr, "gRPC decisions"));
    }
    runtime()?.block_on(async move {
        // Before anything is served: a SIGTERM from then on is a graceful stop.
        let (http_stop, grpc_stop) = (crate::server::listen::stop_signal(), crate::server::listen::stop_signal());
        let Started { shared, workers, mut listeners, state } = server.start(&traffic).await?;
        for warning in listen_settings.warnings(None) {
            tracing::warn!("{warning}");
        }
        let http = settings.map(|settings| {
            let (listener, local) = listeners.remove(0);
            tracing::info!(listen = %local, spec = %spec.display(), workers, "deciding");
            let decider = Arc::new(Decider { shared: shared.clone(), settings });
            let make = move || {
                let decider = decider.clone();
                move |req, peer: Peer| decider.clone().handle(req, peer.addr)
            };
            crate::server::listen::serve_workers(listener, listen_settings.clone(), workers, make, http_stop)
        });
        let grpc = match listeners.pop() {
            Some((listener, local)) => {
                tracing::info!(grpc = %local, spec = %spec.display(), workers, "deciding over gRPC");
                let grpc = Arc::new(Grpc::new(shared.clone(), escaped_slashes));
                let (services, health) = Services::new(grpc).await;
                health.set(true).await;
                let make = move || {
                    let services = services.clone();
                    move |req, peer: Peer| services.clone().call(req, peer.addr)
                };
                // Probes hear that it is stopping while the requests in flight finish.
                let stop = async move {
                    grpc_stop.await;
                    health.set(false).await;
                };
                Some(crate::server::listen::serve_workers(listener, listen_settings, workers, make, stop))
            }
            None => None,
        };
        let serving = async move {
            match http {
                Some(http) => http.await,
                None => Ok(()),
            }
        };
        let serving_grpc = async move {
            match grpc {
                Some(grpc) => grpc.await,
                None => Ok(()),
            }
        };
        tokio::try_join!(serving, serving_grpc)
            .map_err(|e| Failure::unreadable(format!("cannot start the workers: {e}")))?;
        if let Some(state) = state {
            state.finish().await;
        }
        Ok(exit::OK)
    })
}
