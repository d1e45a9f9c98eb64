//! The connection: opened in the background with backoff, probed while the store is down, and the
//! key secret every instance on the store shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::conn::Conn;
use super::store::RedisStore;
use super::target::Target;
use crate::engine::KeyHasher;

impl RedisStore {
    /// Connects (retrying with backoff, for as long as it takes), reads the shared key secret,
    /// then probes for as long as the store lives.
    pub(super) async fn connect(self: Arc<Self>) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.open().await {
                Ok(conn) => match self.shared_secret(&conn).await {
                    Ok(secret) => {
                        // The connection first: whoever hears of the secret decides at once, and
                        // a decision without a connection lets its request through uncounted.
                        self.conn.store(Some(Arc::new(conn)));
                        self.mark(true);
                        self.adopt(secret);
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
    pub fn counts_with(&self, hasher: &KeyHasher) -> bool {
        self.stats.up.load(Ordering::Relaxed) && self.shares(hasher)
    }

    /// Whether a plan hashed with this hasher may be counted in the store: any other secret makes
    /// keys nobody else counts under.
    pub(super) fn shares(&self, hasher: &KeyHasher) -> bool {
        hasher.id() == self.secret_id.load(Ordering::Relaxed)
    }

    /// Takes a secret as the one instances share, telling the server when it changes.
    fn adopt(&self, secret: [u8; 16]) {
        let id = KeyHasher::with_secret(secret).id();
        if self.secret_id.swap(id, Ordering::Relaxed) != id {
            // `send_replace` stores the value even while nobody listens yet (`send` would drop it).
            self.secret.send_replace(Some(secret));
        }
    }

    async fn open(&self) -> redis::RedisResult<Conn> {
        match &self.target {
            Target::Single(url) => {
                let client = match &self.settings.ca {
                    Some(ca) => redis::Client::build_with_tls(url.as_str(), certificates(ca))?,
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
                    builder = builder.certs(certificates(ca));
                }
                let client = builder.build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
        }
    }

    /// Every instance on this store hashes caller keys with the same secret, created once by
    /// whichever instance comes first and kept in the store.
    async fn shared_secret(&self, conn: &Conn) -> redis::RedisResult<[u8; 16]> {
        let key = format!("{}:secret", self.settings.prefix);
        // Propose the secret already in use, if any, so a store that lost it gets it back.
        let proposal = match *self.secret.borrow() {
            Some(current) => current.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            None => {
                let fresh = KeyHasher::random();
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

    /// Records whether the store answers, logging only when that changes.
    pub(super) fn mark(&self, up: bool) {
        let was = self.stats.up.swap(up, Ordering::Relaxed);
        if was != up {
            if up {
                tracing::info!(store = %self.target.display(), "store reachable: counts are shared");
            } else {
                tracing::warn!(store = %self.target.display(), "store unreachable: bounds follow their on-store-error (open, closed or local)");
            }
        }
    }
}

fn certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) }
}
