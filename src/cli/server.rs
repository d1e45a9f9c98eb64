//! What `serve`, `decide` and `demo` share: flags, logging, loading the spec, the runtime.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::headers::HeaderStyle;
use crate::engine::{KeyHasher, Limiter, SystemClock};
use crate::router::canonical::EscapedSlashes;
use crate::server::Shared;
use crate::server::address::{AddressHeader, Cidr, TrustedProxies};
use crate::server::identity::{IdentityHeaders, IdentityResolver, JwtSettings, JwtVerifier};
use crate::server::listen::ListenSettings;
use crate::server::reload::{Reloader, fingerprint};
use crate::store::Store;
use crate::store::redis::{RedisSettings, RedisStore, Target};

use super::flags::{at_least_one, header_read_timeout, lease_ttl, parse_duration, store_timeout};
use super::{Failure, SpecOptions, StoreChoice};

/// Where `serve` listens unless told: where clients (or a load balancer) arrive.
const DEFAULT_SERVE_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Where `decide` listens unless told: beside a gateway that itself listens on 8080, where the
/// README's gateway snippets ask.
const DEFAULT_DECIDE_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9090);

/// Flags every server command takes.
#[derive(clap::Args, Clone, Debug)]
// A server command says more about where counters live than the commands that only compile.
#[command(mut_arg("store", |a| a.help(
    "Where counters live: `memory` (per instance), or Redis shared by every instance: \
     `redis://HOST:PORT[/DB]`, `rediss://...`, `redis+cluster://H1:P1,H2:P2`"
)))]
pub(super) struct ServerArgs {
    /// The spec (JSON or YAML).
    #[arg(long, value_name = "SPEC", display_order = 0)]
    pub spec: PathBuf,
    /// Where to listen: for traffic (serve; default 127.0.0.1:8080, where clients arrive) or for
    /// a gateway's questions (decide; default 127.0.0.1:9090, beside a gateway on 8080).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Where to serve the admin endpoints, apart from traffic (off unless given): /healthz
    /// (answers ok while opbound runs), /metrics (Prometheus text: requests, refusals, latency,
    /// keys, store), /limits (the policy being served and its warnings, as JSON) and / (a console
    /// of every operation with its bounds and live counts).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// A file holding the token (trailing newline removed) that resets of a caller's counter on
    /// the admin listener must send as `Authorization: Bearer TOKEN`; without it, /counters only
    /// looks counters up.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// A proxy whose X-Forwarded-For, Forwarded and identity headers are believed (repeatable;
    /// an address or a block like 10.0.0.0/8). `decide` needs at least one: its gateway.
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    pub trusted_proxies: Vec<Cidr>,
    /// The header a trusted proxy writes the client's address in: x-forwarded-for, or forwarded
    /// (RFC 7239). Only this one is read; its rightmost entry that is not a trusted proxy wins.
    #[arg(long, default_value = "x-forwarded-for", value_name = "HEADER")]
    pub client_address_header: AddressHeader,
    /// What a `%2F` or `%5C` (an escaped slash or backslash) in a request path gets: reject (a
    /// 400), unescape (route and forward it as `/` or `\`), or keep (route it as part of its
    /// segment). See the README for which upstreams each suits.
    #[arg(long, default_value = "reject", value_name = "ACTION")]
    pub escaped_slashes: EscapedSlashes,
    /// Which RateLimit headers to send: legacy, draft, both or none.
    #[arg(long, default_value = "legacy", value_name = "STYLE")]
    pub headers: HeaderStyle,
    /// An identity header set by a trusted authenticating layer: user=HEADER, org=HEADER or
    /// roles=HEADER (comma-separated roles). Repeatable.
    #[arg(long = "identity-header", value_name = "FIELD=HEADER")]
    pub identity_headers: Vec<String>,
    /// Verify JWT bearer tokens with this HMAC secret (the file's bytes, trailing newline removed).
    #[arg(long, value_name = "FILE")]
    pub jwt_secret_file: Option<PathBuf>,
    /// Verify JWT bearer tokens with this PEM public key (RSA, EC or Ed25519).
    #[arg(long, value_name = "FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// Accept only tokens from this issuer (`iss`).
    #[arg(long, value_name = "ISS")]
    pub jwt_issuer: Option<String>,
    /// Accept only tokens for this audience (`aud`).
    #[arg(long, value_name = "AUD")]
    pub jwt_audience: Option<String>,
    /// The claim holding the caller's org.
    #[arg(long, default_value = "org", value_name = "CLAIM")]
    pub jwt_org_claim: String,
    /// The claim holding the caller's roles (a list, or a space-separated string).
    #[arg(long, default_value = "roles", value_name = "CLAIM")]
    pub jwt_roles_claim: String,
    #[command(flatten)]
    pub compile: SpecOptions,
    /// How long one store call may take before the bound's on-store-error applies.
    #[arg(long, default_value = "50ms", value_parser = store_timeout, value_name = "DURATION")]
    pub store_timeout: Duration,
    /// How long a concurrency lease lives in the store if its instance never returns it.
    #[arg(long, default_value = "5m", value_parser = lease_ttl, value_name = "DURATION")]
    pub lease_ttl: Duration,
    /// For rediss://: trust the certificates in this PEM file (a private CA) instead of the
    /// public roots.
    #[arg(long, value_name = "FILE")]
    pub store_ca_file: Option<PathBuf>,
    /// The prefix of every key opbound writes in the store.
    #[arg(long, default_value = "opbound", value_name = "PREFIX")]
    pub store_prefix: String,
    /// How long a client may take to send its request headers.
    #[arg(long, default_value = "10s", value_parser = header_read_timeout, value_name = "DURATION")]
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Duration,
    /// The most client connections open at once (default: what the descriptor limit allows,
    /// keeping one descriptor per connection for the upstream and some to spare).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_connections: Option<usize>,
    /// The most connections open at once from one address (trusted proxies are exempt).
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = at_least_one)]
    pub max_connections_per_address: usize,
    /// How long requests in flight may take to finish after SIGTERM or Ctrl-C (0s: stop at once).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_timeout: Duration,
    /// Run every bound in shadow mode: counted, reported in metrics and the console, never
    /// refusing. To try a spec on live traffic before enforcing it.
    #[arg(long)]
    pub shadow: bool,
    /// Do not watch the spec file; reload only on SIGHUP.
    #[arg(long)]
    pub no_watch: bool,
    /// Log lines as text or json.
    #[arg(long, default_value = "text", value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Starts logging to stderr. `OPBOUND_LOG` filters (default `info`).
