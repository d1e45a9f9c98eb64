//! The flags `serve` and `decide` share, and the `ServerConfig` they are parsed into before
//! anything starts (`start.rs` starts it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::engine::headers::HeaderStyle;
use crate::router::canonical::EscapedSlashes;
use crate::server::facts::address::{AddressHeader, Cidr, TrustedProxies};
use crate::server::facts::identity::IdentityResolver;
use crate::server::net::listen::ListenSettings;
use crate::store::redis::{RedisSettings, Target};

use super::failure::Failure;
use super::flags::{
    at_least_one, header_read_timeout, lease_ttl, max_streams, parse_duration, state_sync, store_timeout, workers,
};
use super::identity::IdentityArgs;
use super::specs::{SpecOptions, StoreChoice};

/// Where `serve` listens unless told: where clients (or a load balancer) arrive.
const DEFAULT_SERVE_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Where `decide` listens unless told: beside a gateway that itself listens on 8080, where the
/// book's gateway snippets ask.
const DEFAULT_DECIDE_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9090);

/// Flags every server command takes.
#[derive(clap::Args, Clone, Debug)]
// A server command says more about where counters live than the commands that only compile.
#[command(mut_arg("store", |a| a.help(
    "Where counters live: `memory` (per instance), or Redis shared by every instance: \
     `redis://HOST:PORT[/DB]`, `rediss://...`, `redis+cluster://H1:P1,H2:P2`, \
     `redis+sentinel://S1:P1,S2:P2/MASTER[/DB]`"
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
    /// segment). The book's page on what opbound trusts (docs/src/trust.md) says which
    /// upstreams each suits.
    #[arg(long, default_value = "reject", value_name = "ACTION")]
    pub escaped_slashes: EscapedSlashes,
    /// Which RateLimit headers to send: legacy, draft, both, none, or models (legacy, and what
    /// OpenAI and Anthropic send, which their SDKs read: x-ratelimit-*-requests/-tokens,
    /// anthropic-ratelimit-*, retry-after-ms, x-should-retry).
    #[arg(long, default_value = "legacy", value_name = "STYLE")]
    pub headers: HeaderStyle,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub compile: SpecOptions,
    /// With a redis:// store: how long one store call may take before the bound's
    /// on-store-error applies (default 50ms).
    #[arg(long, value_parser = store_timeout, value_name = "DURATION")]
    pub store_timeout: Option<Duration>,
    /// With a redis:// store: how long a concurrency lease lives in the store if its instance
    /// never returns it (default 5m).
    #[arg(long, value_parser = lease_ttl, value_name = "DURATION")]
    pub lease_ttl: Option<Duration>,
    /// With a rediss:// store: trust the certificates in this PEM file (a private CA) instead of the
    /// public roots.
    #[arg(long, value_name = "FILE")]
    pub store_ca_file: Option<PathBuf>,
    /// With a redis:// store: the prefix of every key opbound writes in it (default opbound).
    #[arg(long, value_name = "PREFIX")]
    pub store_prefix: Option<String>,
    /// Where quotas and count-when bounds keep their counts across restarts with the in-memory
    /// store (created if missing; only opened when the spec has such a bound).
    #[arg(long, default_value = ".opbound-state", value_name = "DIR")]
    pub state_dir: PathBuf,
    /// How often quota and count-when counts are written to the state directory: a hard kill
    /// loses at most this much of them; a graceful stop loses nothing.
    #[arg(long, default_value = "1s", value_parser = state_sync, value_name = "DURATION")]
    pub state_sync: Duration,
    /// Move the state file aside (kept as quotas.redb.discarded-TIME) and count quotas and
    /// count-when bounds afresh.
    #[arg(long)]
    pub state_start_over: bool,
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
    /// The most connections open at once from one address, and with serve the most requests in
    /// flight to the upstream from it, an HTTP/2 stream counting as a connection (trusted proxies
    /// are exempt).
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = at_least_one)]
    pub max_connections_per_address: usize,
    /// The most streams an HTTP/2 client may have open at once on one connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, default_value_t = crate::server::net::listen::DEFAULT_MAX_STREAMS, value_name = "N", value_parser = max_streams)]
    pub max_streams_per_connection: u32,
    /// The most HTTP/2 client connections idle (nothing in flight for a second) at once; past
    /// it, the one idle longest is closed gracefully (GOAWAY) and its client reconnects when it
    /// next asks. An idle HTTP/2 connection holds about 40 KiB; an idle HTTP/1.1 one about 5.
    #[arg(long, default_value_t = crate::server::net::idle_http2::DEFAULT_MAX_IDLE, value_name = "N", value_parser = at_least_one)]
    pub max_idle_http2_connections: usize,
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
    /// With --spec http(s)://...: fetch the spec again this often (with If-None-Match and
    /// If-Modified-Since), and reload when it changed; a fetch that fails keeps the policy serving.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub spec_poll: Option<std::time::Duration>,
    /// Log lines as text or json.
    #[arg(long, default_value = "text", value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Threads serving traffic, each with its connections and its own upstream connections
    /// (default: one per CPU this process may run on).
    #[arg(long, value_name = "N", value_parser = workers)]
    pub workers: Option<usize>,
}

