//! Counters in Redis, so a bound means the same on every instance. One script call per request
//! (per hash slot on a cluster) checks every bound and commits only if all admit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use smallvec::SmallVec;

use super::deny::DenyCache;
use crate::engine::{BoundVerdict, Check, CounterView, Decision, Limiter, Outcome, Permits, Plan, Rate, Report};
use crate::policy::{Mode, OnStoreError, Policy};

const SCRIPT: &str = include_str!("decide.lua");
const UNDO: &str = include_str!("undo.lua");
const RENEW: &str = include_str!("renew.lua");

/// How the store behaves.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Every store call gives up after this long, so a slow Redis does not stall traffic.
    pub timeout: Duration,
    /// How long a concurrency lease lives if its instance never returns it (crashed).
    pub lease_ttl: Duration,
    /// Prefix of every key opbound writes.
    pub prefix: String,
    /// Most refused callers the local deny cache remembers.
    pub deny_cache: usize,
    /// PEM certificates to trust for `rediss://` instead of the public roots (a private CA).
    pub ca: Option<Vec<u8>>,
}

impl Default for RedisSettings {
    fn default() -> RedisSettings {
        RedisSettings {
            timeout: Duration::from_millis(50),
            lease_ttl: Duration::from_secs(300),
            prefix: "opbound".into(),
            deny_cache: 100_000,
            ca: None,
        }
    }
}

/// Where the counters are: one Redis, or a Redis Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Single(String),
    Cluster(Vec<String>),
}

impl Target {
    /// `redis://host:port[/db]`, `rediss://...`, `redis+cluster://h1:p1,h2:p2`, or a
    /// comma-separated list of `redis://` nodes of one cluster.
    pub fn parse(url: &str) -> Result<Target, String> {
        if let Some(nodes) = url.strip_prefix("redis+cluster://").or_else(|| url.strip_prefix("rediss+cluster://")) {
            let scheme = if url.starts_with("rediss") { "rediss" } else { "redis" };
            let nodes: Vec<String> =
                nodes.split(',').filter(|n| !n.is_empty()).map(|n| format!("{scheme}://{n}")).collect();
            if nodes.is_empty() {
                return Err(format!("{url:?} names no cluster node"));
            }
            return Ok(Target::Cluster(nodes));
        }
        let parts: Vec<&str> = url.split(',').map(str::trim).collect();
        for p in &parts {
            if !(p.starts_with("redis://") || p.starts_with("rediss://")) {
                return Err(format!("store {p:?} is not memory or a redis:// URL"));
            }
            redis::Client::open(*p).map_err(|e| format!("store {p:?}: {e}"))?;
        }
        Ok(if parts.len() == 1 {
            Target::Single(parts[0].to_string())
        } else {
            Target::Cluster(parts.iter().map(|p| p.to_string()).collect())
        })
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// The target without credentials, for logs and the console.
    pub fn display(&self) -> String {
        let clean = |u: &str| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}{}", &u[..s + 3], &u[at + 1..]),
            _ => u.to_string(),
        };
        match self {
            Target::Single(u) => clean(u),
            Target::Cluster(nodes) => nodes.iter().map(|n| clean(n)).collect::<Vec<_>>().join(","),
        }
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn run<T: redis::FromRedisValue>(&self, invocation: &redis::ScriptInvocation<'_>) -> redis::RedisResult<T> {
        match self.clone() {
            Conn::Single(mut c) => invocation.invoke_async(&mut c).await,
            Conn::Cluster(mut c) => invocation.invoke_async(&mut c).await,
        }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self.clone() {
            Conn::Single(mut c) => cmd.query_async(&mut c).await,
            Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
        }
    }
}

/// What the store has been doing, for metrics, logs and the console.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub up: AtomicBool,
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub deny_hits: AtomicU64,
    pub fallbacks: AtomicU64,
    pub latency: crate::latency::Latency,
}

