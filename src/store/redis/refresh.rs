//! Where the store's keys are, read again in the background: the cluster's slot map
//! (`CLUSTER SLOTS`) or the primary Sentinel names. At once when a call asks for it (`MOVED`,
//! `ASK`, `READONLY`), twice a second while a node is out, every few seconds otherwise; a new
//! master is connected before the map that names it is installed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::conn::{Conn, DIAL, dial};
use super::node::Node;
use super::target::{Target, address_of};
use super::topology::{SLOTS, Topology, UNSERVED, parse_slots};

/// How often the slot map (or Sentinel's primary) is read while every node answers; while one
/// does not, every [`DEGRADED`].
const CALM: Duration = Duration::from_secs(2);
const DEGRADED: Duration = Duration::from_millis(500);

impl Conn {
    /// Puts a topology in place; nodes it no longer names leave the registry (their probes stop).
    pub(super) fn install(&self, nodes: Vec<Arc<Node>>, slots: Vec<u16>) {
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
    pub(super) async fn watch(self: Arc<Self>) {
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
    pub(super) async fn cluster_slots(&self) -> RedisResult<Vec<(u16, u16, String)>> {
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
    pub(super) async fn adopt_slots(self: &Arc<Self>, ranges: Vec<(u16, u16, String)>) {
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
    pub(super) async fn adopt_primary(self: &Arc<Self>, addr: &str) {
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
    pub(super) async fn connect_new(self: &Arc<Self>, nodes: &[Arc<Node>]) {
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
    pub(super) async fn primary(&self) -> RedisResult<String> {
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

/// `CLUSTER SLOTS` asked of the node at `addr`: (first slot, last slot, master's address).
async fn ask_slots(c: &mut MultiplexedConnection, addr: &str) -> RedisResult<Vec<(u16, u16, String)>> {
    let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
    let asked = tokio::time::timeout(DIAL, cmd.query_async::<Value>(c));
    let value = asked.await.map_err(|_| RedisError::from((ErrorKind::Io, "CLUSTER SLOTS: no answer")))??;
    parse_slots(&value, addr)
        .ok_or_else(|| RedisError::from((ErrorKind::Parse, "CLUSTER SLOTS: an answer of no known shape")))
}
