//! The open-descriptor limit: raised as far as the process may at start, and the connection cap
//! that fits under it.

use std::io;

/// Descriptors kept for the process itself: listeners, the runtime, the log, the store, the spec
/// watcher, refusals being written, idle upstream connections beyond one per client.
const RESERVE: u64 = 64;

/// The cap when the limit cannot be read at all (a platform without `RLIMIT_NOFILE`).
const UNKNOWN_LIMIT_CAP: usize = 4096;

/// The process's limits on open descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DescriptorLimit {
    /// The limit in force: `accept` fails with EMFILE past it.
    pub soft: u64,
    /// How far the process may raise `soft` without privileges.
    pub hard: u64,
}

impl DescriptorLimit {
    /// The limits in force now.
    pub(crate) fn current() -> io::Result<DescriptorLimit> {
        let (soft, hard) = rlimit::Resource::NOFILE.get()?;
        Ok(DescriptorLimit { soft, hard })
    }

    /// The client connections that fit: what is left after the reserve, halved, since a proxied
    /// request holds one descriptor towards the client and one towards the upstream.
    pub(crate) fn connections(&self) -> usize {
        let pairs = self.soft.saturating_sub(RESERVE) / 2;
        usize::try_from(pairs).unwrap_or(usize::MAX).max(1)
    }

    /// Whether `clients` client connections and `upstream` upstream ones fit beside the reserve.
    pub(crate) fn fits(&self, clients: usize, upstream: usize) -> bool {
        (clients as u64).saturating_add(upstream as u64).saturating_add(RESERVE) <= self.soft
    }
}

/// Raises the soft descriptor limit to the hard one and logs the result. The soft limit a
/// shell or service manager hands out (often 1,024) is sized for programs that open a few
/// files, not for a proxy holding two descriptors per connection, and the hard limit (often
/// 524,288 under systemd) is what the administrator actually allows.
pub(crate) fn raise_descriptor_limit() -> Option<DescriptorLimit> {
    let before = match DescriptorLimit::current() {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the descriptor limit; capping connections at {UNKNOWN_LIMIT_CAP}");
            return None;
        }
    };
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, soft = before.soft, hard = before.hard, "cannot raise the descriptor limit");
    }
    let after = DescriptorLimit::current().unwrap_or(before);
    tracing::info!(
        descriptors = after.soft,
        raised_from = (after.soft != before.soft).then_some(before.soft),
        connections = after.connections(),
        "descriptor limit"
    );
    if after.soft < 2 * RESERVE {
        tracing::warn!(
            descriptors = after.soft,
            "the descriptor limit leaves room for few connections; raise it with `ulimit -n` or LimitNOFILE="
        );
    }
    Some(after)
}

/// The cap on requests in flight to the upstream when none is given: the descriptors the client
/// connections leave, less the idle upstream connections kept besides (`max_idle`), so that an
/// upstream connection never fails for want of a descriptor and `accept` keeps its reserve.
pub(crate) fn default_max_upstream(max_idle: usize) -> usize {
    DescriptorLimit::current().map_or(UNKNOWN_LIMIT_CAP, |limit| limit.connections().saturating_sub(max_idle)).max(1)
}

/// The connection cap when none is given: half of the descriptors left after a reserve, since a
/// proxied request holds one descriptor towards the client and one towards the upstream. Reads
/// the limit in force, so call it after `raise_descriptor_limit`.
pub(crate) fn default_max_connections() -> usize {
    DescriptorLimit::current().map_or(UNKNOWN_LIMIT_CAP, |limit| limit.connections())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_takes_two_descriptors_after_the_reserve() {
        let connections = |soft| DescriptorLimit { soft, hard: soft }.connections();
        assert_eq!(connections(1024), 480);
        assert_eq!(connections(256), 96);
        assert_eq!(connections(65), 1, "never zero: a cap of nothing refuses everyone");
        assert_eq!(connections(0), 1);
        assert_eq!(connections(u64::MAX), usize::try_from((u64::MAX - RESERVE) / 2).unwrap_or(usize::MAX));
    }
}