pub struct RedisStore {
    pub target: Target,
    settings: RedisSettings,
    conn: ArcSwapOption<Conn>,
    script: redis::Script,
    undo: redis::Script,
    renew: Arc<redis::Script>,
    deny: DenyCache,
    pub stats: StoreStats,
    secret: tokio::sync::watch::Sender<Option<[u8; 16]>>,
    /// The id of the key secret instances share (`KeyHasher::id`), 0 until the store has answered.
    /// Decisions hashed with any other secret are not counted in the store.
    secret_id: AtomicU64,
    /// Lease ids: unique per instance (a random seed) and per request (a sequence).
    lease_seed: u64,
    lease_seq: AtomicU64,
}

/// One check's answer from the store.
#[derive(Clone, Copy, Debug)]
struct Remote {
    admitted: bool,
    remaining: u32,
    reset_us: u64,
    retry_us: u64,
}

impl RedisStore {
    /// Starts connecting in the background (with backoff, for as long as it takes); until then,
    /// every decision follows its bounds' `on-store-error`.
    pub fn start(target: Target, settings: RedisSettings) -> Arc<RedisStore> {
        let (secret, _) = tokio::sync::watch::channel(None);
        let store = Arc::new(RedisStore {
            target,
            deny: DenyCache::new(settings.deny_cache),
            settings,
            conn: ArcSwapOption::empty(),
            script: redis::Script::new(SCRIPT),
            undo: redis::Script::new(UNDO),
            renew: Arc::new(redis::Script::new(RENEW)),
            stats: StoreStats::default(),
            secret,
            secret_id: AtomicU64::new(0),
            lease_seed: crate::engine::KeyHasher::random().hash(b"lease"),
            lease_seq: AtomicU64::new(0),
        });
        tokio::spawn(store.clone().connect());
        store
    }

    /// The secret instances share for hashing caller keys, once the store has answered.
    pub fn secret(&self) -> tokio::sync::watch::Receiver<Option<[u8; 16]>> {
        self.secret.subscribe()
    }

    async fn connect(self: Arc<Self>) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.open().await {
                Ok(conn) => match self.shared_secret(&conn).await {
                    Ok(secret) => {
                        self.adopt(secret);
                        self.conn.store(Some(Arc::new(conn)));
                        self.mark(true);
                        self.probe().await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(store = %self.target.display(), error = %e, "store connected but cannot read the key secret")
                    }
                },
                Err(e) => {
                    tracing::warn!(store = %self.target.display(), error = %e, retry_in = ?delay, "cannot connect to the store")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    /// While the store is marked down, asks it every second whether it is back, so recovery shows
    /// (in metrics, logs and the console) even before traffic tries it.
    /// Every five seconds it also checks the shared key secret is still there (a `FLUSHALL`
    /// removes it), putting this instance's back, or adopting another that got there first.
    async fn probe(&self) {
        for tick in 1u64.. {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let Some(conn) = self.conn.load_full() else { continue };
            if self.stats.up.load(Ordering::Relaxed) {
                if tick % 5 == 0
                    && let Ok(Ok(secret)) =
                        tokio::time::timeout(Duration::from_secs(1), self.shared_secret(&conn)).await
                {
                    self.adopt(secret);
                }
                continue;
            }
            let pong = tokio::time::timeout(Duration::from_secs(1), conn.query::<String>(&redis::cmd("PING"))).await;
            if matches!(pong, Ok(Ok(_))) {
                self.mark(true);
            }
        }
    }

    /// Whether decisions hashed with this hasher are counted in the store: it answers, and the
    /// hasher holds the secret the instances share.
    pub fn counts_with(&self, hasher: &crate::engine::KeyHasher) -> bool {
        self.stats.up.load(Ordering::Relaxed) && hasher.id() == self.secret_id.load(Ordering::Relaxed)
    }

    /// Takes a secret as the one instances share, telling the server when it changes.
    fn adopt(&self, secret: [u8; 16]) {
        let id = crate::engine::KeyHasher::with_secret(secret).id();
        if self.secret_id.swap(id, Ordering::Relaxed) != id {
            // `send_replace` stores the value even while nobody listens yet (`send` would drop it).
            self.secret.send_replace(Some(secret));
        }
    }

    async fn open(&self) -> redis::RedisResult<Conn> {
        match &self.target {
            Target::Single(url) => {
                let client = match &self.settings.ca {
                    Some(ca) => redis::Client::build_with_tls(url.as_str(), self.certificates(ca))?,
                    None => redis::Client::open(url.as_str())?,
                };
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(Some(Duration::from_secs(1)))
                    // Our own loop retries the first connection (and says so in the logs).
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(2));
                Ok(Conn::Single(ConnectionManager::new_with_config(client, config).await?))
            }
            Target::Cluster(nodes) => {
                let mut builder = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(Duration::from_secs(1))
                    .response_timeout(Duration::from_secs(1));
                if let Some(ca) = &self.settings.ca {
                    builder = builder.certs(self.certificates(ca));
                }
                let client = builder.build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
        }
    }

    fn certificates(&self, ca: &[u8]) -> redis::TlsCertificates {
        redis::TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) }
    }

