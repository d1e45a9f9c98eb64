//! Records through a policy on a manual clock, by the procedure `serve` runs on live requests
//! (`Shared::judge`): the same canonical paths, routing, keys, identity and engine.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::Record;
use crate::engine::clock::Nanos;
use crate::engine::{Decision, KeyHasher, Limiter, ManualClock, Permits, Reservations};
use crate::policy::{Algorithm, Credential, Missing, Mode, Per, Policy};
use crate::router::canonical::EscapedSlashes;
use crate::server::facts::address::TrustedProxies;
use crate::server::facts::identity::{IdentityHeaders, IdentityResolver};
use crate::server::judge::{Asked, Shared};
use crate::store::Store;

/// The headers a record's identity is handed to the judgement in, believed as a trusted
/// proxy's: the log's identity is what the live server resolved (or what the log says).
const USER: &str = "x-opbound-replay-user";
const ORG: &str = "x-opbound-replay-org";
const ROLES: &str = "x-opbound-replay-roles";

/// How a replay reads a policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// Shadow bounds refuse as if enforced: what turning them on would have done.
    pub enforce: bool,
    /// What an escaped slash in a path gets, as `serve --escaped-slashes` says.
    pub escaped_slashes: EscapedSlashes,
}

/// One record judged.
#[derive(Debug)]
pub struct Replayed {
    /// The operation it routed to.
    pub operation: Option<usize>,
    /// The decision, without its permits and reservations (the replayer holds them until the
    /// record's response ended); `None` when `serve` would have answered 400 before judging.
    pub decision: Option<Decision>,
    /// Why the request could not be judged (a malformed target or method).
    pub malformed: Option<String>,
    /// The client address judged: the record's, or `0.0.0.0` when the log has none.
    pub client: IpAddr,
}

/// What a request holds until its response ends: concurrency permits, and the `count-when`
/// reservations its status settles.
struct Held {
    permits: Permits,
    reservations: Reservations,
    status: u16,
}

/// A policy's limiter on a manual clock, judging records in time order.
pub struct Replayer {
    shared: Shared,
    clock: ManualClock,
    now: Nanos,
    settings: Settings,
    /// When each held request's response ends, with its sequence number.
    ends: BinaryHeap<Reverse<(Nanos, u64)>>,
    held: HashMap<u64, Held>,
    next: u64,
}

/// Whether the logs lack what `per` counts by (`lacks` as `Problems::lacks` words it).
fn lacked(per: &Per, lacks: &[String]) -> Option<String> {
    let has = |word: &str| lacks.iter().any(|l| l == word);
    match per {
        Per::User if has("user") => Some("a user".into()),
        Per::Org if has("org") => Some("an org".into()),
        Per::Token if has("token") => Some("a credential".into()),
        Per::Header(name) if has(&format!("header:{name}")) => Some(format!("header {name}")),
        // Formats without headers still log these.
        Per::Header(name) if has("headers") && !["user-agent", "referer", "host"].contains(&name.as_str()) => {
            Some(format!("header {name}"))
        }
        Per::Cookie(name) if has("cookies") || has(&format!("cookie:{name}")) => Some(format!("cookie {name}")),
        Per::Json(_) | Per::Form(_) => Some("request bodies".into()),
        Per::Parts(parts) => parts.iter().find_map(|p| lacked(p, lacks)),
        _ => None,
    }
}

/// What replay cannot reproduce from these logs, a sentence per bound: bounds keyed on what
/// the logs lack (skipped: their key is missing, and let pass), costs read from bodies, tiers
/// by roles the logs do not hold, concurrency without durations.
pub fn notes(policy: &Policy, lacks: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    for b in &policy.bounds {
        let def = &b.def;
        if let Some(what) = lacked(&def.per, lacks) {
            notes.push(format!(
                "{}: counted per {what}, which the logs (or some of them) do not hold; requests without it pass it uncounted",
                b.id
            ));
        }
        if def.cost_from.as_ref().is_some_and(|c| c.from.needs_body()) {
            notes.push(format!(
                "{}: its cost comes from the body, which no log holds; replay charges its default cost",
                b.id
            ));
        }
        if !def.applies_to.roles.is_empty() && lacks.iter().any(|l| l == "roles") {
            notes.push(format!("{}: for some roles, which the logs do not hold; it applies to nobody in replay", b.id));
        }
        if def.algorithm == Algorithm::Concurrency && lacks.iter().any(|l| l == "duration") {
            notes.push(format!(
                "{}: counts requests in flight, and the logs have no durations; each ends as it starts",
                b.id
            ));
        }
    }
    notes
}

impl Replayer {
    /// A replayer for `policy`, at time zero, for logs that lack `lacks` (`Problems::lacks`).
    /// A bound keyed on what the logs lack (bodies, always) is skipped: its key is missing and
    /// let pass, even where the spec says `missing: reject`, which would otherwise refuse every
    /// request. A cost read from a body is the bound's default.
    pub fn new(mut policy: Policy, settings: Settings, lacks: &[String]) -> Replayer {
        for bound in &mut policy.bounds {
            if lacked(&bound.def.per, lacks).is_some() {
                bound.def.missing = Missing::Pass;
            }
            if bound.def.cost_from.as_ref().is_some_and(|c| c.from.needs_body()) {
                bound.def.cost_from = None;
            }
            if settings.enforce {
                bound.def.mode = Mode::Enforce;
            }
        }
        let clock = ManualClock::default();
        // A fixed secret: the same log replays to the same hashed keys every time.
        let limiter = Limiter::new(Arc::new(policy), Arc::new(clock.clone()), KeyHasher::with_secret([0; 16]));
        let headers = IdentityHeaders {
            user: Some(HeaderName::from_static(USER)),
            org: Some(HeaderName::from_static(ORG)),
            roles: Some(HeaderName::from_static(ROLES)),
        };
        let identity = IdentityResolver { headers, jwt: None };
        let shared = Shared::new(
            limiter,
            TrustedProxies::new(Vec::new()),
            identity,
            Default::default(),
            String::from("replay"),
            Store::Memory,
        );
        Replayer { shared, clock, now: 0, settings, ends: BinaryHeap::new(), held: HashMap::new(), next: 0 }
    }

