//! `opbound serve --spec SPEC --upstream URL`

use std::sync::Arc;
use std::time::Duration;

use crate::server::observe::request_log::{self, KeyMode, RequestLog};
use crate::server::proxy::Proxy;
use crate::server::proxy::rewrite::Upgrades;
use crate::server::upstream::{Upstream, UpstreamPool, UpstreamTls};

use super::exit;
use super::failure::Failure;
use super::flags::{at_least_one, body_size, client_body_timeout, connect_timeout, parse_duration, upstream_timeout};
use super::server::{ServerArgs, ServerConfig, StoreConfig};
use super::start::{Started, init_logging, runtime};

/// How long past the upstream timeout a `count-when` reservation in a shared store waits for
/// its instance to settle it: the settle call itself, and a slow store.
const RESERVATION_MARGIN: Duration = Duration::from_secs(30);

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
    /// The most idle connections to the upstream kept for the next request, split evenly
    /// between the workers (at least one each).
    #[arg(long, default_value_t = 64, value_name = "N")]
    upstream_max_idle: usize,
    /// How long no idle connection to the upstream is reused once it wrote bytes past the end
    /// of a response (junk after a body, a body on a HEAD, 204 or 304): bytes it writes late
    /// would be read as the next request's answer. `0s` keeps reusing, each connection checked.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    upstream_stray_pause: Duration,
    /// The most requests in flight to the upstream at once, each holding an upstream connection;
    /// past it a request is answered 503 with Retry-After at once (default: the descriptors the
    /// client connections and the idle upstream connections leave).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    max_upstream_connections: Option<usize>,
    /// How long a request body forwarded upstream may go without a byte from the client before
    /// the request is cut and answered 408.
    #[arg(long, default_value = "60s", value_parser = client_body_timeout, value_name = "DURATION")]
    client_body_timeout: Duration,
    /// A protocol a client may switch to through opbound (`Upgrade`); repeat for several, or
    /// `none`. A request asking for any other has its `Upgrade` removed and is forwarded as an
    /// ordinary request; h2c is never passed on.
    #[arg(long = "allow-upgrade", value_name = "PROTOCOL", default_value = "websocket")]
    allow_upgrades: Vec<String>,
    /// The most of a request body read for a bound keyed on it (per: json:/POINTER or
    /// form:NAME, cost-from: json:/POINTER); a longer body has no such key, and is forwarded
    /// whole all the same.
    #[arg(long, default_value = "64KiB", value_parser = body_size, value_name = "SIZE")]
    max_key_body: usize,
    /// The most of a response body read for what a `settle: json:...` bound reads (the body
    /// passes whole all the same; past this, what was found by then stands).
    #[arg(long, default_value = "64MiB", value_parser = body_size, value_name = "SIZE")]
    settle_max_bytes: usize,
    /// Never ask for a stream's usage on the client's behalf. By default, where a bound settles
    /// from the body and the operation declares stream_options.include_usage (OpenAI's chat
    /// completions), a streamed request without it gets it, and the client the stream it asked for.
    #[arg(long)]
    no_ask_usage: bool,
    /// A response header the client never sees (e.g. the one a `settle: header:NAME` bound
    /// reads); repeat for several.
    #[arg(long = "strip-header", value_name = "NAME", value_parser = header_name)]
    strip_headers: Vec<http::HeaderName>,
    /// Append a JSON line per request to this file (created if missing; reopened on SIGHUP):
    /// its time, method, target, client, status, duration, operation, outcome and refusing
    /// bound, and the identity, credential, headers and cookies the spec's bounds read. What
    /// `opbound replay` reads to decide the traffic again.
    #[arg(long, value_name = "PATH")]
    request_log: Option<std::path::PathBuf>,
    /// How the request log writes values that identify a caller (users, orgs, credentials,
    /// keyed headers, cookies and query parameters): hashed (`h:` and 32 hex digits, equal for
    /// equal values; the default) or plain
    #[arg(long, value_name = "KEYS")]
    request_log_keys: Option<KeyMode>,
    /// The secret (at least 16 bytes) the request log hashes with, so hashes match across
    /// restarts and instances; without it, a random one per process.
    #[arg(long, value_name = "FILE")]
    request_log_secret_file: Option<std::path::PathBuf>,
}

