//! Where the counters are and how the store behaves: the target (one Redis, a cluster, or a
//! primary Sentinel watches), its settings, and the hash slots that decide which node of a
//! cluster holds a key.

use std::time::Duration;

/// How the store behaves.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Every store call gives up after this long, so a slow Redis does not stall traffic.
    pub timeout: Duration,
    /// How long a concurrency lease lives if its instance never returns it (crashed).
    pub lease_ttl: Duration,
    /// How long a `count-when` reservation is held if its instance never settles it (crashed):
    /// then it commits. `serve` sets it to its upstream timeout and a margin.
    pub reservation_ttl: Duration,
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
            reservation_ttl: Duration::from_secs(90),
            prefix: "opbound".into(),
            deny_cache: 100_000,
            ca: None,
        }
    }
}

/// Where the counters are: one Redis, a Redis Cluster, or the primary Redis Sentinel watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One Redis: its URL.
    Single(String),
    /// A Redis Cluster: the URLs of its seed nodes.
    Cluster(Vec<String>),
    /// The primary Redis Sentinel names.
    Sentinel {
        /// The Sentinels, `host:port`.
        sentinels: Vec<String>,
        /// The name they watch the primary by.
        master: String,
        /// The scheme, credentials and database the primary is reached with: a URL whose host is
        /// a placeholder.
        primary: String,
    },
}

/// Why a `--store` value names no Redis.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A cluster URL without a node.
    #[error("{0:?} names no cluster node")]
    NoNode(String),
    /// Neither `memory` nor a `redis://` URL.
    #[error("store {0:?} is not memory or a redis:// URL")]
    NotRedis(String),
    /// A `redis://` URL the Redis client does not take, and why.
    #[error("store {0:?}: {1}")]
    Refused(String, String),
}

