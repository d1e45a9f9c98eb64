//! The connection: opened in the background with backoff, and the key secret every instance on
//! the store shares.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::conn::Conn;
use super::store::RedisStore;
use crate::engine::KeyHasher;

impl RedisStore {
    /// Connects (retrying with backoff, for as long as it takes), reads the shared key secret,
    /// then checks the secret for as long as the store lives.
    pub(super) async fn connect(self: Arc<Self>) {
        let mut delay = Duration::from_millis(100);
        loop {
            match Conn::open(self.target.clone(), self.settings.ca.clone(), self.stats.clone()).await {
                Ok(conn) => match self.shared_secret(&conn).await {
                    Ok(secret) => {
                        // The connection first: whoever hears of the secret decides at once, and
                        // a decision without a connection lets its request through uncounted.
                        self.conn.store(Some(conn.clone()));
                        tracing::info!(store = %self.target.display(), nodes = ?conn.nodes(), "store reachable: counts are shared");
                        self.adopt(secret);
                        self.keep_secret(&conn).await;
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

    /// Every five seconds, checks the shared key secret is still there (a `FLUSHALL` removes
    /// it), putting this instance's back, or adopting another that got there first.
    async fn keep_secret(&self, conn: &Arc<Conn>) {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Ok(secret) = self.shared_secret(conn).await {
                self.adopt(secret);
            }
        }
    }

    /// Whether decisions hashed with this hasher are counted in the store: it answers, and the
    /// hasher holds the secret the instances share.
    pub fn counts_with(&self, hasher: &KeyHasher) -> bool {
        self.stats.up.load(Ordering::Relaxed) && self.shares(hasher)
    }

    /// Each node the store's keys are on, and whether it answers; none until connected.
    pub fn nodes(&self) -> Vec<(String, bool)> {
        self.conn.load().as_ref().map(|c| c.nodes()).unwrap_or_default()
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

    /// Every instance on this store hashes caller keys with the same secret, created once by
    /// whichever instance comes first and kept in the store.
    async fn shared_secret(&self, conn: &Arc<Conn>) -> redis::RedisResult<[u8; 16]> {
        let key = format!("{}:secret", self.settings.prefix);
        // Propose the secret already in use, if any, so a store that lost it gets it back.
        let proposal = match *self.secret.borrow() {
            Some(current) => current.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            None => {
                let fresh = KeyHasher::random();
                format!("{:016x}{:016x}", fresh.hash(b"k0"), fresh.hash(b"k1"))
            }
        };
        let _: Option<String> = conn.query(&key, redis::cmd("SET").arg(&key).arg(&proposal).arg("NX"), SECRET).await?;
        let stored: String = conn.query(&key, redis::cmd("GET").arg(&key), SECRET).await?;
        let mut secret = [0u8; 16];
        for (i, byte) in secret.iter_mut().enumerate() {
            *byte = stored.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).unwrap_or(0);
        }
        Ok(secret)
    }
}

/// How long reading the key secret may take.
const SECRET: Duration = Duration::from_secs(1);