fn header_name(s: &str) -> Result<http::HeaderName, super::flags::FlagError> {
    http::HeaderName::from_bytes(s.as_bytes()).map_err(|_| super::flags::FlagError::NotAHeaderName(s.to_string()))
}

/// `serve`'s flags, checked and with their files read: what it starts from.
pub(super) struct ServeConfig {
    /// What every server command starts from.
    pub server: ServerConfig,
    /// Where requests that pass are forwarded, and how.
    pub upstream: Upstream,
    /// Response headers removed before the client sees them (`--strip-header`).
    pub strip_headers: Vec<http::HeaderName>,
    /// `--max-key-body`: the most of a body read for the bounds keyed on it, in bytes.
    pub max_key_body: usize,
    /// `--settle-max-bytes`, and the cap on one event.
    pub settle_limits: crate::engine::usage::Limits,
    /// Not `--no-ask-usage`.
    pub ask_usage: bool,
    /// `--request-log` and how it writes keys, if a request log is kept.
    pub request_log: Option<request_log::Settings>,
    /// `--client-body-timeout`.
    pub client_body_timeout: Duration,
    /// `--allow-upgrade`.
    pub upgrades: Upgrades,
}

impl Args {
    /// Checks the upstream flags, then the server's, and reads the files they name. Call it
    /// after raising the descriptor limit, which sets the default --max-connections.
    pub(super) fn config(&self) -> Result<ServeConfig, Failure> {
        let upstream = self.upstream()?;
        let mut server = self.server.config(false)?;
        if let Some(tls) = &upstream.tls
            && server.options.fetch.is_default()
            && served_by(&server.spec, &upstream.base)
        {
            // The spec is the upstream's own document: whom the upstream is trusted by, so is it.
            server.options.fetch =
                crate::spec::fetch::Fetch::with_config(tls.config.clone(), tls.server_name.as_deref());
        }
        server.listen_settings.max_upstream_connections = self
            .max_upstream_connections
            .unwrap_or_else(|| crate::server::net::descriptors::default_max_upstream(self.upstream_max_idle));
        let upgrades = match self.allow_upgrades.as_slice() {
            [none] if none.eq_ignore_ascii_case("none") => Upgrades::new(Vec::new()),
            protocols => Upgrades::new(protocols.to_vec()),
        }
        .map_err(|e| Failure::usage(format!("--allow-upgrade: {e}")))?;
        if let StoreConfig::Redis(_, settings) = &mut server.store {
            // A request still waiting past this has been answered with a 504, which commits it;
            // only an instance that died leaves a reservation to lapse.
            settings.reservation_ttl = self.upstream_timeout + RESERVATION_MARGIN;
        }
        let request_log = self.request_log()?;
        Ok(ServeConfig {
            server,
            upstream,
            strip_headers: self.strip_headers.clone(),
            max_key_body: self.max_key_body,
            settle_limits: crate::engine::usage::Limits {
                max_bytes: self.settle_max_bytes as u64,
                ..crate::engine::usage::Limits::default()
            },
            ask_usage: !self.no_ask_usage,
            request_log,
            client_body_timeout: self.client_body_timeout,
            upgrades,
        })
    }

    /// The request log's settings, with its secret file read; `None` without `--request-log`.
    fn request_log(&self) -> Result<Option<request_log::Settings>, Failure> {
        let Some(path) = &self.request_log else {
            if self.request_log_keys.is_some() || self.request_log_secret_file.is_some() {
                return Err(Failure::usage(
                    "--request-log-keys and --request-log-secret-file are for the request log; give --request-log PATH too",
                ));
            }
            return Ok(None);
        };
        let keys = self.request_log_keys.unwrap_or_default();
        let secret = match &self.request_log_secret_file {
            None => None,
            Some(_) if keys == KeyMode::Plain => {
                return Err(Failure::usage(
                    "--request-log-secret-file is for hashed keys, and --request-log-keys plain writes them as they came; remove one",
                ));
            }
            Some(file) => {
                let bytes = std::fs::read(file).map_err(|e| {
                    Failure::unreadable(format!("cannot read --request-log-secret-file {}: {e}", file.display()))
                })?;
                let secret = request_log::secret_from(&bytes)
                    .map_err(|e| Failure::unreadable(format!("--request-log-secret-file {} {e}", file.display())))?;
                Some(secret)
            }
        };
        Ok(Some(request_log::Settings { path: path.clone(), keys, secret }))
    }

