//! [`Conn`]: the store's nodes and which of them holds a key. Every script call and command goes
//! through it to the node of its key: the one server, the cluster master its hash slot maps to,
//! or the primary Sentinel names. A node whose circuit is open fails its calls at once; the
//! others never wait for it. The cluster's slot map (and Sentinel's primary) is read again in the
//! background: at once on `MOVED`, `ASK` or `READONLY`, twice a second while a node is out, and
//! every few seconds otherwise.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::Notify;

use super::node::{Node, PROBE_MAX, Verdict};
use super::target::{Target, address_of, at_address, slot};
use crate::store::stats::{Failures, StoreStats};

/// How long connecting to a node, or a probe of one, may take.
const DIAL: Duration = Duration::from_secs(1);

/// How long an operator's look-up or change of one counter may wait for the store.
pub(super) const ADMIN: Duration = Duration::from_secs(1);

/// How often the slot map (or Sentinel's primary) is read while every node answers; while one
/// does not, every [`DEGRADED`].
const CALM: Duration = Duration::from_secs(2);
const DEGRADED: Duration = Duration::from_millis(500);

/// The hash slots of a cluster.
const SLOTS: usize = 16384;
/// A slot no master serves (the slot map has a hole).
const UNSERVED: u16 = u16::MAX;

/// The store's nodes, and the way to the one holding a key.
pub(super) struct Conn {
    target: Target,
    ca: Option<Vec<u8>>,
    /// The target without credentials, for logs.
    store: String,
    stats: Arc<StoreStats>,
    topology: ArcSwap<Topology>,
    /// Every node of the topology by address, and nodes a redirect named since.
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    refresh: Notify,
    /// Slot map (or primary) reads that failed.
    refresh_failures: Failures,
}

/// Which node holds which keys.
#[derive(Default)]
struct Topology {
    nodes: Vec<Arc<Node>>,
    /// Per hash slot, its master's index in `nodes`; empty when one node holds every key.
    slots: Vec<u16>,
}

impl Topology {
    fn node_for(&self, key: &str) -> Option<&Arc<Node>> {
        if self.slots.is_empty() {
            return self.nodes.first();
        }
        self.nodes.get(usize::from(self.slots[usize::from(slot(key))]))
    }

    fn serves(&self, node: &Node) -> bool {
        self.nodes.iter().any(|n| std::ptr::eq(&**n, node))
    }

    /// Per slot, its master's address: two maps that say the same compare equal.
    fn layout(&self) -> Vec<&str> {
        self.slots.iter().map(|&i| self.nodes.get(usize::from(i)).map_or("", |n| n.addr.as_str())).collect()
    }
}

/// Where a call goes after its node answered `MOVED` or `ASK`.
enum Next {
    Fail(RedisError),
    Redirect(Arc<Node>, bool, RedisError),
}

/// Runs `$call` (which uses the routed connection `$c`) on the node of `$key`, within
/// `$timeout`, following one redirect.
macro_rules! routed {
    ($self:ident, $key:expr, $timeout:expr, |$c:ident| $call:expr) => {{
        let mut node = $self.route($key)?;
        let mut asking = false;
        let mut redirected = false;
        loop {
            let Some(conn) = node.connection() else { return Err(unreachable(&node.addr)) };
            let mut $c = Routed { conn, asking };
            let outcome = tokio::time::timeout($timeout, $call).await;
            match $self.settle(&node, outcome, $timeout) {
                Ok(v) => return Ok(v),
                Err(Next::Fail(e)) => return Err(e),
                Err(Next::Redirect(_, _, e)) if redirected => return Err(e),
                Err(Next::Redirect(to, ask, _)) => (node, asking, redirected) = (to, ask, true),
            }
        }
    }};
}

