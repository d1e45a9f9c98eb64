//! `opbound decide --spec SPEC`

use std::sync::Arc;

use crate::server::decide::grpc::Grpc;
use crate::server::decide::grpc::services::Services;
use crate::server::decide::{DecideSettings, Decider, Gateway};
use crate::server::net::admission::Peer;
use http::StatusCode;

use super::exit;
use super::failure::Failure;
use super::server::{ServerArgs, ServerConfig};
use super::snippet::{self, Snippet};
use super::start::{Started, init_logging, runtime};
use crate::server::facts::address::AddressHeader;

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
    #[arg(long, value_name = "GATEWAY", display_order = 0, required_unless_present_any = ["no_http", "print_gateway"])]
    gateway: Option<Gateway>,
    /// Print the configuration for this gateway (nginx, caddy, traefik or envoy) that asks
    /// decide as run with the other flags, and exit. Identity headers (--identity-header) are
    /// cleared in it, so a client never chooses whom it is counted as, unless
    /// --identity-set-by-gateway says your authentication in the gateway sets them.
    #[arg(long, value_name = "GATEWAY", conflicts_with = "no_http")]
    print_gateway: Option<Gateway>,
    /// With --print-gateway: an authentication layer in the gateway sets the identity headers;
    /// the printed configuration says where it goes and what it must set.
    #[arg(long, requires = "print_gateway")]
    identity_set_by_gateway: bool,
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
        let gateway = match (self.gateway, self.print_gateway) {
            (Some(g), Some(p)) if g != p => {
                return Err(Failure::usage(format!(
                    "--print-gateway {} is not the --gateway {} decide asks about; give one of them",
                    p.name(),
                    g.name()
                )));
            }
            (g, p) => g.or(p),
        };
        if gateway.is_some_and(|g| g != Gateway::Envoy) && !self.path_prefix.is_empty() {
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
        let settings = gateway.map(|gateway| DecideSettings {
            gateway,
            deny_status,
            path_prefix: self.path_prefix.clone(),
            escaped_slashes: server.escaped_slashes,
        });
        Ok(DecideConfig { server, settings, grpc: self.grpc })
    }

    /// The configuration `--print-gateway` prints for these flags, or why these flags cannot be
    /// served safely through that gateway.
    fn snippet(&self, gateway: Gateway, config: &DecideConfig) -> Result<String, Failure> {
        let server = &self.server;
        if server.client_address_header != AddressHeader::XForwardedFor {
            return Err(Failure::usage(format!(
                "the {} configuration writes the client's address in X-Forwarded-For, and a client's own \
                 Forwarded header would pass through it; run decide with --client-address-header x-forwarded-for \
                 (the default)",
                gateway.name()
            )));
        }
        let deny_status = config.settings.as_ref().and_then(|s| s.deny_status);
        if gateway == Gateway::Nginx && deny_status != Some(StatusCode::FORBIDDEN) {
            return Err(Failure::usage(
                "nginx's auth_request passes on only 2xx, 401 and 403 (any other status becomes a 500), and the \
                 nginx configuration turns a 403 into opbound's own answer: add --deny-status 403",
            ));
        }
        let mut flags = format!("--gateway {}", gateway.name());
        if let Some(status) = deny_status {
            flags.push_str(&format!(" --deny-status {}", status.as_u16()));
        }
        for proxy in &server.trusted_proxies {
            flags.push_str(&format!(" --trusted-proxy {proxy}"));
        }
        if !self.path_prefix.is_empty() {
            flags.push_str(&format!(" --path-prefix {}", self.path_prefix));
        }
        let identity = snippet::identity(&server.identity.identity_headers);
        if self.identity_set_by_gateway && identity.is_empty() {
            return Err(Failure::usage(
                "--identity-set-by-gateway says who sets the identity headers; name them with --identity-header",
            ));
        }
        for (field, header) in &identity {
            flags.push_str(&format!(" --identity-header {}={header}", field.name()));
        }
        Ok(Snippet {
            gateway,
            listen: config.server.listen,
            flags,
            path_prefix: self.path_prefix.clone(),
            identity,
            set_by_gateway: self.identity_set_by_gateway,
        }
        .render())
    }
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    if let Some(gateway) = args.print_gateway {
        let config = args.config()?;
        outln!("{}", args.snippet(gateway, &config)?.trim_end_matches('\n'));
        return Ok(exit::OK);
    }
    init_logging(&args.server.log_format);
    crate::server::net::descriptors::raise_descriptor_limit();
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
        let (http_stop, grpc_stop) =
            (crate::server::net::listen::stop_signal(), crate::server::net::listen::stop_signal());
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
            crate::server::net::listen::serve_workers(listener, listen_settings.clone(), workers, make, http_stop)
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
                Some(crate::server::net::listen::serve_workers(listener, listen_settings, workers, make, stop))
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
