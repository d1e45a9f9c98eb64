//! `opbound serve --spec SPEC --upstream URL`

use std::sync::Arc;
use std::time::Duration;

use opbound::server::proxy::{Proxy, Upstream};

use super::exit;
use super::server::{ServerArgs, Started, connect_timeout, init_logging, runtime, upstream_timeout};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    server: ServerArgs,
    /// The API behind opbound: an http:// URL.
    #[arg(long, value_name = "URL", display_order = 0)]
    upstream: String,
    /// How long connecting to the upstream may take.
    #[arg(long, default_value = "5s", value_parser = connect_timeout, value_name = "DURATION")]
    connect_timeout: Duration,
    /// How long the upstream may take to start its response.
    #[arg(long, default_value = "60s", value_parser = upstream_timeout, value_name = "DURATION")]
    upstream_timeout: Duration,
}

pub fn run(args: Args) -> u8 {
    init_logging(&args.server.log_format);
    let upstream = match Upstream::parse(&args.upstream, args.connect_timeout, args.upstream_timeout) {
        Ok(u) => u,
        Err(e) => {
            errln!("error: {e}");
            return exit::UNREADABLE;
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let Started { shared, listener, local } = match args.server.start(false, "traffic").await {
            Ok(s) => s,
            Err(code) => return code,
        };
        tracing::info!(listen = %local, upstream = %upstream.base, spec = %args.server.spec.display(), "serving");
        let proxy = Arc::new(Proxy::new(shared, upstream, args.server.escaped_slashes));
        opbound::server::listen::serve(
            listener,
            args.server.listen_settings(),
            move |req, peer| proxy.clone().handle(req, peer),
            opbound::server::listen::stop_signal(),
        )
        .await;
        exit::OK
    })
}