    /// Every instance on this store hashes caller keys with the same secret, created once by
    /// whichever instance comes first and kept in the store.
    async fn shared_secret(&self, conn: &Conn) -> redis::RedisResult<[u8; 16]> {
        let key = format!("{}:secret", self.settings.prefix);
        // Propose the secret already in use, if any, so a store that lost it gets it back.
        let proposal = match *self.secret.borrow() {
            Some(current) => current.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            None => {
                let fresh = crate::engine::KeyHasher::random();
                format!("{:016x}{:016x}", fresh.hash(b"k0"), fresh.hash(b"k1"))
            }
        };
        let _: Option<String> = conn.query(redis::cmd("SET").arg(&key).arg(&proposal).arg("NX")).await?;
        let stored: String = conn.query(redis::cmd("GET").arg(&key)).await?;
        let mut secret = [0u8; 16];
        for (i, byte) in secret.iter_mut().enumerate() {
            *byte = stored.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).unwrap_or(0);
        }
        Ok(secret)
    }

    fn mark(&self, up: bool) {
        let was = self.stats.up.swap(up, Ordering::Relaxed);
        if was != up {
            if up {
                tracing::info!(store = %self.target.display(), "store reachable: counts are shared");
            } else {
                tracing::warn!(store = %self.target.display(), "store unreachable: bounds follow their on-store-error (open, closed or local)");
            }
        }
    }

    /// The key of a bound's counter for a caller: a prefix, the bound (by id, and a fingerprint
    /// that changes when the bound does), and the hashed caller. Never a raw identifier.
    fn key(&self, policy: &Policy, check: &Check) -> String {
        let bound = &policy.bounds[check.bound()];
        let id: String =
            bound.id.chars().map(|c| if c.is_ascii_graphic() && !"{}".contains(c) { c } else { '_' }).collect();
        format!("{}:{}:{:016x}:{:016x}", self.settings.prefix, id, bound.fingerprint, check.key)
    }

    /// Decides a plan against the store: the deny cache first, then one script call (one per
    /// hash slot on a cluster). On a store failure each bound follows its `on-store-error`.
    pub async fn decide(&self, limiter: &Limiter, plan: &Plan) -> Decision {
        if plan.rejected.is_some() || plan.checks.is_empty() {
            return limiter.decide(plan);
        }
        let policy = limiter.policy();
        let clock = limiter.clock();
        let now = clock.now();
        if let Some(d) = self.denied(limiter, plan, now) {
            self.stats.deny_hits.fetch_add(1, Ordering::Relaxed);
            return d;
        }
        let checks = &plan.checks;
        let keys: Vec<String> = checks.iter().map(|c| self.key(policy, c)).collect();
        let lease = format!("{:016x}{:x}", self.lease_seed, self.lease_seq.fetch_add(1, Ordering::Relaxed));
        // Checks grouped by hash slot: one group on a single Redis.
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let slot = if self.target.is_cluster() { slot(k) } else { 0 };
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => g.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        // A plan hashed with any secret but the shared one must not be counted in the store: its
        // keys would be another instance's nobody else counts under.
        let shared = limiter.hasher().id() == self.secret_id.load(Ordering::Relaxed);
        let conn = if shared { self.conn.load_full() } else { None };
        let calls = groups.iter().map(|(_, group)| self.call(conn.as_deref(), policy, plan, &keys, group, &lease));
        let answers: Vec<Option<(u64, Vec<Remote>)>> = futures_join(calls).await;

        let mut remote: Vec<Option<Remote>> = vec![None; checks.len()];
        let mut store_now_us = 0;
        let mut committed: Vec<usize> = Vec::new();
        for ((_, group), answer) in groups.iter().zip(&answers) {
            if let Some((at, results)) = answer {
                store_now_us = *at;
                let refused_here = group.iter().zip(results).any(|(&i, r)| !r.admitted && enforced(policy, &checks[i]));
                for (&i, r) in group.iter().zip(results) {
                    remote[i] = Some(*r);
                }
                if !refused_here {
                    committed.extend(group.iter().copied());
                }
            }
        }
        let failed: Vec<usize> = (0..checks.len()).filter(|&i| remote[i].is_none()).collect();
        if !failed.is_empty() {
            self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        // The first refusal in declared order: a bound the store refused, or one whose store
        // failed and that fails closed.
        let refusal = (0..checks.len()).find_map(|i| {
            let def = &policy.bounds[checks[i].bound()].def;
            match remote[i] {
                Some(r) if !r.admitted && def.mode == Mode::Enforce => Some((i, false)),
                None if def.on_store_error == OnStoreError::Closed && def.mode == Mode::Enforce => Some((i, true)),
                _ => None,
            }
        });
        if let Some((i, unavailable)) = refusal {
            self.undo(conn.as_deref(), policy, plan, &keys, &committed, store_now_us, &lease).await;
            let check = checks[i];
            let rate = limiter.table(check.bound()).rate;
            let (report, outcome) = match remote[i] {
                Some(r) if !unavailable => {
                    let retry = r.retry_us * 1000;
                    if !matches!(rate, Rate::Concurrency { .. }) {
                        self.deny.refuse(
                            policy.bounds[check.bound()].fingerprint,
                            check.key,
                            check.cost,
                            now + retry,
                            now,
                        );
                    }
                    (report(&check, &rate, &r), Outcome::Limited { bound: check.bound() })
                }
                _ => (
                    Report {
                        bound: check.bound(),
                        limit: rate.capacity(),
                        remaining: 0,
                        reset: 0,
                        retry: 1_000_000_000,
                    },
                    Outcome::Unavailable { bound: check.bound() },
                ),
            };
            return Decision {
                outcome,
                report: Some(report),
                verdicts: verdicts(policy, plan, &remote),
                permits: Permits::default(),
            };
        }
        // Bounds that fall back to this instance's own counters decide next, atomically among
        // themselves; bounds that fail open are let through.
        let mut local = Plan::default();
        for &i in &failed {
            if policy.bounds[checks[i].bound()].def.on_store_error == OnStoreError::Local {
                local.checks.push(checks[i]);
            }
        }
        let local_decision = (!local.checks.is_empty()).then(|| limiter.decide(&local));
        if let Some(d) = &local_decision
            && !d.allowed()
        {
            self.undo(conn.as_deref(), policy, plan, &keys, &committed, store_now_us, &lease).await;
            return local_decision.expect("checked above");
        }
        // Allowed. Report the enforced bound with the least left.
        let mut best: Option<Report> = None;
        for (i, r) in remote.iter().enumerate() {
            let Some(r) = r else { continue };
            if enforced(policy, &checks[i]) {
                let rep = report(&checks[i], &limiter.table(checks[i].bound()).rate, r);
                if best.is_none_or(|b| rep.remaining < b.remaining) {
                    best = Some(rep);
                }
            }
        }
        let mut permits = Permits::default();
        let mut verdicts = verdicts(policy, plan, &remote);
        if let Some(d) = local_decision {
            if let Some(rep) = d.report
                && best.is_none_or(|b| rep.remaining < b.remaining)
            {
                best = Some(rep);
            }
            for v in d.verdicts {
                if let Some(slot) = verdicts.iter_mut().find(|x| x.bound == v.bound) {
                    *slot = v;
                }
            }
            permits.absorb(d.permits);
        }
        // Concurrency leases taken in the store go back when the response ends.
        let leased: Vec<(String, u32)> = checks
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                matches!(limiter.table(c.bound()).rate, Rate::Concurrency { .. })
                    && remote[*i].is_some_and(|r| r.admitted)
            })
            .map(|(i, c)| (keys[i].clone(), c.cost))
            .collect();
        if !leased.is_empty()
            && let Some(conn) = conn.clone()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let members = |key: &(String, u32)| (1..=key.1).map(|j| format!("{lease}:{j}")).collect::<Vec<_>>();
            let leased: Vec<(String, Vec<String>)> = leased.iter().map(|k| (k.0.clone(), members(k))).collect();
            // While the request is in flight its leases are renewed every third of their life;
            // when it ends (or the client leaves) renewal stops and the leases are removed.
            let (done, mut stopped) = tokio::sync::oneshot::channel::<()>();
            let ttl = self.settings.lease_ttl;
            let (renew, renewing, timeout) = (self.renew.clone(), leased.clone(), self.settings.timeout);
            let renew_conn = conn.clone();
            handle.spawn(async move {
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        () = tokio::time::sleep(ttl / 3) => {}
                    }
                    let mut invocation = renew.prepare_invoke();
                    invocation.arg(ttl.as_micros() as u64);
                    for (key, members) in &renewing {
                        invocation.key(key).arg(members.len());
                        for m in members {
                            invocation.arg(m);
                        }
                    }
                    let _ = tokio::time::timeout(timeout * 4, renew_conn.run::<i64>(&invocation)).await;
                }
            });
            permits.push_external(move || {
                let _ = done.send(());
                handle.spawn(async move {
                    for (key, members) in leased {
                        let mut cmd = redis::cmd("ZREM");
                        cmd.arg(&key).arg(&members);
                        let _: redis::RedisResult<i64> = conn.query(&cmd).await;
                    }
                });
            });
        }
        Decision { outcome: Outcome::Allowed, report: best, verdicts, permits }
    }

    /// A refusal from the local deny cache alone, without a round trip (for the identity-free
    /// bounds checked before identity work).
    pub fn early(&self, limiter: &Limiter, plan: &Plan) -> Option<Decision> {
        let d = self.denied(limiter, plan, limiter.clock().now());
        if d.is_some() {
            self.stats.deny_hits.fetch_add(1, Ordering::Relaxed);
        }
        d
    }

    /// A refusal from the deny cache, if any bound of the plan refused this caller recently.
    fn denied(&self, limiter: &Limiter, plan: &Plan, now: crate::engine::Nanos) -> Option<Decision> {
        let policy = limiter.policy();
        for check in &plan.checks {
            if !enforced(policy, check) {
                continue;
            }
            let fp = policy.bounds[check.bound()].fingerprint;
            if let Some(until) = self.deny.until(fp, check.key, check.cost, now) {
                let rate = limiter.table(check.bound()).rate;
                let report = Report {
                    bound: check.bound(),
                    limit: rate.capacity(),
                    remaining: 0,
                    reset: until - now,
                    retry: until - now,
                };
                let mut verdicts = SmallVec::new();
                verdicts.push(BoundVerdict { bound: check.bound, admitted: false, shadow: false, overflow: false });
                return Some(Decision {
                    outcome: Outcome::Limited { bound: check.bound() },
                    report: Some(report),
                    verdicts,
                    permits: Permits::default(),
                });
            }
        }
        None
    }

    /// One script call for a group of checks (all in one hash slot).
    async fn call(
        &self,
        conn: Option<&Conn>,
        policy: &Policy,
        plan: &Plan,
        keys: &[String],
        group: &[usize],
        lease: &str,
    ) -> Option<(u64, Vec<Remote>)> {
        let conn = conn?;
        let mut invocation = self.script.prepare_invoke();
        for &i in group {
            let check = plan.checks[i];
            let def = &policy.bounds[check.bound()].def;
            let (algo, window_us, burst) = match Rate::of(def) {
                Rate::SlidingWindow { window, .. } => (1, window / 1000, 0),
                Rate::TokenBucket { window, burst, .. } => (2, window / 1000, burst),
                Rate::Concurrency { .. } => (3, 0, 0),
            };
            invocation.key(&keys[i]);
            invocation
                .arg(algo)
                .arg(def.limit.get())
                .arg(window_us)
                .arg(burst)
                .arg(check.cost)
                .arg(u8::from(def.mode == Mode::Enforce))
                .arg(self.settings.lease_ttl.as_micros() as u64)
                .arg(lease);
        }
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let started = quanta::Instant::now();
        let answer = tokio::time::timeout(self.settings.timeout, conn.run::<Vec<i64>>(&invocation)).await;
        self.stats.latency.observe(started.elapsed());
        let values = match answer {
            Ok(Ok(v)) if v.len() == 1 + 4 * group.len() => v,
            Ok(Ok(v)) => {
                self.failed(&format!("the script answered {} values", v.len()));
                return None;
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                return None;
            }
            Err(_) => {
                self.failed(&format!("no answer within {:?}", self.settings.timeout));
                return None;
            }
        };
        self.mark(true);
        let at = values[0].max(0) as u64;
        let results = values[1..]
            .chunks(4)
            .map(|c| Remote {
                admitted: c[0] == 1,
                remaining: c[1].clamp(0, i64::from(u32::MAX)) as u32,
                reset_us: c[2].max(0) as u64,
                retry_us: c[3].max(0) as u64,
            })
            .collect();
        Some((at, results))
    }

    /// What a caller's counter says in the store, without counting anything: the decision
    /// script with a cost of 0, which it never commits.
    pub async fn inspect(&self, limiter: &Limiter, bound: usize, key: u64) -> Result<CounterView, String> {
        let policy = limiter.policy();
        let conn = self.conn.load_full().ok_or_else(|| "the store is not connected".to_string())?;
        let mut plan = Plan::default();
        plan.checks.push(Check { key, bound: bound as u32, cost: 0 });
        let keys = [self.key(policy, &plan.checks[0])];
        let exists: i64 = conn.query(redis::cmd("EXISTS").arg(&keys[0])).await.map_err(|e| e.to_string())?;
        let (_, results) = self
            .call(Some(&conn), policy, &plan, &keys, &[0], "inspect")
            .await
            .ok_or_else(|| "the store did not answer".to_string())?;
        let r = results[0];
        Ok(CounterView {
            tracked: exists == 1,
            limit: limiter.table(bound).rate.capacity(),
            remaining: r.remaining,
            reset: r.reset_us * 1000,
        })
    }

    /// Forgets a caller's counter in the store (and this instance's memory of refusing it).
    pub async fn forget(&self, limiter: &Limiter, bound: usize, key: u64) -> Result<bool, String> {
        let policy = limiter.policy();
        let conn = self.conn.load_full().ok_or_else(|| "the store is not connected".to_string())?;
        let check = Check { key, bound: bound as u32, cost: 1 };
        self.deny.forget(policy.bounds[bound].fingerprint, key);
        let removed: i64 =
            conn.query(redis::cmd("DEL").arg(self.key(policy, &check))).await.map_err(|e| e.to_string())?;
        Ok(removed == 1)
    }

    fn failed(&self, why: &str) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if self.stats.up.load(Ordering::Relaxed) {
            tracing::warn!(store = %self.target.display(), error = %why, "store call failed");
        }
        self.mark(false);
    }

    /// Takes back what groups already committed for a request that was refused after all (on a
    /// cluster, by another slot's group; or by a local fallback).
    #[allow(clippy::too_many_arguments)]
    async fn undo(
        &self,
        conn: Option<&Conn>,
        policy: &Policy,
        plan: &Plan,
        keys: &[String],
        committed: &[usize],
        at_us: u64,
        lease: &str,
    ) {
        let Some(conn) = conn else { return };
        if committed.is_empty() {
            return;
        }
        let mut by_slot: Vec<(u16, Vec<usize>)> = Vec::new();
        for &i in committed {
            let s = if self.target.is_cluster() { slot(&keys[i]) } else { 0 };
            match by_slot.iter_mut().find(|(x, _)| *x == s) {
                Some((_, g)) => g.push(i),
                None => by_slot.push((s, vec![i])),
            }
        }
        for (_, group) in by_slot {
            let mut invocation = self.undo.prepare_invoke();
            for i in group {
                let check = plan.checks[i];
                let def = &policy.bounds[check.bound()].def;
                let (algo, window_us) = match Rate::of(def) {
                    Rate::SlidingWindow { window, .. } => (1, window / 1000),
                    Rate::TokenBucket { window, .. } => (2, window / 1000),
                    Rate::Concurrency { .. } => (3, 0),
                };
                invocation.key(&keys[i]);
                invocation.arg(algo).arg(def.limit.get()).arg(window_us).arg(check.cost).arg(at_us).arg(lease);
            }
            let _ = tokio::time::timeout(self.settings.timeout, conn.run::<i64>(&invocation)).await;
        }
    }
}

