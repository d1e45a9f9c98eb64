//! A bound as written in `x-rate-limit`, validated: what it counts, per what, for whom.

use std::fmt;
use std::num::NonZeroU32;

use super::source::{JsonPointer, RequestCost};
use super::window::Window;
use crate::period::{Calendar, FirstUse, Period, Zone};

/// Default for `max-keys`.
pub(crate) const DEFAULT_MAX_KEYS: u32 = 10_000;
/// Largest allowed `max-keys`.
pub(crate) const MAX_MAX_KEYS: u32 = 1_000_000;

/// What a bound keeps one counter per.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Per {
    /// One counter for everybody.
    Route,
    /// The client address (IPv6 by /64).
    Address,
    /// The signed-in user (an identity header, or a JWT's `sub`); anonymous callers lack it.
    User,
    /// The credential itself (bearer token or API key).
    Token,
    /// The caller's organisation (an identity header, or a JWT claim); callers without one lack it.
    Org,
    /// A request header, by its name (a field name, so made once and looked up without parsing).
    Header(http::HeaderName),
    /// A cookie, by its name as written (cookie names are case-sensitive).
    Cookie(String),
    /// A query parameter, by its name as written (case-sensitive).
    Query(String),
    /// A string or number in a JSON request body, at an RFC 6901 pointer.
    Json(JsonPointer),
    /// A field of a form-urlencoded request body, by its name as written.
    Form(String),
    /// A key made of several (`per: [token, json:/model]`): one counter per combination, a
    /// request lacking any part lacks the key. Two to four parts, none of them `route` or parts.
    Parts(Box<[Per]>),
}

impl Per {
    /// Whether the key comes from the caller's identity, which the server resolves only when
    /// some bound needs it.
    pub fn needs_identity(&self) -> bool {
        match self {
            Per::Parts(parts) => parts.iter().any(Per::needs_identity),
            _ => matches!(self, Per::User | Per::Token | Per::Org),
        }
    }

    /// Whether the key is read from the request's body, which the server reads only for such
    /// bounds, and only after the bounds that need no body admitted the request.
    pub fn needs_body(&self) -> bool {
        match self {
            Per::Parts(parts) => parts.iter().any(Per::needs_body),
            _ => matches!(self, Per::Json(_) | Per::Form(_)),
        }
    }

    /// Whether every request has this key (so `missing` never applies).
    pub fn always_present(&self) -> bool {
        match self {
            Per::Parts(parts) => parts.iter().all(Per::always_present),
            _ => matches!(self, Per::Route | Per::Address),
        }
    }

    /// The kinds the key is made of: itself, or each of its parts.
    pub fn parts(&self) -> &[Per] {
        match self {
            Per::Parts(parts) => parts,
            one => std::slice::from_ref(one),
        }
    }
}

impl fmt::Display for Per {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Per::Route => f.write_str("route"),
            Per::Address => f.write_str("address"),
            Per::User => f.write_str("user"),
            Per::Token => f.write_str("token"),
            Per::Org => f.write_str("org"),
            Per::Header(n) => write!(f, "header:{n}"),
            Per::Cookie(n) => write!(f, "cookie:{n}"),
            Per::Query(n) => write!(f, "query:{n}"),
            Per::Json(p) => write!(f, "json:{p}"),
            Per::Form(n) => write!(f, "form:{n}"),
            Per::Parts(parts) => {
                let all: Vec<String> = parts.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", all.join(", "))
            }
        }
    }
}

/// How a bound counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// At most `limit` per `window`, by the two-window estimate.
    SlidingWindow {
        /// The span `limit` is counted over.
        window: Window,
    },
    /// GCRA: refills `limit` per `window`, holds at most `burst`.
    TokenBucket {
        /// The span in which `limit` tokens come back.
        window: Window,
        /// The most tokens the bucket holds (`limit` when not written); never less than `cost`.
        burst: NonZeroU32,
    },
    /// At most `limit` requests in flight at once.
    Concurrency,
    /// At most `limit` (cost units) consumed per business period: a day, a month, a year.
    Quota {
        /// When each period starts: on the calendar, or from each caller's first use.
        periods: Periods,
    },
}

/// When a quota's periods start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Periods {
    /// `reset: calendar`: periods every caller shares, starting on the calendar's boundaries in
    /// a time zone (the hour, local midnight, Monday, the 1st, 1 January).
    Calendar(Calendar),
    /// `reset: first-use`: each caller's periods are anniversaries of its first admitted request.
    FirstUse(FirstUse),
}

