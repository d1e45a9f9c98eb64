//! Concurrency leases taken in the store: renewed while their request is in flight, removed when
//! it ends, and left to lapse (after the lease ttl) if this instance dies holding them.

use std::sync::Arc;

use super::conn::Conn;
use super::micros::Micros;
use super::store::RedisStore;
use crate::engine::Permits;

/// A counter key and the members a request holds in it (one per unit of cost).
type Held = Vec<(String, Vec<String>)>;

impl RedisStore {
    /// Hands the leases a request took (counter key and cost, under the decision's lease id) to
    /// its permits: while the request is in flight they are renewed every third of their life;
    /// when it ends (or the client leaves) renewal stops and they are removed.
    pub(super) fn hold(
        self: &Arc<Self>,
        conn: Arc<Conn>,
        lease: &str,
        taken: Vec<(String, u32)>,
        permits: &mut Permits,
    ) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let held: Held =
            taken.into_iter().map(|(key, cost)| (key, (1..=cost).map(|j| format!("{lease}:{j}")).collect())).collect();
        let (done, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (store, renewing, renew_conn) = (self.clone(), held.clone(), conn.clone());
        let ttl = self.settings.lease_ttl;
        handle.spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    () = tokio::time::sleep(ttl / 3) => {}
                }
                store.renew(&renew_conn, &renewing).await;
            }
        });
        let store = self.clone();
        permits.push_external(move || {
            let _ = done.send(());
            handle.spawn(async move { store.release(&conn, held).await });
        });
    }

    /// One renewal call per hash slot: a script may touch only one slot of a cluster.
    async fn renew(&self, conn: &Arc<Conn>, held: &Held) {
        let keys: Vec<String> = held.iter().map(|(key, _)| key.clone()).collect();
        for group in self.target.groups(&keys, 0..keys.len()) {
            let mut invocation = self.leases.renew.prepare_invoke();
            invocation.arg(Micros::from_duration(self.settings.lease_ttl));
            for &i in &group {
                let (key, members) = &held[i];
                invocation.key(key).arg(members.len());
                for m in members {
                    invocation.arg(m);
                }
            }
            let Err(e) = conn.run::<i64>(&keys[group[0]], &invocation, self.settings.timeout * 4).await else {
                continue;
            };
            let what =
                "store lease renewal failed: a request still in flight may lose its permit when the lease lapses";
            self.stats.lease_failures.record(&self.target.display(), what, &e.to_string());
        }
    }

    async fn release(&self, conn: &Arc<Conn>, held: Held) {
        for (key, members) in held {
            let mut cmd = redis::cmd("ZREM");
            cmd.arg(&key).arg(&members);
            if let Err(e) = conn.query::<i64>(&key, &cmd, self.settings.timeout * 4).await {
                let what = "store lease release failed: the permit stays taken until its lease lapses";
                self.stats.lease_failures.record(&self.target.display(), what, &e.to_string());
            }
        }
    }
}

#[cfg(test)]
impl RedisStore {
    /// Releases leases at once, as the end of their request would: the tests' way to it,
    /// awaited, where a request's end spawns it.
    pub(super) async fn release_now(&self, key: &str, members: Vec<String>) {
        let Some(conn) = self.conn.load_full() else { panic!("the store is connected") };
        self.release(&conn, vec![(key.to_string(), members)]).await;
    }
}
