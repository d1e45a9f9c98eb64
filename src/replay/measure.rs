//! Recorded traffic measured for `opbound suggest`: per operation and for the route, each kind
//! of caller's busiest windows (a hash sample of callers, never all of them), requests in flight
//! at each arrival, and mean durations. What `suggest.rs` proposes bounds from.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::Record;
use super::peaks::Peaks;
use crate::engine::KeyHasher;
use crate::engine::clock::{Nanos, SECOND};
use crate::policy::Policy;
use crate::router::canonical::EscapedSlashes;

/// How proposals are made.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The window a proposed limit counts over.
    pub window: Nanos,
    /// Which percentile of callers' busiest windows the limit must admit (0 to 100).
    pub percentile: f64,
    /// What that percentile is multiplied by.
    pub headroom: f64,
    /// How many callers each distribution samples at most.
    pub sample: usize,
    /// How the paths are read, as `serve` reads them.
    pub escaped_slashes: EscapedSlashes,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            window: 60 * SECOND,
            percentile: 99.0,
            headroom: 2.0,
            sample: 4096,
            escaped_slashes: EscapedSlashes::Reject,
        }
    }
}

/// Whose requests a distribution counts, exactly the requests the bound proposed from it would
/// count: callers by address (those not authenticated, as `applies-to: {authenticated: false}`
/// judges it: a credential alone is not a user), signed-in users (per role when the log has
/// roles), every request carrying a credential, and organisations.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Caller {
    /// Callers without a user, by address.
    Address,
    /// Signed-in users, with this first role (or none).
    User(Option<String>),
    /// Requests carrying a credential, by it (signed in or not).
    Token,
    /// Organisations, whatever user of theirs called (measured beside the user or address).
    Org,
}

/// What one operation's traffic (or all of it, for the route) looked like.
#[derive(Debug)]
pub struct Measured {
    /// The operation, or `None` for the route (every request).
    pub operation: Option<usize>,
    /// Per-caller peaks, by kind of caller.
    pub callers: BTreeMap<Caller, Peaks>,
    /// Requests in flight when each request arrived: a count per level.
    in_flight_at_arrival: Vec<u64>,
    ends: BinaryHeap<Reverse<Nanos>>,
    /// Requests routed here, each once whoever it was counted for.
    requests: u64,
    /// Requests with a duration, and their sum.
    pub(super) timed: u64,
    duration_sum: u128,
}

impl Measured {
    fn new(operation: Option<usize>) -> Measured {
        Measured {
            operation,
            callers: BTreeMap::new(),
            in_flight_at_arrival: Vec::new(),
            ends: BinaryHeap::new(),
            requests: 0,
            timed: 0,
            duration_sum: 0,
        }
    }

    /// Counts a request once: in flight and durations (its callers are counted by
    /// [`Measured::insert_caller`]).
    fn insert(&mut self, record: &Record, at: Nanos) {
        self.requests += 1;
        if let Some(d) = record.duration {
            while self.ends.peek().is_some_and(|Reverse(end)| *end <= at) {
                self.ends.pop();
            }
            let level = self.ends.len().min(1 << 16);
            if self.in_flight_at_arrival.len() <= level {
                self.in_flight_at_arrival.resize(level + 1, 0);
            }
            self.in_flight_at_arrival[level] += 1;
            // Bounded like the level: a flood of never-ending requests cannot grow it past this.
            if self.ends.len() < 1 << 16 {
                self.ends.push(Reverse(at + d));
            }
            self.timed += 1;
            self.duration_sum += u128::from(d);
        }
    }

    /// Counts a request in one caller distribution.
    fn insert_caller(&mut self, settings: &Settings, caller: &Caller, key: u64, at: Nanos) {
        self.callers
            .entry(caller.clone())
            .or_insert_with(|| Peaks::new(settings.window, settings.sample))
            .insert(key, at);
    }

    /// Requests counted (each once, whoever it was counted for).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The mean duration of the requests that had one.
    pub fn mean_duration(&self) -> Option<Nanos> {
        (self.timed > 0).then(|| (self.duration_sum / u128::from(self.timed)) as Nanos)
    }

    /// Requests in flight (this one included) at percentile `p` of arrivals.
    pub(super) fn in_flight(&self, p: f64) -> u32 {
        let total: u64 = self.in_flight_at_arrival.iter().sum();
        let wanted = ((p / 100.0) * total as f64).ceil() as u64;
        let mut seen = 0;
        for (level, n) in self.in_flight_at_arrival.iter().enumerate() {
            seen += n;
            if seen >= wanted.max(1) {
                return level as u32 + 1;
            }
        }
        0
    }

    /// The most requests in flight at once seen.
    pub(super) fn most_in_flight(&self) -> u32 {
        self.in_flight_at_arrival.iter().rposition(|n| *n > 0).map_or(0, |l| l as u32 + 1)
    }
}

/// Everything measured, per operation and for the route.
pub struct Measurements {
    pub(super) settings: Settings,
    hasher: KeyHasher,
    /// Per operation, then the route (every request).
    pub groups: Vec<Measured>,
    /// Records read, and those whose target `serve` would refuse.
    pub records: u64,
    /// Records `serve` would refuse before any bound.
    pub malformed: u64,
}

impl Measurements {
    /// Nothing measured yet.
    pub fn new(policy: &Policy, settings: Settings) -> Measurements {
        let mut groups: Vec<Measured> = (0..policy.operations.len()).map(|o| Measured::new(Some(o))).collect();
        groups.push(Measured::new(None));
        Measurements { settings, hasher: KeyHasher::with_secret([0; 16]), groups, records: 0, malformed: 0 }
    }

    /// Measures one record: routed as `serve` routes it, its caller identified as the log allows.
    pub fn insert(&mut self, policy: &Policy, record: &Record) {
        self.records += 1;
        let read =
            crate::server::facts::reading::read_request(&record.method, &record.target, self.settings.escaped_slashes);
        let Ok((method, path, _)) = read else {
            self.malformed += 1;
            return;
        };
        let operation = policy.route(&method, &path);
        // Each distribution a request joins is one whose bound would count it: per user when
        // signed in, per credential when it carries one, per address when not signed in (the
        // engine's own reading of `authenticated`), per org when it has one.
        let mut callers: Vec<(Caller, u64)> = Vec::with_capacity(4);
        if let Some(user) = &record.user {
            callers.push((Caller::User(record.roles.first().cloned()), self.hasher.hash(user.as_bytes())));
        }
        if let Some(token) = &record.token {
            callers.push((Caller::Token, self.hasher.hash(token.as_bytes())));
        }
        if !crate::request::authenticated(record.user.as_deref()) {
            let address = record.client.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            callers.push((Caller::Address, self.hasher.hash(crate::request::address_key(address).as_bytes())));
        }
        if let Some(org) = &record.org {
            callers.push((Caller::Org, self.hasher.hash(org.as_bytes())));
        }
        let settings = self.settings;
        let route = self.groups.len() - 1;
        for group in operation.into_iter().chain([route]) {
            let group = &mut self.groups[group];
            group.insert(record, record.time);
            for (caller, key) in &callers {
                group.insert_caller(&settings, caller, *key, record.time);
            }
        }
    }
}