    /// The limiter judging.
    pub fn limiter(&self) -> Arc<Limiter> {
        self.shared.active.load().limiter.clone()
    }

    /// The time of the last record judged (or response ended).
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// The settings it was made with.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Judges one record at its time (never before the last one's: the clock does not run
    /// back). Responses that ended by then end first, releasing what they held.
    pub async fn replay(&mut self, record: &Record) -> Replayed {
        let at = record.time.max(self.now);
        self.end_until(at);
        self.set_clock(at);
        let client = record.client.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let read =
            crate::server::facts::reading::read_request(&record.method, &record.target, self.settings.escaped_slashes);
        let (method, path, query) = match read {
            Ok(r) => r,
            Err(why) => return Replayed { operation: None, decision: None, malformed: Some(why.to_string()), client },
        };
        let limiter = self.limiter();
        // Only a credential needs the operation ahead of the judgement (where its scheme puts it);
        // the judgement routes for itself.
        let operation = record.token.as_ref().and_then(|_| limiter.policy().route(&method, &path));
        let mut query = query.map(str::to_string);
        let headers = headers_of(record, limiter.policy(), operation, &mut query);
        let asked = Asked {
            method: &method,
            path: &path,
            query: query.as_deref(),
            headers: (&headers).into(),
            client,
            trusted: true,
            hits: 1,
            body: None,
        };
        let mut judgement = self.shared.judge(&asked, None).await;
        let decision = &mut judgement.decision;
        let permits = std::mem::take(&mut decision.permits);
        let reservations = std::mem::take(&mut decision.reservations);
        if !permits.is_empty() || !reservations.is_empty() {
            let status = record.status.unwrap_or(200);
            let end = at.saturating_add(record.duration.unwrap_or(0));
            self.ends.push(Reverse((end, self.next)));
            self.held.insert(self.next, Held { permits, reservations, status });
            self.next += 1;
        }
        Replayed { operation: judgement.operation, decision: Some(judgement.decision), malformed: None, client }
    }

    /// Ends every response still held (at the end of the log), each at its own end time.
    pub fn finish(&mut self) {
        self.end_until(Nanos::MAX);
    }

    fn end_until(&mut self, at: Nanos) {
        while let Some(&Reverse((end, seq))) = self.ends.peek() {
            if end > at {
                break;
            }
            self.ends.pop();
            self.set_clock(end.max(self.now));
            if let Some(held) = self.held.remove(&seq) {
                // What upstreams reported they used is not in logs: a `settle` estimate stands.
                held.reservations.settle(held.status, |_| None, false);
                drop(held.permits);
            }
        }
    }

    fn set_clock(&mut self, at: Nanos) {
        self.now = at;
        self.clock.set(Duration::from_nanos(at));
    }
}

/// The headers a record's facts are handed to the judgement in: the ones the log holds, its
/// cookies, its identity (in the replay's identity headers), and its credential where the
/// operation's security scheme says one lives (a query credential goes into `query`).
fn headers_of(record: &Record, policy: &Policy, operation: Option<usize>, query: &mut Option<String>) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(record.headers.len() + 4);
    let put = |headers: &mut HeaderMap, name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            headers.append(n, v);
        }
    };
    for (name, value) in &record.headers {
        if ![USER, ORG, ROLES].contains(&name.as_str()) {
            put(&mut headers, name, value);
        }
    }
    if !record.cookies.is_empty() && !headers.contains_key(http::header::COOKIE) {
        let joined: Vec<String> = record.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect();
        put(&mut headers, "cookie", &joined.join("; "));
    }
    if let Some(user) = &record.user {
        put(&mut headers, USER, user);
    }
    if let Some(org) = &record.org {
        put(&mut headers, ORG, org);
    }
    if !record.roles.is_empty() {
        put(&mut headers, ROLES, &record.roles.join(","));
    }
    if let (Some(token), Some(op)) = (&record.token, operation) {
        match policy.operations[op].credentials.first() {
            Some(Credential::Authorization) if !headers.contains_key(http::header::AUTHORIZATION) => {
                // No scheme: the whole value is the credential, exactly as logged.
                put(&mut headers, "authorization", token);
            }
            Some(Credential::Header(name)) if !headers.contains_key(name.as_str()) => put(&mut headers, name, token),
            Some(Credential::Cookie(name)) => {
                let cookie = format!("{name}={token}");
                match headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok()) {
                    Some(existing) if existing.split(';').any(|c| c.trim().starts_with(&format!("{name}="))) => {}
                    Some(existing) => {
                        let joined = format!("{existing}; {cookie}");
                        headers.remove(http::header::COOKIE);
                        put(&mut headers, "cookie", &joined);
                    }
                    None => put(&mut headers, "cookie", &cookie),
                }
            }
            Some(Credential::Query(name)) => {
                let present = query.as_deref().is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some(name)));
                if !present {
                    let pair = format!("{name}={}", encode(token));
                    *query = Some(match query.take() {
                        Some(q) if !q.is_empty() => format!("{q}&{pair}"),
                        _ => pair,
                    });
                }
            }
            _ => {}
        }
    }
    headers
}

/// Percent-encodes what a query value cannot hold as is.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