pub(super) fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OPBOUND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = if format == "json" { builder.json().try_init() } else { builder.try_init() };
}

impl ServerArgs {
    fn listen_settings(&self) -> ListenSettings {
        ListenSettings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            shutdown_timeout: self.shutdown_timeout,
            max_connections: self.max_connections.unwrap_or_else(crate::server::listen::default_max_connections),
            max_connections_per_address: self.max_connections_per_address,
            trusted: self.trusted(),
        }
    }

    fn trusted(&self) -> TrustedProxies {
        TrustedProxies::new(self.trusted_proxies.clone()).reading(self.client_address_header)
    }

    fn options(&self, decision_service: bool) -> crate::Options {
        crate::Options { shadow: self.shadow, ..self.compile.options(decision_service) }
    }

    /// Reads every file the flags name and checks the flags that go together, before anything
    /// starts: a server that cannot run as asked says so at once, not after binding a port. Call
    /// it after raising the descriptor limit, which sets the default --max-connections.
    pub(super) fn config(&self, decision_service: bool) -> Result<ServerConfig, Failure> {
        let store = match &self.compile.store {
            StoreChoice::Memory => StoreConfig::Memory,
            StoreChoice::Redis(target) => {
                let ca = match &self.store_ca_file {
                    Some(p) => Some(std::fs::read(p).map_err(|e| {
                        Failure::unreadable(format!("cannot read --store-ca-file {}: {e}", p.display()))
                    })?),
                    None => None,
                };
                let settings = RedisSettings {
                    timeout: self.store_timeout,
                    lease_ttl: self.lease_ttl,
                    prefix: self.store_prefix.clone(),
                    ca,
                    ..RedisSettings::default()
                };
                StoreConfig::Redis(target.clone(), settings)
            }
        };
        let mut headers = IdentityHeaders::default();
        for spec in &self.identity_headers {
            headers.set(spec).map_err(|e| Failure::unreadable(format!("--identity-header {e}")))?;
        }
        let jwt = self.jwt().map_err(Failure::unreadable)?;
        let admin = self.admin()?;
        let listen = self.listen.unwrap_or(if decision_service { DEFAULT_DECIDE_LISTEN } else { DEFAULT_SERVE_LISTEN });
        Ok(ServerConfig {
            spec: self.spec.clone(),
            options: self.options(decision_service),
            store,
            identity: IdentityResolver { headers, jwt },
            trusted: self.trusted(),
            headers: self.headers,
            listen,
            admin,
            listen_settings: self.listen_settings(),
            watch: !self.no_watch,
        })
    }

    /// The admin listener and its token, if asked for.
    fn admin(&self) -> Result<Option<AdminConfig>, Failure> {
        let Some(addr) = self.admin else {
            if self.admin_token_file.is_some() {
                return Err(Failure::usage("--admin-token-file is for the admin listener; give --admin ADDR too"));
            }
            return Ok(None);
        };
        let token = match &self.admin_token_file {
            Some(p) => match std::fs::read_to_string(p) {
                Ok(text) if !text.trim().is_empty() => Some(text.trim().to_string()),
                Ok(_) => return Err(Failure::unreadable(format!("--admin-token-file {} is empty", p.display()))),
                Err(e) => {
                    return Err(Failure::unreadable(format!("cannot read --admin-token-file {}: {e}", p.display())));
                }
            },
            None => None,
        };
        Ok(Some(AdminConfig { addr, token }))
    }

    fn jwt(&self) -> Result<Option<JwtVerifier>, String> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let secret = match &self.jwt_secret_file {
            Some(p) => {
                let mut bytes = read(p)?;
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                Some(bytes)
            }
            None => None,
        };
        let public_key_pem = self.jwt_public_key_file.as_ref().map(read).transpose()?;
        if secret.is_none() && public_key_pem.is_none() {
            if self.jwt_issuer.is_some() || self.jwt_audience.is_some() {
                return Err(
                    "--jwt-issuer and --jwt-audience need --jwt-secret-file or --jwt-public-key-file".to_string()
                );
            }
            return Ok(None);
        }
        let settings = JwtSettings {
            secret,
            public_key_pem,
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            org_claim: self.jwt_org_claim.clone(),
            roles_claim: self.jwt_roles_claim.clone(),
        };
        JwtVerifier::new(&settings).map(Some)
    }
}

