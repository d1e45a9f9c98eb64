//! Which bounds need a caller's identity that nothing supplies: what `serve` and `decide` refuse
//! to start with, and what `check` reports, worked out in one place.

use super::{Bound, Per, Policy};

/// Which parts of a caller's identity the server is told (by identity headers or a JWT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentitySources {
    /// The signed-in user (`--identity-header user=...`, or a JWT's `sub`).
    pub user: bool,
    /// The caller's org.
    pub org: bool,
    /// The caller's roles.
    pub roles: bool,
}

impl IdentitySources {
    /// Nothing tells the server who a caller is.
    pub const NONE: IdentitySources = IdentitySources { user: false, org: false, roles: false };
}

/// A bound that needs a part of the identity nothing supplies: it would never count anything,
/// and the team would believe the operation protected.
#[derive(Clone, Copy, Debug)]
pub struct Unfed<'a> {
    /// The bound.
    pub bound: &'a Bound,
    /// What it needs the identity for: `counts per user`, `applies to roles`, ...
    pub what: &'static str,
    /// The flag that would feed it: `user=HEADER`, `org=HEADER` or `roles=HEADER`.
    pub flag: &'static str,
}

impl Policy {
    /// The bounds `sources` cannot feed, in the policy's order.
    pub fn unfed(&self, sources: IdentitySources) -> Vec<Unfed<'_>> {
        let mut unfed = Vec::new();
        for bound in &self.bounds {
            let def = &bound.def;
            let need = if def.per.parts().contains(&Per::User) && !sources.user {
                Some(("counts per user", "user=HEADER"))
            } else if def.per.parts().contains(&Per::Org) && !sources.org {
                Some(("counts per org", "org=HEADER"))
            } else if def.applies_to.authenticated == Some(true) && !sources.user {
                Some(("applies to signed-in callers", "user=HEADER"))
            } else if !def.applies_to.roles.is_empty() && !sources.roles {
                Some(("applies to roles", "roles=HEADER"))
            } else {
                None
            };
            if let Some((what, flag)) = need {
                unfed.push(Unfed { bound, what, flag });
            }
        }
        unfed
    }
}

/// What to give so that `unfed` bounds count: `--identity-header user=HEADER (...), or
/// --jwt-secret-file / --jwt-public-key-file ...`.
pub(crate) fn feeding(unfed: &[Unfed<'_>]) -> String {
    let mut flags: Vec<String> = Vec::new();
    for u in unfed {
        let flag = format!("--identity-header {}", u.flag);
        if !flags.contains(&flag) {
            flags.push(flag);
        }
    }
    format!(
        "{} (set by an authenticating proxy in front, which must be a --trusted-proxy), or --jwt-secret-file / \
         --jwt-public-key-file to read it from bearer tokens",
        flags.join(" and ")
    )
}