impl Periods {
    /// The length of one period.
    pub fn period(&self) -> Period {
        match self {
            Periods::Calendar(c) => c.period(),
            Periods::FirstUse(f) => f.period(),
        }
    }

    /// The zone whose calendar and wall clock the periods follow.
    pub fn zone(&self) -> &Zone {
        match self {
            Periods::Calendar(c) => c.zone(),
            Periods::FirstUse(f) => f.zone(),
        }
    }

    /// The `reset` value as written: `calendar` or `first-use`.
    pub fn reset(&self) -> &'static str {
        match self {
            Periods::Calendar(_) => "calendar",
            Periods::FirstUse(_) => "first-use",
        }
    }
}

impl Algorithm {
    /// The name written in `algorithm`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::SlidingWindow { .. } => "sliding-window",
            Algorithm::TokenBucket { .. } => "token-bucket",
            Algorithm::Concurrency => "concurrency",
            Algorithm::Quota { .. } => "quota",
        }
    }

    /// The window, for the algorithms that have one (a quota has a period instead).
    pub fn window(&self) -> Option<Window> {
        match self {
            Algorithm::SlidingWindow { window } | Algorithm::TokenBucket { window, .. } => Some(*window),
            Algorithm::Concurrency | Algorithm::Quota { .. } => None,
        }
    }

    /// A quota's periods.
    pub fn periods(&self) -> Option<&Periods> {
        match self {
            Algorithm::Quota { periods } => Some(periods),
            _ => None,
        }
    }
}

/// Who a bound is for; empty means everybody.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AppliesTo {
    /// Any of these roles.
    pub roles: Vec<String>,
    /// `Some(true)`: signed-in callers only; `Some(false)`: anonymous callers only; `None`: both.
    pub authenticated: Option<bool>,
}

impl AppliesTo {
    /// Whether the bound applies to every caller.
    pub fn is_everybody(&self) -> bool {
        self.roles.is_empty() && self.authenticated.is_none()
    }

    /// Whether a caller with these traits is one the bound is for.
    #[inline]
    pub fn admits(&self, authenticated: bool, roles: &[String]) -> bool {
        if self.authenticated.is_some_and(|a| a != authenticated) {
            return false;
        }
        self.roles.is_empty() || self.roles.iter().any(|r| roles.contains(r))
    }
}

/// What happens when the key a bound is counted per is absent from the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Missing {
    /// Skip the bound.
    #[default]
    Pass,
    /// Refuse with 400, naming what is missing.
    Reject,
}

/// What happens when the shared store cannot answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnStoreError {
    /// Admit the request uncounted, and say so in metrics and logs.
    #[default]
    Open,
    /// Refuse with 503 and `Retry-After`.
    Closed,
    /// Count in this instance's own in-memory counters until the store is back.
    Local,
}

/// Whether a bound refuses or only reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Counted, and refuses what exceeds it.
    #[default]
    Enforce,
    /// Counted for metrics and logs, never refuses.
    Shadow,
}

/// A validated bound. Whatever the spec said, a `BoundDef` can be run as is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoundDef {
    /// What one counter is kept per.
    pub per: Per,
    /// How the counter counts, with the window and burst it needs.
    pub algorithm: Algorithm,
    /// Requests (cost units) per window; for `concurrency`, requests in flight at once.
    pub limit: NonZeroU32,
    /// Weight of one request; never more than the bound can ever admit. With `cost_from`, the
    /// weight of a request that states none.
    pub cost: NonZeroU32,
    /// `cost-from` with `max-cost`: the request states its own weight.
    pub cost_from: Option<Box<RequestCost>>,
    /// Which callers the bound is checked for; others skip it.
    pub applies_to: AppliesTo,
    /// The most callers tracked at once (1 to `MAX_MAX_KEYS`); the rest share one overflow
    /// counter, so memory is fixed by it. Unused for `per: route`, which has one counter.
    pub max_keys: NonZeroU32,
    /// What a request lacking the bound's key gets.
    pub missing: Missing,
    /// What the bound does when the shared store cannot answer in time.
    pub on_store_error: OnStoreError,
    /// Whether the bound refuses or only reports.
    pub mode: Mode,
    /// The label written in `name`; without it the bound is labelled by its position in the list.
    pub name: Option<String>,
    /// The status of this bound's refusals (400 to 599; 429 when not given).
    pub status: Option<u16>,
    /// The refusal body's `detail`, instead of the bound described in words.
    pub message: Option<String>,
    /// What is counted once the response is known (`count-when`, `settle`).
    pub counting: super::Counting,
}