impl Conn {
    /// Connects to the target: the server, every master of the cluster (a master that does not
    /// answer starts open and is probed), or the primary Sentinel names.
    pub(super) async fn open(target: Target, ca: Option<Vec<u8>>, stats: Arc<StoreStats>) -> RedisResult<Arc<Conn>> {
        let conn = Arc::new(Conn {
            store: target.display(),
            target,
            ca,
            stats,
            topology: ArcSwap::from_pointee(Topology::default()),
            nodes: Mutex::new(HashMap::new()),
            refresh: Notify::new(),
            refresh_failures: Failures::default(),
        });
        match &conn.target {
            Target::Single(url) => {
                let node = Arc::new(Node::new(address_of(url), url.clone()));
                node.close(dial(&node.url, conn.ca.as_deref()).await?);
                conn.install(vec![node], Vec::new());
            }
            Target::Cluster(_) => {
                let ranges = conn.cluster_slots().await?;
                conn.adopt_slots(ranges).await;
                tokio::spawn(conn.clone().watch());
            }
            Target::Sentinel { .. } => {
                let addr = conn.primary().await?;
                let node = conn.node_at(&addr, false);
                node.close(dial(&node.url, conn.ca.as_deref()).await?);
                conn.install(vec![node], Vec::new());
                tokio::spawn(conn.clone().watch());
            }
        }
        Ok(conn)
    }

    /// Runs a script on the node of `key` (its first key), within `timeout`.
    pub(super) async fn run<T: redis::FromRedisValue>(
        self: &Arc<Self>,
        key: &str,
        invocation: &redis::ScriptInvocation<'_>,
        timeout: Duration,
    ) -> RedisResult<T> {
        routed!(self, key, timeout, |c| invocation.invoke_async(&mut c))
    }