    /// The upstream: its URL, timeouts, pool, and for https:// whom to trust.
    fn upstream(&self) -> Result<Upstream, Failure> {
        let mut upstream = Upstream::parse(&self.upstream, self.connect_timeout, self.upstream_timeout)
            .map_err(|e| Failure::unreadable(e.to_string()))?;
        upstream.pool = UpstreamPool {
            idle_timeout: self.upstream_idle_timeout,
            max_idle: self.upstream_max_idle,
            stray_pause: self.upstream_stray_pause,
        };
        if upstream.is_https() {
            let ca = match &self.upstream_ca_file {
                Some(p) => Some(std::fs::read(p).map_err(|e| {
                    Failure::unreadable(format!("cannot read --upstream-ca-file {}: {e}", p.display()))
                })?),
                None => None,
            };
            upstream.tls = Some(
                UpstreamTls::new(ca.as_deref(), self.upstream_server_name.clone())
                    .map_err(|e| Failure::unreadable(e.to_string()))?,
            );
        } else if self.upstream_ca_file.is_some() || self.upstream_server_name.is_some() {
            return Err(Failure::usage("--upstream-ca-file and --upstream-server-name are for an https:// upstream"));
        }
        Ok(upstream)
    }
}

/// Whether a spec URL is on the upstream's origin (scheme, host and port).
fn served_by(spec: &std::path::Path, upstream: &http::Uri) -> bool {
    let Some(spec) = spec.to_str().and_then(|s| s.parse::<http::Uri>().ok()) else {
        return false;
    };
    let origin = |u: &http::Uri| {
        let scheme = u.scheme_str().map(str::to_ascii_lowercase);
        let default = if scheme.as_deref() == Some("https") { 443 } else { 80 };
        let host = u.host().map(str::to_ascii_lowercase);
        (scheme, host, u.port_u16().unwrap_or(default))
    };
    spec.authority().is_some() && origin(&spec) == origin(upstream)
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    init_logging(&args.server.log_format);
    crate::server::net::descriptors::raise_descriptor_limit();
    let upstream_idle = args.upstream_max_idle;
    let ServeConfig {
        server,
        upstream,
        strip_headers,
        max_key_body,
        settle_limits,
        ask_usage,
        request_log,
        client_body_timeout,
        upgrades,
    } = args.config()?;
    // Opened before anything listens: a log that cannot be written is said at once.
    let request_log =
        request_log.map(|s| RequestLog::start(&s)).transpose().map_err(|e| Failure::unreadable(e.to_string()))?;
    let settings = server.listen_settings.clone();
    let (spec, escaped_slashes) = (server.spec.clone(), server.escaped_slashes);
    runtime()?.block_on(async move {
        // Before anything is served: a SIGTERM from then on is a graceful stop.
        let stop = crate::server::net::listen::stop_signal();
        let listen = server.listen;
        let Started { shared, workers, mut listeners, state } = server.start(&[(listen, "traffic")]).await?;
        let (listener, local) = listeners.remove(0);
        if let Some(log) = &request_log {
            let _ = shared.request_log.set(log.clone());
            log.reopen_on_hangup();
        }
        tracing::info!(listen = %local, upstream = %upstream.base, spec = %spec.display(), workers, "serving");
        for warning in settings.warnings(Some(upstream_idle)) {
            tracing::warn!("{warning}");
        }
        // One proxy per worker: each keeps its own idle upstream connections.
        let make = || {
            let mut upstream = upstream.clone();
            upstream.pool = upstream.pool.per_worker(workers);
            let mut proxy = Proxy::new(shared.clone(), upstream, escaped_slashes, max_key_body);
            proxy.strip_headers = strip_headers.clone().into();
            proxy.settle_limits = settle_limits;
            proxy.ask_usage = ask_usage;
            proxy.body_patience = settings.header_read_timeout;
            proxy.client_body_timeout = client_body_timeout;
            proxy.upgrades = upgrades.clone();
            proxy.request_log = request_log.clone();
            let proxy = Arc::new(proxy);
            move |req, peer| proxy.clone().handle(req, peer)
        };
        crate::server::net::listen::serve_workers(listener, settings.clone(), workers, make, stop)
            .await
            .map_err(|e| Failure::unreadable(format!("cannot start the workers: {e}")))?;
        if let Some(state) = state {
            state.finish().await;
        }
        if let Some(log) = &request_log {
            log.finish().await;
        }
        Ok(exit::OK)
    })
}
