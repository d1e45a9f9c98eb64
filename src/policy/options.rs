//! How a policy will be run ([`Options`]), which changes what compiling it warns about.

/// Default for `--max-counters`: the most counters all bound tables together may hold.
pub const DEFAULT_MAX_COUNTERS: u64 = 1_000_000;

/// Default for `--max-operations`: the most operations a spec may have. A compiled operation
/// costs a few kilobytes (its route, its bounds, its findings' names), so this many with bounds
/// load in well under 512 MiB; no public spec within the 32 MB fetch cap comes near it
/// (Kubernetes has about 1,000).
pub const DEFAULT_MAX_OPERATIONS: usize = 20_000;

/// How the policy will be run, which changes what deserves a warning.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--max-counters`: the cardinality budget; the sum of every bound's table size must fit it.
    pub max_counters: u64,
    /// `--max-operations`: a spec with more operations is refused before any is compiled.
    pub max_operations: usize,
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
    /// `--overlay`: OpenAPI Overlays applied to the spec, in order, before it compiles. Read
    /// again on every load, so a reload sees their changes.
    pub overlays: Vec<std::path::PathBuf>,
    /// How a spec or overlay given by URL is fetched (`--spec-ca-file`, `--spec-server-name`).
    pub fetch: crate::spec::fetch::Fetch,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_counters: DEFAULT_MAX_COUNTERS,
            max_operations: DEFAULT_MAX_OPERATIONS,
            shared_store: false,
            decision_service: false,
            decision_bodies: false,
            shadow: false,
            per_instance_ok: false,
            overlays: Vec::new(),
            fetch: crate::spec::fetch::Fetch::default(),
        }
    }
}