fn enforced(policy: &Policy, check: &Check) -> bool {
    policy.bounds[check.bound()].def.mode == Mode::Enforce
}

fn report(check: &Check, rate: &Rate, r: &Remote) -> Report {
    Report {
        bound: check.bound(),
        limit: rate.capacity(),
        remaining: r.remaining,
        reset: r.reset_us * 1000,
        retry: r.retry_us * 1000,
    }
}

fn verdicts(policy: &Policy, plan: &Plan, remote: &[Option<Remote>]) -> SmallVec<[BoundVerdict; 4]> {
    plan.checks
        .iter()
        .zip(remote)
        .map(|(c, r)| BoundVerdict {
            bound: c.bound,
            admitted: r.is_none_or(|r| r.admitted),
            shadow: !enforced(policy, c),
            overflow: false,
        })
        .collect()
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    out.into_iter().map(|o| o.expect("every future finished")).collect()
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key, or of its `{hash tag}`.
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key.find('{').and_then(|open| {
        let close = key[open + 1..].find('}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    let data = tagged.unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
    }

    #[test]
    fn targets() {
        assert_eq!(Target::parse("redis://127.0.0.1:6379/2"), Ok(Target::Single("redis://127.0.0.1:6379/2".into())));
        assert_eq!(
            Target::parse("redis+cluster://a:1,b:2"),
            Ok(Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()]))
        );
        assert!(Target::parse("redis://a:1,redis://b:2").unwrap().is_cluster());
        assert!(Target::parse("memcached://x").is_err());
        assert_eq!(Target::Single("redis://user:pw@h:1".into()).display(), "redis://h:1");
    }
}
