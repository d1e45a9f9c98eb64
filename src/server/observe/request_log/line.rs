//! A request's line: the facts its bounds read, in order, with caller values hashed or as they
//! came.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use crate::server::facts::fields::Headers;
use siphasher::sip128::SipHasher13;

use crate::engine::Outcome;
use crate::engine::clock::Nanos;
use crate::policy::{Credential, Per, Policy};
use crate::request::{Facts, Identity, Key};

use super::settings::*;
use crate::server::facts::identity::HeaderFacts;

/// How values are written: hashed with a key, or as they came.
pub(super) enum Keys {
    Hashed(SipHasher13),
    Plain,
}

impl Keys {
    pub(super) fn new(mode: KeyMode, secret: Secret) -> Keys {
        match mode {
            KeyMode::Hashed => Keys::Hashed(SipHasher13::new_with_key(&secret)),
            KeyMode::Plain => Keys::Plain,
        }
    }

    /// The value as a JSON string.
    pub(super) fn value(&self, out: &mut String, bytes: &[u8]) {
        match self {
            Keys::Hashed(hasher) => {
                let _ = write!(out, "\"h:{:032x}\"", hasher.hash(bytes).as_u128());
            }
            Keys::Plain => json_str(out, &String::from_utf8_lossy(bytes)),
        }
    }

    /// The value as it goes back into a query string: hashed (which needs no escaping), or as
    /// written.
    pub(super) fn query_value(&self, out: &mut String, decoded: &[u8], written: &str) {
        match self {
            Keys::Hashed(hasher) => {
                let _ = write!(out, "h:{:032x}", hasher.hash(decoded).as_u128());
            }
            Keys::Plain => out.push_str(written),
        }
    }
}

/// A JSON string. Control characters are escaped; anything else is written as is.
pub(super) fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What some bound of a policy reads beyond the method, path and client address: computed once
/// per policy, since a reload may change it.
#[derive(Debug)]
pub(super) struct Reads {
    pub(super) policy: Arc<Policy>,
    /// Some bound counts per user, org or token, or applies to some callers only.
    pub(super) identity: bool,
    /// Some bound counts `per: token`.
    pub(super) token: bool,
    /// Query parameters counted per or holding credentials: hashed in the target.
    pub(super) query: Vec<String>,
    /// Headers (lower case) and whether they identify a caller (hashed); `cost-from` headers
    /// are numbers, written as they came.
    pub(super) headers: Vec<(String, bool)>,
    /// Cookies counted per or holding credentials.
    pub(super) cookies: Vec<String>,
}

impl Reads {
    pub(super) fn of(policy: &Arc<Policy>) -> Reads {
        fn add(list: &mut Vec<String>, name: &str) {
            if !list.iter().any(|n| n == name) {
                list.push(name.to_string());
            }
        }
        fn add_header(list: &mut Vec<(String, bool)>, name: &str, hashed: bool) {
            match list.iter_mut().find(|(n, _)| n == name) {
                Some((_, h)) => *h |= hashed,
                None => list.push((name.to_string(), hashed)),
            }
        }
        let mut reads = Reads {
            policy: policy.clone(),
            identity: false,
            token: false,
            query: Vec::new(),
            headers: Vec::new(),
            cookies: Vec::new(),
        };
        for bound in &policy.bounds {
            let def = &bound.def;
            reads.identity |= def.needs_identity();
            for part in def.per.parts() {
                match part {
                    Per::Token => reads.token = true,
                    Per::Header(name) => add_header(&mut reads.headers, name.as_str(), true),
                    Per::Cookie(name) => add(&mut reads.cookies, name),
                    Per::Query(name) => add(&mut reads.query, name),
                    _ => {}
                }
            }
            if let Some(cost) = &def.cost_from
                && let crate::policy::CostFrom::Header(name) = &cost.from
            {
                add_header(&mut reads.headers, name, false);
            }
        }
        for credential in policy.operations.iter().flat_map(|o| &o.credentials) {
            match credential {
                Credential::Authorization => {}
                Credential::Header(name) => add_header(&mut reads.headers, name, true),
                Credential::Query(name) => add(&mut reads.query, name),
                Credential::Cookie(name) => add(&mut reads.cookies, name),
            }
        }
        reads
    }
}

/// A request as the log records it, whatever became of it.
pub(crate) struct Request<'a> {
    /// The limiter's clock just before the request was judged.
    pub time: Nanos,
    /// Upper-cased, as judged.
    pub method: &'a str,
    /// The path and query as received.
    pub target: &'a str,
    /// The client address, as resolved from the peer and trusted proxies.
    pub client: IpAddr,
    pub headers: Headers<'a>,
}

/// What the bounds made of a request that was judged.
pub(crate) struct Judged<'a> {
    pub operation: Option<usize>,
    pub outcome: &'a Outcome,
    /// The identity `judge` resolved, if it did.
    pub identity: Option<&'a Identity>,
}

/// The name of an outcome in the log.
pub(super) fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::Limited { .. } => "limited",
        Outcome::MissingKey { .. } => "missing-key",
        Outcome::UnclearKey { .. } => "unclear-key",
        Outcome::BadCost { .. } => "bad-cost",
        Outcome::CostTooHigh { .. } => "cost-too-high",
        Outcome::Unavailable { .. } => "unavailable",
    }
}

/// The bound that refused, if one did.
pub(super) fn refusing_bound(outcome: &Outcome) -> Option<crate::policy::BoundIndex> {
    match outcome {
        Outcome::Allowed => None,
        Outcome::Limited { bound }
        | Outcome::MissingKey { bound, .. }
        | Outcome::UnclearKey { bound, .. }
        | Outcome::BadCost { bound, .. }
        | Outcome::CostTooHigh { bound, .. }
        | Outcome::Unavailable { bound } => Some(*bound),
    }
}