/// Where counters live, with everything a shared store needs read and checked.
enum StoreConfig {
    Memory,
    Redis(Target, RedisSettings),
}

/// The admin listener: where, and the token resets must send.
struct AdminConfig {
    addr: SocketAddr,
    token: Option<String>,
}

/// A server command's flags, validated and with their files read: what it starts from.
pub(super) struct ServerConfig {
    /// The spec served (and watched, unless --no-watch).
    pub spec: PathBuf,
    options: crate::Options,
    store: StoreConfig,
    identity: IdentityResolver,
    trusted: TrustedProxies,
    headers: HeaderStyle,
    listen: SocketAddr,
    admin: Option<AdminConfig>,
    /// Timeouts and limits of the traffic listener (and the admin one).
    pub listen_settings: ListenSettings,
    watch: bool,
}

/// Runs a future on a multi-threaded runtime.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::unreadable(format!("cannot start the runtime: {e}")))
}

/// Binds a listener, saying clearly when it cannot.
pub(super) async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener, Failure> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::unreadable(format!("cannot listen on {addr} for {what}: {e}")))
}

/// A server command started: what handlers share, and the listener for its traffic.
pub(super) struct Started {
    pub shared: Arc<Shared>,
    pub listener: tokio::net::TcpListener,
    pub local: SocketAddr,
}