impl BoundDef {
    /// The most one request can be charged and still pass on a fresh key.
    pub fn capacity(&self) -> u32 {
        match self.algorithm {
            Algorithm::TokenBucket { burst, .. } => burst.get(),
            _ => self.limit.get(),
        }
    }

    /// Whether deciding this bound needs the caller's identity (its key, or its `applies-to`).
    pub fn needs_identity(&self) -> bool {
        self.per.needs_identity() || !self.applies_to.is_everybody()
    }

    /// Whether the bound counts what requests use (`cost-from` or `settle`: tokens, for a model
    /// server) rather than requests: the providers' headers tell the two apart.
    pub fn is_metered(&self) -> bool {
        self.cost_from.is_some() || self.counting.settle.is_some()
    }

    /// Whether deciding this bound needs the request's body (its key, or its cost).
    pub fn needs_body(&self) -> bool {
        self.per.needs_body() || self.cost_from.as_ref().is_some_and(|c| c.from.needs_body())
    }

    /// Whether the bound's counts must outlive the process: a quota's (a month's consumption), or
    /// a `count-when` bound's (failed sign-ins a restart must not forgive). With the in-memory
    /// store they are written behind to the state file.
    pub fn durable(&self) -> bool {
        self.algorithm.periods().is_some()
            || (self.counting.count_when.is_some() && self.algorithm != Algorithm::Concurrency)
    }

    /// Whether `other` counts the same thing as this durable bound, so its counts keep their
    /// meaning under it: the same key, algorithm (window, burst, periods), key cap and
    /// `count-when` statuses, and for a token bucket the same limit (its counter is a time whose
    /// meaning in tokens depends on the refill rate). A quota's or a sliding window's limit and
    /// cost may differ: they judge the same consumption.
    pub fn same_consumption(&self, other: &BoundDef) -> bool {
        self.durable()
            && self.algorithm == other.algorithm
            && self.per == other.per
            && self.max_keys == other.max_keys
            && self.counting.count_when == other.counting.count_when
            && (!matches!(self.algorithm, Algorithm::TokenBucket { .. }) || self.limit == other.limit)
    }

    /// How many counters the bound's table can hold.
    pub fn table_size(&self) -> u32 {
        if self.per == Per::Route { 1 } else { self.max_keys.get() }
    }

    /// Who the bound is for, in words, when not everybody: `roles partner, trial`.
    pub fn audience(&self) -> Option<String> {
        let a = &self.applies_to;
        let who = match a.authenticated {
            Some(true) => "signed-in callers",
            Some(false) => "anonymous callers",
            None => "",
        };
        match (a.roles.is_empty(), who.is_empty()) {
            (true, true) => None,
            (true, false) => Some(who.to_string()),
            (false, true) => Some(format!("roles {}", a.roles.join(", "))),
            (false, false) => Some(format!("{who} with roles {}", a.roles.join(", "))),
        }
    }

    /// The bound in plain words: `10 per PT1M per user`, `3 in flight per user`.
    pub fn describe(&self) -> String {
        let mut s = match self.algorithm {
            Algorithm::SlidingWindow { window } => {
                format!("{} per {window} per {}", self.limit, self.per)
            }
            Algorithm::TokenBucket { window, burst } => {
                format!("{} per {window} per {} (token bucket, burst {burst})", self.limit, self.per)
            }
            Algorithm::Concurrency => format!("{} in flight per {}", self.limit, self.per),
            Algorithm::Quota { ref periods } => {
                let start = match periods {
                    Periods::Calendar(_) => format!("calendar periods in {}", periods.zone().name()),
                    Periods::FirstUse(_) => "from each caller's first use".to_string(),
                };
                format!("{} per {} per {} (quota, {start})", self.limit, periods.period(), self.per)
            }
        };
        match &self.cost_from {
            Some(c) => s.push_str(&format!(", cost from {} (at most {})", c.from, c.max)),
            None if self.cost.get() > 1 => s.push_str(&format!(", cost {}", self.cost)),
            None => {}
        }
        if let Some(statuses) = &self.counting.count_when {
            s.push_str(&format!(", counting responses {statuses}"));
        }
        if let Some(settle) = &self.counting.settle {
            s.push_str(&format!(", settled by {settle}"));
        }
        s
    }
}
