//! Starting `serve` and `decide` from their `ServerConfig`: logging, the runtime, the listeners,
//! what the handlers share, and the reloader.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{KeyHasher, Limiter, SystemClock};
use crate::server::judge::Shared;
use crate::server::net::admission::Peer;
use crate::server::net::listen::ListenSettings;
use crate::server::reload::{Reloader, fingerprint};
use crate::store::Store;
use crate::store::redis::RedisStore;

use super::failure::Failure;
use super::server::{AdminConfig, ServerConfig, StoreConfig};
use super::specs::report;
use crate::server::durable_state::DurableState;
use crate::store::durable::journal;

/// Starts logging to stderr. `OPBOUND_LOG` filters (default `info`).
pub(super) fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OPBOUND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = if format == "json" { builder.json().try_init() } else { builder.try_init() };
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

/// A server command started: what handlers share, its traffic listeners, and the writer of
/// durable state to stop once traffic has stopped (with the in-memory store).
pub(super) struct Started {
    pub shared: Arc<Shared>,
    /// Threads serving traffic.
    pub workers: usize,
    /// The traffic listeners, one per address asked for, in that order, with where each listens.
    pub listeners: Vec<(tokio::net::TcpListener, SocketAddr)>,
    pub state: Option<Arc<DurableState>>,
}

impl ServerConfig {
    /// Loads the spec, binds the traffic listeners (each with what it carries, for errors),
    /// starts the admin listener and the reloader: everything `serve` and `decide` do before
    /// serving.
    pub(super) async fn start(mut self, traffic: &[(SocketAddr, &str)]) -> Result<Started, Failure> {
        let admin = self.admin.take();
        let (watch, poll) = (self.watch, self.poll);
        let workers = self.workers;
        let listen_settings = self.listen_settings.clone();
        let (shared, reloader, state) = self.shared().await?;
        let mut listeners = Vec::with_capacity(traffic.len());
        for &(addr, what) in traffic {
            let listener = bind(addr, what).await?;
            let local = listener.local_addr().unwrap_or(addr);
            listeners.push((listener, local));
        }
        if let Some(admin) = admin {
            spawn_admin(admin, listen_settings, &shared).await?;
        }
        tokio::spawn(reloader.run(watch, poll));
        Ok(Started { shared, workers, listeners, state })
    }

    /// Loads the spec and builds what the handlers share, and the reloader that keeps it current;
    /// or why not.
    async fn shared(self) -> Result<(Arc<Shared>, Arc<Reloader>, Option<Arc<DurableState>>), Failure> {
        let loaded = report(crate::load(&self.spec, &self.options), "not serving it")?;
        if let Some(why) = self.identity.unfed(&loaded.policy) {
            return Err(Failure::unreadable(format!("{}: {why}", self.spec.display())));
        }
        for w in &loaded.policy.warnings {
            tracing::warn!(spec = %self.spec.display(), "{w}");
        }
        if self.options.shadow {
            tracing::warn!("shadow mode (--shadow): every bound counts and reports, and none refuses");
        }
        let served = fingerprint(&loaded.inputs);
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
        // Durable bounds (quotas, `count-when`) in memory keep their counts in the state
        // directory, hashed with its secret so that a caller's key means the same after a
        // restart. Without one it stays closed until a reload brings one (see ARCHITECTURE.md,
        // "the first durable bound").
        let durable_state = match &store {
            Store::Memory => {
                Some(Arc::new(DurableState::new(self.state.dir.clone(), self.state.start_over, self.state.sync)))
            }
            Store::Redis(_) => None,
        };
        let state = match &durable_state {
            Some(q) if DurableState::needed(&loaded.policy) => {
                Some(q.open().map_err(|e| Failure::unreadable(e.to_string()))?)
            }
            _ => None,
        };
        let hasher = match (&secret, &state) {
            (Some((_, Some(k))), _) => KeyHasher::with_secret(*k),
            (_, Some(state)) => KeyHasher::with_secret(state.secret()),
            _ => KeyHasher::random(),
        };
        let policy = Arc::new(loaded.policy);
        let clock = Arc::new(SystemClock::new());
        let limiter = Limiter::new(policy, clock.clone(), hasher);
        if let Some(state) = &state {
            let restored = journal::restore(state, &limiter, crate::engine::Clock::now(&*clock))
                .map_err(|e| Failure::unreadable(e.to_string()))?;
            tracing::info!(state = %state.path().display(), restored, "durable counts restored");
        }
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
        if let Some(q) = &durable_state {
            q.start_writing(&shared);
        }
        let reloader = Arc::new(Reloader::new(shared.clone(), self.spec, self.options, served, durable_state.clone()));
        Ok((shared, reloader, durable_state))
    }
}

/// Serves the admin listener in the background.
async fn spawn_admin(admin: AdminConfig, settings: ListenSettings, shared: &Arc<Shared>) -> Result<(), Failure> {
    let listener = bind(admin.addr, "the admin listener").await?;
    tracing::info!(admin = %listener.local_addr().map_or(admin.addr, |a| a), "admin listening");
    let admin = Arc::new(crate::server::admin::Admin { shared: shared.clone(), token: admin.token });
    tokio::spawn(crate::server::net::listen::serve(
        listener,
        settings,
        move |req, peer: Peer| admin.clone().handle(req, peer.addr),
        std::future::pending(),
    ));
    Ok(())
}
