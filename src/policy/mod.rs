//! The compiled policy: every operation, every bound, and the router the hot path runs on.

pub mod bound;
mod compile;
pub mod counting;
pub mod coverage;
pub mod diff;
pub mod identity;
mod index;
pub mod parse;
pub mod report;
pub mod source;
pub mod window;

use std::path::Path;

pub use bound::{Algorithm, AppliesTo, BoundDef, Missing, Mode, OnStoreError, Per};
pub use compile::compile;
pub use counting::{Counting, Settle, StatusSet};
pub use identity::{IdentitySources, Unfed};
pub use index::{BoundIndex, PerOperation};
pub use source::{CostFrom, JsonPointer, RequestCost};
pub use window::Window;

use crate::finding::{self, Finding};
use crate::router::Router;
use crate::spec::{ReadError, Source, Version};

/// The JSON Schema (draft-07) of `x-rate-limit` and `x-rate-limit-policies` that `opbound schema`
/// prints, for editors and linters; kept as a file so it is reviewed as written.
pub const SCHEMA: &str = include_str!("x-rate-limit.schema.json");

/// Default for `--max-counters`: the most counters all bound tables together may hold.
pub const DEFAULT_MAX_COUNTERS: u64 = 1_000_000;

/// How the policy will be run, which changes what deserves a warning.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--max-counters`: the cardinality budget; the sum of every bound's table size must fit it.
    pub max_counters: u64,
    /// Whether counters are shared between instances (a Redis store).
    pub shared_store: bool,
    /// Whether the policy is served by `opbound decide`, which never sees a response end.
    pub decision_service: bool,
    /// Whether that decision service may be sent request bodies: only when it serves gRPC alone
    /// (`decide --grpc --no-http`), for Envoy's ext_authz with `with_request_body`. A gateway
    /// asking over HTTP never sends one.
    pub decision_bodies: bool,
    /// Every bound in shadow mode (`--shadow`): counted and reported, never refusing, to try a
    /// spec on live traffic before enforcing it.
    pub shadow: bool,
    /// Whether counts kept per instance are intended (`check --per-instance-ok`): one instance,
    /// or limits already divided among the instances. The in-memory store then earns no warning.
    pub per_instance_ok: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_counters: DEFAULT_MAX_COUNTERS,
            shared_store: false,
            decision_service: false,
            decision_bodies: false,
            shadow: false,
            per_instance_ok: false,
        }
    }
}

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

/// Why a spec did not become a policy.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read (exit 2).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The spec is invalid (exit 1): at least one error, plus any warnings.
    #[error("{} is invalid: {} error(s)", .path, .findings.iter().filter(|f| f.is_error()).count())]
    Invalid {
        /// The spec file, as it was named.
        path: String,
        /// Every problem found, errors and warnings, sorted, with lines and columns where known.
        findings: Vec<Finding>,
    },
}

/// A loaded spec: its source (for line numbers) and the compiled policy.
#[derive(Debug)]
pub struct Loaded {
    /// The spec's text and its file: what the policy's warnings were located in, and what the
    /// server fingerprints to tell whether a reload changed anything.
    pub source: Source,
    /// What the spec compiled to.
    pub policy: Policy,
}

impl Loaded {
    /// Places findings about this policy made after it loaded (by a command that knows how it
    /// will be served) as the load placed its own: the operation each sits in, its line and
    /// column; then sorts them.
    pub fn locate(&self, findings: &mut Vec<Finding>) {
        compile::name_operations(&self.policy.operations, findings);
        add_positions(&self.source, findings);
    }
}

/// Reads, parses and compiles a spec file; findings carry lines and columns.
pub fn load(path: &Path, options: &Options) -> Result<Loaded, LoadError> {
    let source = Source::read(path)?;
    load_source(source, options)
}

/// Parses and compiles a spec already in memory.
pub fn load_source(source: Source, options: &Options) -> Result<Loaded, LoadError> {
    let invalid = |source: &Source, mut findings: Vec<Finding>| {
        add_positions(source, &mut findings);
        LoadError::Invalid { path: source.path.display().to_string(), findings }
    };
    let value = match source.parse() {
        Ok(v) => v,
        Err(f) => return Err(invalid(&source, vec![f])),
    };
    match compile(&value, options) {
        Ok(mut policy) => {
            add_positions(&source, &mut policy.warnings);
            Ok(Loaded { source, policy })
        }
        Err(findings) => Err(invalid(&source, findings)),
    }
}

/// Fills in lines and columns (a pointer to something absent gets its nearest written
/// ancestor's position), dedupes and sorts findings.
fn add_positions(source: &Source, findings: &mut Vec<Finding>) {
    let mut wanted: Vec<&str> = Vec::new();
    for f in findings.iter().filter(|f| f.line.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            wanted.push(p);
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    let positions = source.locate(&wanted);
    for f in findings.iter_mut().filter(|f| f.line.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() && f.line.is_none() {
            if let Some(at) = positions.get(p) {
                f.line = Some(at.line);
                f.column = Some(at.column);
            }
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    finding::sort(findings);
    findings.dedup();
}
