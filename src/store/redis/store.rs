//! [`RedisStore`]: what a store on Redis holds (its target and settings, the connection once
//! made, the scripts, lease ids, the deny cache, the stats and the key secret instances share),
//! and its start. What it does is in the files beside it, each an `impl RedisStore` above this
//! one: connecting (`connect.rs`), deciding (`decide.rs`), the script calls (`script.rs`),
//! leases (`lease.rs`), reservations (`reserve.rs`) and quotas (`quota.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use super::conn::Conn;
use super::lua;
use super::target::{RedisSettings, Target};
use crate::engine::KeyHasher;
use crate::store::deny::DenyCache;
use crate::store::stats::StoreStats;

/// The counters of every instance on one Redis or Redis Cluster.
pub struct RedisStore {
    /// The Redis (or cluster) it counts in.
    pub target: Target,
    pub(super) settings: RedisSettings,
    pub(super) conn: ArcSwapOption<Conn>,
    pub(super) decide: redis::Script,
    pub(super) undo: redis::Script,
    pub(super) adjust: redis::Script,
    pub(super) settle: redis::Script,
    pub(super) leases: Leases,
    pub(super) deny: DenyCache,
    /// Calls, errors, fallbacks and whether it answers.
    pub stats: Arc<StoreStats>,
    pub(super) secret: tokio::sync::watch::Sender<Option<[u8; 16]>>,
    /// The id of the key secret instances share (`KeyHasher::id`), 0 until the store has answered.
    /// Decisions hashed with any other secret are not counted in the store.
    pub(super) secret_id: AtomicU64,
}

/// Lease ids, and the script that renews them.
pub(super) struct Leases {
    /// Unique per instance.
    seed: u64,
    /// Unique per request.
    seq: AtomicU64,
    pub(super) renew: redis::Script,
}

impl Leases {
    pub(super) fn new(script: fn(&str) -> redis::Script) -> Leases {
        Leases { seed: KeyHasher::random().hash(b"lease"), seq: AtomicU64::new(0), renew: script(lua::RENEW) }
    }

    /// A fresh lease id: every decision has its own, whether it takes a lease or not.
    pub(super) fn next(&self) -> String {
        format!("{:016x}{:x}", self.seed, self.seq.fetch_add(1, Ordering::Relaxed))
    }
}

impl RedisStore {
    /// Starts connecting in the background (with backoff, for as long as it takes); until then,
    /// every decision follows its bounds' `on-store-error`.
    pub fn start(target: Target, settings: RedisSettings) -> Arc<RedisStore> {
        RedisStore::start_running(target, settings, redis::Script::new)
    }

    /// [`RedisStore::start`] with each script as `script` makes it from its text: the tests run
    /// them on a clock they set (`exact_tests.rs`), since Redis's own cannot be.
    pub(super) fn start_running(
        target: Target,
        settings: RedisSettings,
        script: fn(&str) -> redis::Script,
    ) -> Arc<RedisStore> {
        let (secret, _) = tokio::sync::watch::channel(None);
        let store = Arc::new(RedisStore {
            target,
            deny: DenyCache::new(settings.deny_cache),
            settings,
            conn: ArcSwapOption::empty(),
            decide: script(lua::DECIDE),
            undo: script(lua::UNDO),
            adjust: script(lua::ADJUST),
            settle: script(lua::SETTLE),
            leases: Leases::new(script),
            stats: Arc::new(StoreStats::default()),
            secret,
            secret_id: AtomicU64::new(0),
        });
        tokio::spawn(store.clone().connect());
        store
    }

    /// The secret instances share for hashing caller keys, once the store has answered.
    pub fn secret(&self) -> tokio::sync::watch::Receiver<Option<[u8; 16]>> {
        self.secret.subscribe()
    }
}