/// The request target with the values of the query parameters in `hashed` written by `keys`.
pub(super) fn target(out: &mut String, keys: &Keys, target: &str, hashed: &[String]) {
    let Some((path, query)) = target.split_once('?').filter(|_| !hashed.is_empty() && matches!(keys, Keys::Hashed(_)))
    else {
        json_str(out, target);
        return;
    };
    let mut written = String::with_capacity(target.len());
    written.push_str(path);
    written.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            written.push('&');
        }
        match pair.split_once('=') {
            Some((name, value)) if form_decode(name).is_some_and(|n| hashed.contains(&n)) => {
                written.push_str(name);
                written.push('=');
                // A malformed escape is hashed as written: the bound saw it unclear, and the
                // value still must not show.
                let decoded = form_decode(value).unwrap_or_else(|| value.to_string());
                keys.query_value(&mut written, decoded.as_bytes(), value);
            }
            _ => written.push_str(pair),
        }
    }
    json_str(out, &written);
}

/// A query name or value form-decoded as bounds read it (`+` is a space).
pub(super) fn form_decode(s: &str) -> Option<String> {
    if !s.contains(['%', '+']) {
        return Some(s.to_string());
    }
    crate::spec::pointer::percent_decode(&s.replace('+', " "))
}

/// The line of a request, but for its status and duration, which only its end knows: what comes
/// before them and what comes after.
pub(super) fn render(
    keys: &Keys,
    reads: &Reads,
    request: &Request<'_>,
    judged: Option<&Judged<'_>>,
    resolve: &dyn Fn() -> Identity,
) -> (String, String) {
    let mut head = String::with_capacity(256);
    head.push_str("{\"time\":");
    match jiff::Timestamp::from_nanosecond(i128::from(request.time)) {
        Ok(t) => {
            let _ = write!(head, "\"{t:.9}\"");
        }
        Err(_) => head.push_str("null"),
    }
    head.push_str(",\"method\":");
    json_str(&mut head, request.method);
    head.push_str(",\"target\":");
    target(&mut head, keys, request.target, &reads.query);
    let _ = write!(head, ",\"client\":\"{}\"", request.client);

    let mut tail = String::with_capacity(128);
    let Some(judged) = judged else {
        tail.push_str(",\"outcome\":\"malformed\"}");
        return (head, tail);
    };
    let policy = &reads.policy;
    if let Some(op) = judged.operation.and_then(|o| policy.operations.get(o)) {
        tail.push_str(",\"operation\":");
        json_str(&mut tail, &op.id);
    }
    let _ = write!(tail, ",\"outcome\":\"{}\"", outcome_name(judged.outcome));
    if let Some(bound) = refusing_bound(judged.outcome).and_then(|b| policy.bounds.get(b.index())) {
        tail.push_str(",\"bound\":");
        json_str(&mut tail, &bound.id);
    }
    if reads.identity {
        let resolved;
        let identity = match judged.identity {
            Some(i) => i,
            None => {
                resolved = resolve();
                &resolved
            }
        };
        if let Some(user) = &identity.user {
            tail.push_str(",\"user\":");
            keys.value(&mut tail, user.as_bytes());
        }
        if let Some(org) = &identity.org {
            tail.push_str(",\"org\":");
            keys.value(&mut tail, org.as_bytes());
        }
        if !identity.roles.is_empty() {
            tail.push_str(",\"roles\":[");
            for (i, role) in identity.roles.iter().enumerate() {
                if i > 0 {
                    tail.push(',');
                }
                json_str(&mut tail, role);
            }
            tail.push(']');
        }
    }
    let query = request.target.split_once('?').map(|(_, q)| q);
    let facts = HeaderFacts { address: request.client, headers: request.headers, query };
    if reads.token {
        let credentials = judged.operation.and_then(|o| policy.operations.get(o)).map_or(&[][..], |o| &o.credentials);
        if let Key::Present(token) = crate::request::token(&facts, credentials) {
            tail.push_str(",\"token\":");
            keys.value(&mut tail, &token);
        }
    }
    let mut first = true;
    for (name, hashed) in &reads.headers {
        let mut values = request.headers.get_all(name.as_str());
        let Some(value) = values.next() else { continue };
        tail.push_str(if first { ",\"headers\":{" } else { "," });
        first = false;
        json_str(&mut tail, name);
        tail.push(':');
        let write = |out: &mut String, v: &[u8]| match hashed {
            true => keys.value(out, v),
            false => json_str(out, &String::from_utf8_lossy(v)),
        };
        // A header sent more than once is an array of its values, in order: a bound refuses it
        // as unclear when they differ, and replay must see that they do.
        let rest: Vec<_> = values.collect();
        if rest.is_empty() {
            write(&mut tail, value);
        } else {
            tail.push('[');
            write(&mut tail, value);
            for v in rest {
                tail.push(',');
                write(&mut tail, v);
            }
            tail.push(']');
        }
    }
    if !first {
        tail.push('}');
    }
    let mut first = true;
    for name in &reads.cookies {
        let Some(value) = facts.cookie(name) else { continue };
        tail.push_str(if first { ",\"cookies\":{" } else { "," });
        first = false;
        json_str(&mut tail, name);
        tail.push(':');
        keys.value(&mut tail, &value);
    }
    if !first {
        tail.push('}');
    }
    tail.push('}');
    (head, tail)
}