impl Target {
    /// `redis://host:port[/db]`, `rediss://...`, `redis+cluster://h1:p1,h2:p2`, a
    /// comma-separated list of `redis://` nodes of one cluster, or
    /// `redis+sentinel://[user:password@]s1:p1,s2:p2/MASTER[/db]` (credentials and database are
    /// the primary's).
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://").or_else(|| url.strip_prefix("rediss+sentinel://")) {
            return Target::sentinel(url, rest);
        }
        if let Some(nodes) = url.strip_prefix("redis+cluster://").or_else(|| url.strip_prefix("rediss+cluster://")) {
            let scheme = if url.starts_with("rediss") { "rediss" } else { "redis" };
            let nodes: Vec<String> =
                nodes.split(',').filter(|n| !n.is_empty()).map(|n| format!("{scheme}://{n}")).collect();
            if nodes.is_empty() {
                return Err(TargetError::NoNode(url.to_string()));
            }
            return Ok(Target::Cluster(nodes));
        }
        let parts: Vec<&str> = url.split(',').map(str::trim).collect();
        for p in &parts {
            if !(p.starts_with("redis://") || p.starts_with("rediss://")) {
                return Err(TargetError::NotRedis(p.to_string()));
            }
            redis::Client::open(*p).map_err(|e| TargetError::Refused(p.to_string(), e.to_string()))?;
        }
        Ok(if parts.len() == 1 {
            Target::Single(parts[0].to_string())
        } else {
            Target::Cluster(parts.iter().map(|p| p.to_string()).collect())
        })
    }

    fn sentinel(url: &str, rest: &str) -> Result<Target, TargetError> {
        let scheme = if url.starts_with("rediss") { "rediss" } else { "redis" };
        let (auth, rest) = match rest.rfind('@') {
            Some(at) => (&rest[..=at], &rest[at + 1..]),
            None => ("", rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let sentinels: Vec<String> = hosts.split(',').filter(|h| !h.is_empty()).map(str::to_string).collect();
        if sentinels.is_empty() {
            return Err(TargetError::NoNode(url.to_string()));
        }
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        if master.is_empty() {
            return Err(TargetError::Refused(
                url.to_string(),
                "names no master: redis+sentinel://HOST:PORT/MASTER".into(),
            ));
        }
        let db = if db.is_empty() { String::new() } else { format!("/{db}") };
        let primary = format!("{scheme}://{auth}primary:6379{db}");
        redis::Client::open(primary.as_str()).map_err(|e| TargetError::Refused(url.to_string(), e.to_string()))?;
        Ok(Target::Sentinel { sentinels, master: master.to_string(), primary })
    }

    /// Whether keys must be grouped by hash slot.
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
            Target::Sentinel { sentinels, master, .. } => format!("sentinel {} ({master})", sentinels.join(",")),
        }
    }

    /// The checks `which` (indexes into `keys`) grouped by the hash slot of their key, in order of
    /// first appearance: one script call may touch only one slot of a cluster. One group on a
    /// single Redis.
    pub(super) fn groups(&self, keys: &[String], which: impl IntoIterator<Item = usize>) -> Vec<Vec<usize>> {
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for i in which {
            let s = if self.is_cluster() { slot(&keys[i]) } else { 0 };
            match groups.iter_mut().find(|(x, _)| *x == s) {
                Some((_, g)) => g.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }
}

/// `url` (scheme, credentials, database) with its host and port replaced by `addr` (`host:port`,
/// an IPv6 host bare or in brackets): how one node of a cluster, or a Sentinel's primary, is
/// reached with the credentials the operator gave.
pub(super) fn at_address(url: &str, addr: &str) -> String {
    let addr = match addr.rsplit_once(':') {
        Some((host, port)) if host.contains(':') && !host.starts_with('[') => format!("[{host}]:{port}"),
        _ => addr.to_string(),
    };
    let Some(start) = url.find("://").map(|s| s + 3) else { return url.to_string() };
    let host_start = url[start..].rfind('@').map_or(start, |at| start + at + 1);
    let host_end = url[host_start..].find(['/', '?']).map_or(url.len(), |e| host_start + e);
    format!("{}{addr}{}", &url[..host_start], &url[host_end..])
}

/// The address (`host:port`) a URL names.
pub(super) fn address_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    if host.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:6379")
    }
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
        assert_eq!(
            Target::parse("redis+sentinel://:pw@s1:26379,s2:26380/mymaster/2"),
            Ok(Target::Sentinel {
                sentinels: vec!["s1:26379".into(), "s2:26380".into()],
                master: "mymaster".into(),
                primary: "redis://:pw@primary:6379/2".into(),
            })
        );
        assert!(Target::parse("redis+sentinel://s1:26379").is_err(), "no master named");
        assert!(Target::parse("redis+sentinel:///mymaster").is_err(), "no sentinel");
    }

    #[test]
    fn node_urls_keep_the_credentials_and_database() {
        assert_eq!(at_address("redis://u:p@seed:1/2", "10.0.0.5:7001"), "redis://u:p@10.0.0.5:7001/2");
        assert_eq!(at_address("rediss://seed:1", "h:2"), "rediss://h:2");
        assert_eq!(at_address("redis://seed:1", "::1:7000"), "redis://[::1]:7000");
        assert_eq!(address_of("redis://u:p@h:7001/3"), "h:7001");
        assert_eq!(address_of("redis://h"), "h:6379");
    }

    #[test]
    fn checks_are_grouped_by_slot_in_order() {
        let keys: Vec<String> = ["{a}1", "{b}1", "{a}2"].iter().map(|k| k.to_string()).collect();
        let cluster = Target::Cluster(vec!["redis://a:1".into()]);
        assert_eq!(cluster.groups(&keys, 0..3), [vec![0, 2], vec![1]]);
        assert_eq!(cluster.groups(&keys, [2, 1]), [vec![2], vec![1]]);
        assert_eq!(Target::Single("redis://a:1".into()).groups(&keys, 0..3), [vec![0, 1, 2]]);
    }
}
