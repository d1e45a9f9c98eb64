//! [`Conn`]: the store's nodes and which of them holds a key. Every script call and command goes
//! through it to the node of its key: the one server, the cluster master its hash slot maps to,
//! or the primary Sentinel names. A node whose circuit is open fails its calls at once; the
//! others never wait for it. Which node holds which key is in `topology.rs`, read again in the
//! background by `refresh.rs`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::Notify;

use super::node::{Node, PROBE_MAX, Verdict};
use super::target::{Target, address_of, at_address};
use super::topology::Topology;
use crate::store::stats::{Failures, StoreStats};

/// How long connecting to a node, or a probe of one, may take.
pub(super) const DIAL: Duration = Duration::from_secs(1);

/// How long an operator's look-up or change of one counter may wait for the store.
pub(super) const ADMIN: Duration = Duration::from_secs(1);

/// The store's nodes, and the way to the one holding a key.
pub(super) struct Conn {
    pub(super) target: Target,
    pub(super) ca: Option<Vec<u8>>,
    /// The target without credentials, for logs.
    pub(super) store: String,
    pub(super) stats: Arc<StoreStats>,
    pub(super) topology: ArcSwap<Topology>,
    /// Every node of the topology by address, and nodes a redirect named since.
    pub(super) nodes: Mutex<HashMap<String, Arc<Node>>>,
    pub(super) refresh: Notify,
    /// Slot map (or primary) reads that failed.
    pub(super) refresh_failures: Failures,
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

    pub(super) fn fallbacks(&self) -> u64 {
        self.stats.fallbacks.load(Ordering::Relaxed)
    }

    pub(super) fn registry(&self) -> MutexGuard<'_, HashMap<String, Arc<Node>>> {
        self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The node at `addr`, made (and, if `connect`, connected in the background) if it is new.
    pub(super) fn node_at(self: &Arc<Self>, addr: &str, connect: bool) -> Arc<Node> {
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
    pub(super) fn opened(self: &Arc<Self>, node: &Arc<Node>, why: &str) {
        if let Some(unlogged) = node.log_outage() {
            tracing::warn!(
                store = %self.store,
                node = %node.addr,
                error = %why,
                earlier_outages_unlogged = unlogged,
                "store unreachable: bounds whose keys it holds follow their on-store-error (open, closed or local) until it answers"
            );
        }
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
                    if let Some(outage) = node.forget_outage().filter(|o| o.logged) {
                        tracing::info!(
                            store = %conn.store,
                            node = %node.addr,
                            down_for = ?outage.since.elapsed(),
                            fallbacks = conn.fallbacks().saturating_sub(outage.fallbacks),
                            "store node no longer holds any keys (a failover moved them), so it is no longer probed"
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
        if let Some(outage) = node.close(c).filter(|o| o.logged) {
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
    pub(super) fn recount(&self) {
        self.stats.up.store(self.all_up(), Ordering::Relaxed);
    }
}

/// A connection to `url` that answered a `PING`, within [`DIAL`].
pub(super) async fn dial(url: &str, ca: Option<&[u8]>) -> RedisResult<MultiplexedConnection> {
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

    #[test]
    fn out_of_reach_is_the_connection_not_the_answer() {
        assert!(out_of_reach(&unreachable("h:1")));
        assert!(not_made(&unreachable("h:1")));
        assert!(!not_made(&std::io::Error::from(std::io::ErrorKind::NotConnected).into()));
        assert!(out_of_reach(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into()));
        assert!(!out_of_reach(&RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "READONLY"))));
    }
}
