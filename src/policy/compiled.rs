//! The compiled policy: its operations, its bounds with their ids, scopes and fingerprints, and
//! the [`Policy`] that holds them with the router. What every later layer reads; it names
//! nothing that compiles it.

use std::ops::Index;

use super::bound::{Algorithm, BoundDef};
use super::index::BoundIndex;
use crate::finding::Finding;
use crate::router::Router;
use crate::spec::Version;

/// Where a bound was declared, which decides what its counters are shared across.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Document level: one counter per key across every request.
    Route,
    /// A named policy: one counter per key shared by every operation that uses it.
    Policy(String),
    /// A tag's bound: one counter per key shared by every operation with that tag.
    Tag(String),
    /// An operation's own bound: one counter per key for that operation.
    Operation(usize),
}

/// A bound with its identity: one table of counters at run time.
#[derive(Clone, Debug)]
pub struct Bound {
    /// Unique and stable across reloads of the same spec: `route:perimeter`, `policy:writes`,
    /// `search:0`.
    pub id: String,
    /// What the bound counts, per what, for whom: its validated fields.
    pub def: BoundDef,
    /// Where it was declared, which decides which requests share its counters.
    pub scope: Scope,
    /// Where it was written.
    pub pointer: String,
    /// A stable hash of the id and every field: the same in every process and every build, so
    /// instances sharing a store name a bound's counters alike, and a changed bound gets new ones.
    pub fingerprint: u64,
}

impl Bound {
    /// A bound, with its fingerprint computed from its id and every field.
    pub fn new(id: String, def: BoundDef, scope: Scope, pointer: String) -> Bound {
        let d = &def;
        let mut canonical = format!(
            "{id}|{}|{}|{}|{:?}|{:?}|{}|{:?}|{:?}|{}|{:?}|{:?}|{:?}|{:?}",
            d.per,
            d.algorithm.name(),
            d.limit,
            d.algorithm.window().map(|w| w.duration().as_millis()),
            match d.algorithm {
                Algorithm::TokenBucket { burst, .. } => Some(burst.get()),
                _ => None,
            },
            d.cost,
            d.applies_to.roles,
            d.applies_to.authenticated,
            d.max_keys,
            d.missing,
            d.on_store_error,
            d.mode,
            d.name,
        );
        if let Some(periods) = d.algorithm.periods() {
            // Only quotas add these, so every other bound keeps the fingerprint it had.
            canonical.push_str(&format!("|{}|{}|{}", periods.period(), periods.reset(), periods.zone().name()));
        }
        Bound { id, def, scope, pointer, fingerprint: fnv1a(canonical.as_bytes()) }
    }
}

/// FNV-1a, 64 bits: tiny, and fixed forever, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// How a caller presents a credential for `per: token`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Credential {
    /// The `Authorization` header's credentials (bearer token, basic, ...).
    Authorization,
    /// An API key in a header (name lower case).
    Header(String),
    /// An API key in a query parameter (name as written).
    Query(String),
    /// An API key in a cookie (name as written).
    Cookie(String),
}

/// An operation as the hot path sees it.
#[derive(Clone, Debug)]
pub struct Operation {
    /// `operationId`, or `METHOD /template` when the spec gives none.
    pub id: String,
    /// The HTTP method, upper case (`GET`, `QUERY`, or an `additionalOperations` name).
    pub method: String,
    /// The path key as written in the spec, without base path.
    pub template: String,
    /// Every full path template it is reachable at (base paths joined, `?`/`#` stripped).
    pub paths: Vec<String>,
    /// JSON pointer to the operation object in the spec.
    pub pointer: String,
    /// The bounds of its tags (in the order the tags are written
    /// at the top of the document), its own bounds and the policies it uses, in the order
    /// written, then those of operations that share its route. Route bounds are not repeated.
    pub bounds: Vec<BoundIndex>,
    /// Where its credentials live, for `per: token`.
    pub credentials: Vec<Credential>,
    /// Whether some request routes to it.
    pub routable: bool,
    /// Other operations whose route this one took (their bounds are included above).
    pub shares_route_with: Vec<usize>,
    /// Whether a stream's usage is asked for on the client's behalf: a bound settles from the
    /// body, and the request body declares `stream_options.include_usage` (OpenAI's chat and
    /// legacy completions).
    pub asks_usage: bool,
}

/// The compiled policy: what `serve`, `decide` and the CLI run on.
#[derive(Debug)]
pub struct Policy {
    /// The specification version the spec declared.
    pub version: Version,
    /// Every operation of the spec, routable or not; `Router` answers indices into it.
    pub operations: Vec<Operation>,
    /// Every bound, each once however many operations share it; one table of counters each.
    pub bounds: Vec<Bound>,
    /// The bounds that apply to every request, matched or not.
    pub route_bounds: Vec<BoundIndex>,
    /// Finds the operation a method and canonical path go to.
    pub router: Router,
    /// Warnings (a compiled policy has no errors).
    pub warnings: Vec<Finding>,
}

impl Policy {
    /// The operation a request goes to.
    pub fn route(&self, method: &str, canonical_path: &str) -> Option<usize> {
        self.router.lookup(method, canonical_path)
    }

    /// Every bound a request to `operation` (or to no operation) is checked against, in order.
    #[inline]
    pub fn bounds_for(&self, operation: Option<usize>) -> impl Iterator<Item = BoundIndex> + '_ {
        let own = operation.map(|op| self.operations[op].bounds.as_slice()).unwrap_or(&[]);
        self.route_bounds.iter().chain(own.iter()).copied()
    }

    /// The index of every bound, in order.
    pub fn bound_indices(&self) -> impl Iterator<Item = BoundIndex> + use<> {
        (0..self.bounds.len()).map(BoundIndex::new)
    }

    /// Every bound with its index, in order.
    pub fn indexed_bounds(&self) -> impl Iterator<Item = (BoundIndex, &Bound)> + '_ {
        self.bound_indices().zip(&self.bounds)
    }

    /// The bound with this id.
    pub fn bound_named(&self, id: &str) -> Option<BoundIndex> {
        self.indexed_bounds().find(|(_, b)| b.id == id).map(|(i, _)| i)
    }

    /// Total counters all bound tables may hold.
    pub fn counters(&self) -> u64 {
        self.bounds.iter().map(|b| u64::from(b.def.table_size())).sum()
    }
}

impl Index<BoundIndex> for [Bound] {
    type Output = Bound;

    fn index(&self, bound: BoundIndex) -> &Bound {
        &self[bound.index()]
    }
}

impl Index<BoundIndex> for Vec<Bound> {
    type Output = Bound;

    fn index(&self, bound: BoundIndex) -> &Bound {
        &self[bound.index()]
    }
}
