//! `opbound serve --spec SPEC --upstream URL`

use std::sync::Arc;
use std::time::Duration;

use crate::server::proxy::{Proxy, Upstream, UpstreamPool, UpstreamTls};

use super::flags::{connect_timeout, parse_duration, upstream_timeout};
use super::server::{ServerArgs, Started, init_logging, runtime};
use super::{Failure, exit};

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    server: ServerArgs,
    /// The API behind opbound: an http:// or https:// URL.
    #[arg(long, value_name = "URL", display_order = 0)]
    upstream: String,
    /// For an https:// upstream: trust the CA certificates in this PEM file instead of the
    /// system's roots.
    #[arg(long, value_name = "FILE")]
    upstream_ca_file: Option<std::path::PathBuf>,
    /// For an https:// upstream: the name to ask for (SNI) and verify in its certificate, when
    /// not the URL's host (an upstream reached by address).
    #[arg(long, value_name = "NAME")]
    upstream_server_name: Option<String>,
    /// How long connecting to the upstream may take.
    #[arg(long, default_value = "5s", value_parser = connect_timeout, value_name = "DURATION")]
    connect_timeout: Duration,
    /// How long the upstream may take to start its response.
    #[arg(long, default_value = "60s", value_parser = upstream_timeout, value_name = "DURATION")]
    upstream_timeout: Duration,
    /// How long an idle connection to the upstream is kept for the next request.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    upstream_idle_timeout: Duration,
    /// The most idle connections to the upstream kept for the next request.
    #[arg(long, default_value_t = 64, value_name = "N")]
    upstream_max_idle: usize,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    init_logging(&args.server.log_format);
    let mut upstream =
        Upstream::parse(&args.upstream, args.connect_timeout, args.upstream_timeout).map_err(Failure::unreadable)?;
    upstream.pool = UpstreamPool { idle_timeout: args.upstream_idle_timeout, max_idle: args.upstream_max_idle };
    if upstream.is_https() {
        let ca = match &args.upstream_ca_file {
            Some(p) => Some(
                std::fs::read(p)
                    .map_err(|e| Failure::unreadable(format!("cannot read --upstream-ca-file {}: {e}", p.display())))?,
            ),
            None => None,
        };
        upstream.tls =
            Some(UpstreamTls::new(ca.as_deref(), args.upstream_server_name.clone()).map_err(Failure::unreadable)?);
    } else if args.upstream_ca_file.is_some() || args.upstream_server_name.is_some() {
        return Err(Failure::usage("--upstream-ca-file and --upstream-server-name are for an https:// upstream"));
    }
    crate::server::descriptors::raise_descriptor_limit();
    let config = args.server.config(false)?;
    let settings = config.listen_settings.clone();
    runtime()?.block_on(async move {
        let Started { shared, listener, local } = config.start("traffic").await?;
        tracing::info!(listen = %local, upstream = %upstream.base, spec = %args.server.spec.display(), "serving");
        let proxy = Arc::new(Proxy::new(shared, upstream, args.server.escaped_slashes));
        for warning in settings.warnings() {
            tracing::warn!("{warning}");
        }
        crate::server::listen::serve(
            listener,
            settings,
            move |req, peer| proxy.clone().handle(req, peer),
            crate::server::listen::stop_signal(),
        )
        .await;
        Ok(exit::OK)
    })
}