    /// Runs a command on the node of `key`, within `timeout`.
    pub(super) async fn query<T: redis::FromRedisValue>(
        self: &Arc<Self>,
        key: &str,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<T> {
        routed!(self, key, timeout, |c| cmd.query_async(&mut c))
    }

    /// Each node of the topology, and whether it answers.
    pub(super) fn nodes(&self) -> Vec<(String, bool)> {
        self.topology.load().nodes.iter().map(|n| (n.addr.clone(), !n.is_open())).collect()
    }

    /// Whether every node answers.
    pub(super) fn all_up(&self) -> bool {
        let topology = self.topology.load();
        !topology.nodes.is_empty() && topology.nodes.iter().all(|n| !n.is_open())
    }

    fn route(&self, key: &str) -> RedisResult<Arc<Node>> {
        let topology = self.topology.load();
        topology.node_for(key).cloned().ok_or_else(|| {
            RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "no master serves the key's hash slot"))
        })
    }

    /// What a call's outcome says: its value, its error (opening the node's circuit when the node
    /// is out of reach), or the node a redirect names.
    fn settle<T>(
        self: &Arc<Self>,
        node: &Arc<Node>,
        outcome: Result<RedisResult<T>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T, Next> {
        match outcome {
            Ok(Ok(v)) => {
                node.answered();
                Ok(v)
            }
            Err(_) => {
                let why = format!("no answer within {timeout:?}, {} times in a row", super::node::TIMEOUTS_TO_OPEN);
                if node.timed_out(self.fallbacks()) == Verdict::Opened {
                    self.opened(node, &why);
                }
                let error = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {timeout:?}"));
                Err(Next::Fail(error.into()))
            }
            Ok(Err(e)) => {
                if let Some((addr, _)) = e.redirect_node() {
                    node.answered();
                    self.refresh.notify_one();
                    let ask = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                    return Err(Next::Redirect(self.node_at(addr, true), ask, e));
                }
                if out_of_reach(&e) {
                    if node.trip(self.fallbacks()) == Verdict::Opened {
                        self.opened(node, &e.to_string());
                    }
                } else {
                    node.answered();
                    if matches!(
                        e.kind(),
                        ErrorKind::Server(
                            ServerErrorKind::ReadOnly
                                | ServerErrorKind::MasterDown
                                | ServerErrorKind::ClusterDown
                                | ServerErrorKind::TryAgain
                        )
                    ) {
                        // Not (or no longer) the master of these keys: read the map again.
                        self.refresh.notify_one();
                    }
                }
                Err(Next::Fail(e))
            }
        }
    }

    fn fallbacks(&self) -> u64 {
        self.stats.fallbacks.load(Ordering::Relaxed)
    }

    fn registry(&self) -> MutexGuard<'_, HashMap<String, Arc<Node>>> {
        self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The node at `addr`, made (and, if `connect`, connected in the background) if it is new.
    fn node_at(self: &Arc<Self>, addr: &str, connect: bool) -> Arc<Node> {
        let (node, new) = {
            let mut nodes = self.registry();
            match nodes.get(addr) {
                Some(n) => (n.clone(), false),
                None => {
                    let node = Arc::new(Node::new(addr.to_string(), at_address(self.template(), addr)));
                    nodes.insert(addr.to_string(), node.clone());
                    (node, true)
                }
            }
        };
        if new && connect {
            self.probe(&node);
        }
        node
    }

    /// The URL whose scheme, credentials and database every node is reached with.
    fn template(&self) -> &str {
        match &self.target {
            Target::Single(url) => url,
            Target::Cluster(seeds) => &seeds[0],
            Target::Sentinel { primary, .. } => primary,
        }
    }

    /// A node's circuit just opened: one line, and a probe until it answers.
    fn opened(self: &Arc<Self>, node: &Arc<Node>, why: &str) {
        tracing::warn!(
            store = %self.store,
            node = %node.addr,
            error = %why,
            "store unreachable: bounds whose keys it holds follow their on-store-error (open, closed or local) until it answers"
        );
        self.stats.up.store(false, Ordering::Relaxed);
        self.probe(node);
    }

    /// Probes an open node with backoff until it answers (then closes it) or leaves the topology.
    fn probe(self: &Arc<Self>, node: &Arc<Node>) {
        if node.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        let (conn, node) = (self.clone(), node.clone());
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(100);
            loop {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(PROBE_MAX);
                let serves = conn.topology.load().serves(&node);
                if !serves && !conn.registry().contains_key(&node.addr) {
                    node.probing.store(false, Ordering::Relaxed);
                    if let Some(outage) = node.forget_outage() {
                        tracing::info!(
                            store = %conn.store,
                            node = %node.addr,
                            down_for = ?outage.since.elapsed(),
                            fallbacks = conn.fallbacks().saturating_sub(outage.fallbacks),
                            "store node no longer holds any keys (the cluster failed over), so it is no longer probed"
                        );
                    }
                    conn.recount();
                    return;
                }
                if let Ok(c) = dial(&node.url, conn.ca.as_deref()).await {
                    node.probing.store(false, Ordering::Relaxed);
                    conn.reconnected(&node, c);
                    return;
                }
            }
        });
    }

    fn reconnected(&self, node: &Node, c: MultiplexedConnection) {
        if let Some(outage) = node.close(c) {
            tracing::info!(
                store = %self.store,
                node = %node.addr,
                down_for = ?outage.since.elapsed(),
                fallbacks = self.fallbacks().saturating_sub(outage.fallbacks),
                "store reachable again: counts on its keys are shared (fallbacks: decisions that followed on-store-error meanwhile)"
            );
        }
        self.recount();
    }

    /// Whether the store is up: every node of the topology answers.
    fn recount(&self) {
        self.stats.up.store(self.all_up(), Ordering::Relaxed);
    }

    fn install(&self, nodes: Vec<Arc<Node>>, slots: Vec<u16>) {
        {
            let mut registry = self.registry();
            registry.retain(|addr, _| nodes.iter().any(|n| &n.addr == addr));
            for n in &nodes {
                registry.entry(n.addr.clone()).or_insert_with(|| n.clone());
            }
        }
        self.topology.store(Arc::new(Topology { nodes, slots }));
        self.recount();
    }

    /// Reads the slot map (or Sentinel's primary) again: at once when a call asks for it, twice a
    /// second while a node is out, every few seconds otherwise.
    async fn watch(self: Arc<Self>) {
        loop {
            let wait = if self.all_up() { CALM } else { DEGRADED };
            tokio::select! {
                () = self.refresh.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
            let read = match &self.target {
                Target::Cluster(_) => match self.cluster_slots().await {
                    Ok(ranges) => {
                        self.adopt_slots(ranges).await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Target::Sentinel { .. } => match self.primary().await {
                    Ok(addr) => {
                        self.adopt_primary(&addr).await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Target::Single(_) => return,
            };
            if let Err(e) = read {
                self.refresh_failures.record(&self.store, "cannot read where the store's keys are", &e.to_string());
            }
            // At most ten reads a second, however many calls ask.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The cluster's slot ranges and their masters, from the first node that answers: masters
    /// that answer first, then the seeds.
    async fn cluster_slots(&self) -> RedisResult<Vec<(u16, u16, String)>> {
        let known: Vec<Arc<Node>> = self.topology.load().nodes.iter().filter(|n| !n.is_open()).cloned().collect();
        let mut last = RedisError::from((ErrorKind::Io, "no seed node"));
        for node in &known {
            let Some(mut c) = node.connection() else { continue };
            match ask_slots(&mut c, &node.addr).await {
                Ok(ranges) => return Ok(ranges),
                Err(e) => last = e,
            }
        }
        let Target::Cluster(seeds) = &self.target else { return Err(last) };
        for seed in seeds {
            let asked = async { ask_slots(&mut dial(seed, self.ca.as_deref()).await?, &address_of(seed)).await };
            match asked.await {
                Ok(ranges) => return Ok(ranges),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Takes a slot map: masters new to it are connected first, so their slots are counted from
    /// the moment the map is in place; a master that does not answer starts open.
    async fn adopt_slots(self: &Arc<Self>, ranges: Vec<(u16, u16, String)>) {
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        let mut slots = vec![UNSERVED; SLOTS];
        for (start, end, addr) in ranges {
            let i = match nodes.iter().position(|n| n.addr == addr) {
                Some(i) => i,
                None => {
                    nodes.push(self.node_at(&addr, false));
                    nodes.len() - 1
                }
            };
            let served = usize::from(start)..=usize::from(end).min(SLOTS - 1);
            slots.get_mut(served).unwrap_or_default().fill(u16::try_from(i).unwrap_or(UNSERVED));
        }
        let current = self.topology.load();
        let next = Topology { nodes, slots };
        if !current.slots.is_empty() && current.layout() == next.layout() {
            return;
        }
        self.connect_new(&next.nodes).await;
        if !current.nodes.is_empty() {
            let masters: Vec<&str> = next.nodes.iter().map(|n| n.addr.as_str()).collect();
            tracing::info!(store = %self.store, masters = ?masters, "store cluster's slot map changed");
        }
        self.install(next.nodes, next.slots);
    }

    /// Takes the primary Sentinel names.
    async fn adopt_primary(self: &Arc<Self>, addr: &str) {
        let current = self.topology.load();
        if current.nodes.first().is_some_and(|n| n.addr == addr) {
            return;
        }
        let node = self.node_at(addr, false);
        self.connect_new(std::slice::from_ref(&node)).await;
        let was = current.nodes.first().map(|n| n.addr.clone()).unwrap_or_default();
        tracing::info!(store = %self.store, from = %was, to = %addr, "store primary changed (Sentinel failed over)");
        self.install(vec![node], Vec::new());
    }

    /// Connects nodes never connected (and not probed already); one that does not answer is
    /// opened and probed.
    async fn connect_new(self: &Arc<Self>, nodes: &[Arc<Node>]) {
        let fresh: Vec<&Arc<Node>> =
            nodes.iter().filter(|n| n.is_open() && !n.probing.load(Ordering::Relaxed)).collect();
        let dialed = join_all(fresh.iter().map(|n| dial(&n.url, self.ca.as_deref()))).await;
        for (node, result) in fresh.into_iter().zip(dialed) {
            match result {
                Ok(c) => {
                    node.close(c);
                }
                Err(e) => {
                    node.start_outage(self.fallbacks());
                    self.opened(node, &e.to_string());
                }
            }
        }
    }

    /// The primary's address, from the first Sentinel that knows it.
    async fn primary(&self) -> RedisResult<String> {
        let Target::Sentinel { sentinels, master, .. } = &self.target else {
            return Err(RedisError::from((ErrorKind::Client, "not a Sentinel target")));
        };
        let mut last = RedisError::from((ErrorKind::Io, "no sentinel"));
        for sentinel in sentinels {
            let url = format!("redis://{sentinel}");
            let asked = async {
                let mut c = dial(&url, None).await?;
                let cmd = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(master).clone();
                let found: Option<(String, u16)> = tokio::time::timeout(DIAL, cmd.query_async(&mut c))
                    .await
                    .map_err(|_| RedisError::from((ErrorKind::Io, "the sentinel did not answer")))??;
                found.ok_or_else(|| RedisError::from((ErrorKind::Client, "the sentinel knows no such master")))
            };
            match asked.await {
                Ok((host, port)) => return Ok(format!("{host}:{port}")),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// A connection to `url` that answered a `PING`, within [`DIAL`].
async fn dial(url: &str, ca: Option<&[u8]>) -> RedisResult<MultiplexedConnection> {
    let client = match ca {
        Some(ca) => redis::Client::build_with_tls(url, certificates(ca))?,
        None => redis::Client::open(url)?,
    };
    let config = redis::AsyncConnectionConfig::new().set_connection_timeout(Some(DIAL)).set_response_timeout(None);
    let connect = async {
        let mut c = client.get_multiplexed_async_connection_with_config(&config).await?;
        let _: String = redis::cmd("PING").query_async(&mut c).await?;
        Ok::<_, RedisError>(c)
    };
    let started = Instant::now();
    tokio::time::timeout(DIAL, connect).await.map_err(|_| {
        let why = format!("no answer within {:?}", started.elapsed());
        RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
    })?
}

pub(super) fn certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) }
}

/// `CLUSTER SLOTS` asked of the node at `addr`: (first slot, last slot, master's address).
async fn ask_slots(c: &mut MultiplexedConnection, addr: &str) -> RedisResult<Vec<(u16, u16, String)>> {
    let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
    let asked = tokio::time::timeout(DIAL, cmd.query_async::<Value>(c));
    let value = asked.await.map_err(|_| RedisError::from((ErrorKind::Io, "CLUSTER SLOTS: no answer")))??;
    parse_slots(&value, addr)
        .ok_or_else(|| RedisError::from((ErrorKind::Parse, "CLUSTER SLOTS: an answer of no known shape")))
}

/// The ranges of a `CLUSTER SLOTS` answer; a master without a host is the node asked.
fn parse_slots(value: &Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(entries) = value else { return None };
    let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
    let mut ranges = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else { return None };
        let int = |v: &Value| match v {
            Value::Int(i) => u16::try_from(*i).ok(),
            _ => None,
        };
        let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
        let Value::Array(master) = fields.get(2)? else { return None };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let port = int(master.get(1)?)?;
        let host = if host.is_empty() || host == "?" { asked_host.to_string() } else { host };
        ranges.push((start, end, format!("{host}:{port}")));
    }
    Some(ranges)
}

/// Whether a call's error says its node is out of reach (refused, reset, dropped, timed out),
/// rather than a node that answered with an error.
pub(super) fn out_of_reach(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout()
}

/// Why a call was not made: its node's circuit is open.
#[derive(Debug, thiserror::Error)]
#[error("store node {0} is unreachable")]
struct Open(String);

/// The error of a call not made because its node's circuit is open.
fn unreachable(addr: &str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, Open(addr.to_string())))
}

/// Whether a call was not made because its node's circuit is open.
pub(super) fn not_made(e: &RedisError) -> bool {
    // The client keeps the I/O error it was made from behind an `Arc`.
    std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|kept| kept.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .is_some_and(|inner| inner.is::<Open>())
}

/// A node's connection, sending `ASKING` before each command when a slot is being migrated.
struct Routed {
    conn: MultiplexedConnection,
    asking: bool,
}

impl redis::aio::ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        if !self.asking {
            return self.conn.req_packed_command(cmd);
        }
        Box::pin(async move {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(cmd.clone());
            let mut values: Vec<Value> = pipe.query_async(&mut self.conn).await?;
            values.pop().ok_or_else(|| RedisError::from((ErrorKind::Parse, "no answer after ASKING")))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_slot_map_names_each_range_s_master() {
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), Value::Array(vec![bulk(""), Value::Int(7001)])]),
        ]);
        assert_eq!(
            parse_slots(&answer, "10.0.0.9:7001"),
            Some(vec![(0, 5460, "127.0.0.1:7000".to_string()), (5461, 16383, "10.0.0.9:7001".to_string())])
        );
        assert_eq!(parse_slots(&Value::Int(1), "h:1"), None);
    }

    #[test]
    fn out_of_reach_is_the_connection_not_the_answer() {
        assert!(out_of_reach(&unreachable("h:1")));
        assert!(not_made(&unreachable("h:1")));
        assert!(!not_made(&std::io::Error::from(std::io::ErrorKind::NotConnected).into()));
        assert!(out_of_reach(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into()));
        assert!(!out_of_reach(&RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "READONLY"))));
    }
}