impl ServerConfig {
    /// Loads the spec, binds the traffic listener (`what` it carries, for errors), starts the
    /// admin listener and the reloader: everything `serve` and `decide` do before serving.
    pub(super) async fn start(mut self, what: &str) -> Result<Started, Failure> {
        let admin = self.admin.take();
        let listen = self.listen;
        let watch = self.watch;
        let listen_settings = self.listen_settings.clone();
        let (shared, reloader) = self.shared().await?;
        let listener = bind(listen, what).await?;
        if let Some(admin) = admin {
            spawn_admin(admin, listen_settings, &shared).await?;
        }
        tokio::spawn(reloader.run(watch));
        let local = listener.local_addr().unwrap_or(listen);
        Ok(Started { shared, listener, local })
    }

    /// Loads the spec and builds what the handlers share, and the reloader that keeps it current;
    /// or why not.
    async fn shared(self) -> Result<(Arc<Shared>, Arc<Reloader>), Failure> {
        let loaded = super::report(crate::load(&self.spec, &self.options), "not serving it")?;
        if let Some(why) = self.identity.unfed(&loaded.policy) {
            return Err(Failure::unreadable(format!("{}: {why}", self.spec.display())));
        }
        for w in &loaded.policy.warnings {
            tracing::warn!(spec = %self.spec.display(), "{w}");
        }
        if self.options.shadow {
            tracing::warn!("shadow mode (--shadow): every bound counts and reports, and none refuses");
        }
        let served = fingerprint(&loaded.source.text);
        let (store, secret) = match self.store {
            StoreConfig::Memory => (Store::Memory, None),
            StoreConfig::Redis(target, settings) => {
                tracing::info!(store = %target.display(), "counting in a shared store");
                let redis = RedisStore::start(target, settings);
                // Give the store a moment, so the first requests are counted where they belong.
                let mut rx = redis.secret();
                let secret = tokio::time::timeout(Duration::from_secs(2), rx.wait_for(Option::is_some))
                    .await
                    .ok()
                    .and_then(|s| s.ok().and_then(|s| *s));
                (Store::Redis(redis), Some((rx, secret)))
            }
        };
        let hasher = match &secret {
            Some((_, Some(k))) => KeyHasher::with_secret(*k),
            _ => KeyHasher::random(),
        };
        let policy = Arc::new(loaded.policy);
        let limiter = Limiter::new(policy, Arc::new(SystemClock::new()), hasher);
        let shared = Arc::new(Shared::new(
            limiter,
            self.trusted,
            self.identity,
            self.headers,
            self.spec.display().to_string(),
            store,
        ));
        if let Some((rx, _)) = secret {
            shared.follow_store_secret(rx);
        }
        let reloader = Arc::new(Reloader::new(shared.clone(), self.spec, self.options, served));
        Ok((shared, reloader))
    }
}

/// Serves the admin listener in the background.
async fn spawn_admin(admin: AdminConfig, settings: ListenSettings, shared: &Arc<Shared>) -> Result<(), Failure> {
    let listener = bind(admin.addr, "the admin listener").await?;
    tracing::info!(admin = %listener.local_addr().map_or(admin.addr, |a| a), "admin listening");
    let admin = Arc::new(crate::server::admin::Admin { shared: shared.clone(), token: admin.token });
    tokio::spawn(crate::server::listen::serve(
        listener,
        settings,
        move |req, peer| admin.clone().handle(req, peer),
        std::future::pending(),
    ));
    Ok(())
}