impl ServerArgs {
    fn listen_settings(&self) -> ListenSettings {
        ListenSettings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            shutdown_timeout: self.shutdown_timeout,
            max_connections: self.max_connections.unwrap_or_else(crate::server::net::listen::default_max_connections),
            max_connections_per_address: self.max_connections_per_address,
            // Nothing is forwarded but by serve, which sets its own.
            max_upstream_connections: usize::MAX,
            max_streams_per_connection: self.max_streams_per_connection,
            max_idle_http2: self.max_idle_http2_connections,
            trusted: self.trusted(),
        }
    }

    fn trusted(&self) -> TrustedProxies {
        TrustedProxies::new(self.trusted_proxies.clone()).reading(self.client_address_header)
    }

    fn options(&self, decision_service: bool) -> Result<crate::Options, Failure> {
        Ok(crate::Options { shadow: self.shadow, ..self.compile.options(decision_service)? })
    }

    /// Flags that only a shared store reads are refused with the in-memory one: given there, they
    /// would change nothing, and an operator who typed them believes they did.
    fn no_shared_store_flags(&self) -> Result<(), Failure> {
        let given: Vec<&str> = [
            ("--store-timeout", self.store_timeout.is_some()),
            ("--lease-ttl", self.lease_ttl.is_some()),
            ("--store-ca-file", self.store_ca_file.is_some()),
            ("--store-prefix", self.store_prefix.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if given.is_empty() {
            return Ok(());
        }
        Err(Failure::unreadable(format!(
            "{} {} only to a shared store, and counters are in memory here (--store memory, the default); \
             remove {} or pass --store redis://HOST",
            given.join(", "),
            if given.len() == 1 { "applies" } else { "apply" },
            if given.len() == 1 { "it" } else { "them" }
        )))
    }

    /// Reads every file the flags name and checks the flags that go together, before anything
    /// starts: a server that cannot run as asked says so at once, not after binding a port. Call
    /// it after raising the descriptor limit, which sets the default --max-connections.
    pub(super) fn config(&self, decision_service: bool) -> Result<ServerConfig, Failure> {
        let store = match &self.compile.store {
            StoreChoice::Memory => {
                self.no_shared_store_flags()?;
                StoreConfig::Memory
            }
            StoreChoice::Redis(target) => {
                let ca = match &self.store_ca_file {
                    Some(p) => Some(std::fs::read(p).map_err(|e| {
                        Failure::unreadable(format!("cannot read --store-ca-file {}: {e}", p.display()))
                    })?),
                    None => None,
                };
                let defaults = RedisSettings::default();
                let settings = RedisSettings {
                    timeout: self.store_timeout.unwrap_or(defaults.timeout),
                    lease_ttl: self.lease_ttl.unwrap_or(defaults.lease_ttl),
                    prefix: self.store_prefix.clone().unwrap_or_else(|| defaults.prefix.clone()),
                    ca,
                    ..defaults
                };
                StoreConfig::Redis(target.clone(), settings)
            }
        };
        let identity = self.identity.resolver()?;
        let admin = self.admin()?;
        let listen = self.listen.unwrap_or(if decision_service { DEFAULT_DECIDE_LISTEN } else { DEFAULT_SERVE_LISTEN });
        Ok(ServerConfig {
            spec: self.spec.clone(),
            options: self.options(decision_service)?,
            store,
            identity,
            trusted: self.trusted(),
            headers: self.headers,
            escaped_slashes: self.escaped_slashes,
            listen,
            admin,
            listen_settings: self.listen_settings(),
            workers: self.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            watch: !self.no_watch,
            poll: self.spec_poll,
            state: StateConfig {
                dir: self.state_dir.clone(),
                sync: self.state_sync,
                start_over: self.state_start_over,
            },
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
}

/// Where counters live, with everything a shared store needs read and checked.
#[derive(Debug)]
pub(super) enum StoreConfig {
    /// Each instance counts on its own.
    Memory,
    /// One Redis or cluster every instance counts in, and how to talk to it.
    Redis(Target, RedisSettings),
}

/// The admin listener: where, and the token resets must send.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AdminConfig {
    pub addr: SocketAddr,
    pub token: Option<String>,
}

/// A server command's flags, validated and with their files read: what it starts from.
pub(super) struct ServerConfig {
    /// The spec served (and watched, unless --no-watch).
    pub spec: PathBuf,
    /// How the spec compiles (shadow, store, decision service).
    pub options: crate::Options,
    pub store: StoreConfig,
    /// Identity headers and the JWT verifier.
    pub identity: IdentityResolver,
    /// Whose forwarding and identity headers are believed, and the one address header read.
    pub trusted: TrustedProxies,
    /// Which RateLimit headers responses carry.
    pub headers: HeaderStyle,
    /// What an escaped slash in a request path gets.
    pub escaped_slashes: EscapedSlashes,
    /// Where traffic (serve) or a gateway's questions (decide) arrive.
    pub listen: SocketAddr,
    pub admin: Option<AdminConfig>,
    /// Timeouts and limits of the traffic listener (and the admin one).
    pub listen_settings: ListenSettings,
    /// Threads serving traffic (`--workers`).
    pub workers: usize,
    /// Whether the spec's file is watched for changes (SIGHUP reloads either way).
    pub watch: bool,
    /// How often a spec fetched from a URL is fetched again (`--spec-poll`).
    pub poll: Option<std::time::Duration>,
    /// Where quota counts are kept across restarts (in-memory store only).
    pub state: StateConfig,
}

/// The state directory's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StateConfig {
    /// `--state-dir`.
    pub dir: PathBuf,
    /// `--state-sync`: how often changes are written behind.
    pub sync: Duration,
    /// `--state-start-over`: the old state file is moved aside.
    pub start_over: bool,
}
