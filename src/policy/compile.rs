//! From the tolerant model to the compiled policy: resolves `use`, names every bound, builds the
//! router, and checks what only the whole spec can show (clashes, budget, coverage).

use std::collections::{BTreeMap, HashMap};

use indexmap::IndexMap;
use serde_json::Value;

use super::parse::{self, Entry};
use super::*;
use crate::router::template::{join, strip_suffix};
use crate::router::{RouterBuilder, Unroutable};
use crate::spec::model::{Document, ParameterIn, SecurityScheme};
use crate::spec::pointer::push;
use crate::spec::read::{self, POLICIES};
use crate::suggest;

/// Compiles a parsed document. `Err` holds every finding when at least one is an error.
pub fn compile(root: &Value, options: &Options) -> Result<Policy, Vec<Finding>> {
    let (document, findings) = read::read(root);
    let Some(document) = document else {
        return Err(findings);
    };
    let mut c = Compiler {
        findings,
        bounds: Vec::new(),
        policies: IndexMap::new(),
        broken_policies: Vec::new(),
        policy_bounds: HashMap::new(),
    };

    for (name, located) in &document.policies {
        match parse::policy(&located.value, &located.pointer, &mut c.findings) {
            Some(def) => {
                c.policies.insert(name.clone(), (def, located.pointer.clone()));
            }
            None => c.broken_policies.push(name.clone()),
        }
    }
    let route_bounds = match &document.route_bounds {
        Some(located) => c.entries(&located.value, &located.pointer, "route", &Scope::Route),
        None => Vec::new(),
    };
    let tag_bounds: Vec<(String, Vec<BoundIndex>, String)> = document
        .tag_bounds
        .iter()
        .map(|(name, located)| {
            let scope = Scope::Tag(name.clone());
            let bounds = c.entries(&located.value, &located.pointer, &format!("tag:{name}"), &scope);
            (name.clone(), bounds, located.pointer.clone())
        })
        .collect();
    let mut operations = c.operations(&document, &tag_bounds);
    let router = c.route(&document, &mut operations);

    for (name, bounds, pointer) in &tag_bounds {
        let used = operations.iter().any(|op| bounds.iter().any(|b| op.bounds.contains(b)));
        if !bounds.is_empty() && !used {
            c.findings.push(Finding::warning(
                pointer.clone(),
                format!("no operation has tag {name}, so its bounds count nothing; list it in an operation's `tags`"),
            ));
        }
    }
    for (name, (_, pointer)) in &c.policies {
        if !c.policy_bounds.contains_key(name) {
            c.findings.push(Finding::warning(
                pointer.clone(),
                format!("policy {name} is never used; refer to it with {{use: {name}}} in an x-rate-limit list"),
            ));
        }
    }
    c.budget(options.max_counters);
    // What only a complete policy can show; with errors the policy is not complete.
    if !c.findings.iter().any(Finding::is_error) {
        super::coverage::check(&operations, &c.bounds, &route_bounds, &mut c.findings);
        c.deployment(options);
    }

    name_operations(&operations, &mut c.findings);
    if c.findings.iter().any(Finding::is_error) {
        return Err(c.findings);
    }
    if options.shadow {
        // The fingerprint stays: a shadow instance counts under the same store keys as the
        // enforcing ones beside it, so a dry run sees the numbers enforcement would.
        for bound in &mut c.bounds {
            bound.def.mode = Mode::Shadow;
        }
    }
    Ok(Policy { version: document.version, operations, bounds: c.bounds, route_bounds, router, warnings: c.findings })
}

struct Compiler {
    findings: Vec<Finding>,
    bounds: Vec<Bound>,
    policies: IndexMap<String, (BoundDef, String)>,
    /// Policies written with errors: a `use` of one is not reported a second time.
    broken_policies: Vec<String>,
    /// Policy name to its bound, created on first use.
    policy_bounds: HashMap<String, BoundIndex>,
}

impl Compiler {
    /// Reads one `x-rate-limit` value into bound indices, in the order written, without repeats.
    fn entries(&mut self, value: &Value, at: &str, prefix: &str, scope: &Scope) -> Vec<BoundIndex> {
        let entries = parse::entries(value, at, &mut self.findings);
        let mut out: Vec<BoundIndex> = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for (position, entry) in entries.into_iter().enumerate() {
            let index = match entry {
                Entry::Use { policy, pointer } => {
                    let Some(index) = self.use_policy(&policy, &pointer) else {
                        continue;
                    };
                    index
                }
                Entry::Def { def, pointer } => {
                    let label = match &def.name {
                        Some(name) => {
                            if let Some(first) = names.insert(name.clone(), pointer.clone()) {
                                self.findings.push(Finding::error(
                                    push(&pointer, "name"),
                                    format!(
                                        "two bounds here are named {name} (the other is at {first}); names must differ"
                                    ),
                                ));
                                continue;
                            }
                            name.clone()
                        }
                        None => list_position(value, position).to_string(),
                    };
                    self.bounds.push(Bound::new(format!("{prefix}:{label}"), def, scope.clone(), pointer));
                    BoundIndex::new(self.bounds.len() - 1)
                }
            };
            if !out.contains(&index) {
                out.push(index);
            }
        }
        out
    }

    fn use_policy(&mut self, name: &str, pointer: &str) -> Option<BoundIndex> {
        if let Some(&index) = self.policy_bounds.get(name) {
            return Some(index);
        }
        let Some((def, def_at)) = self.policies.get(name) else {
            if !self.broken_policies.iter().any(|b| b == name) {
                let known: Vec<&str> = self.policies.keys().map(String::as_str).collect();
                let hint = match suggest::closest(name, &known) {
                    Some(s) => format!("; did you mean {s}?"),
                    None if known.is_empty() => {
                        format!("; there is no {POLICIES} map at the top of the document")
                    }
                    None => format!("; the policies are {}", known.join(", ")),
                };
                self.findings.push(Finding::error(
                    push(pointer, "use"),
                    format!("use {name} names no policy in {POLICIES}{hint}"),
                ));
            }
            return None;
        };
        self.bounds.push(Bound::new(
            format!("policy:{name}"),
            def.clone(),
            Scope::Policy(name.to_string()),
            def_at.clone(),
        ));
        let index = BoundIndex::new(self.bounds.len() - 1);
        self.policy_bounds.insert(name.to_string(), index);
        Some(index)
    }

    fn operations(&mut self, document: &Document, tag_bounds: &[(String, Vec<BoundIndex>, String)]) -> Vec<Operation> {
        let mut operations = Vec::new();
        let mut ids: HashMap<String, (usize, String)> = HashMap::new();
        // Every use of an id given more than once (where, in words): one id given to many is one
        // warning. The first use is never pointed at, so its pointer is left empty.
        let mut reused: IndexMap<String, Vec<(String, String)>> = IndexMap::new();
        for item in &document.path_items {
            for op in &item.operations {
                let index = operations.len();
                let id = op.operation_id.clone().unwrap_or_else(|| format!("{} {}", op.method, item.key));
                // Bound ids must be unique even when operation ids are not.
                let mut prefix = id.clone();
                match ids.get(&id) {
                    Some((_, first)) => {
                        let uses = reused.entry(id.clone()).or_default();
                        if uses.is_empty() {
                            uses.push((String::new(), first.clone()));
                        }
                        uses.push((push(&op.pointer, "operationId"), format!("{} {}", op.method, item.key)));
                        let mut n = 2;
                        while ids.contains_key(&format!("{id}~{n}")) {
                            n += 1;
                        }
                        prefix = format!("{id}~{n}");
                        ids.insert(prefix.clone(), (index, format!("{} {}", op.method, item.key)));
                    }
                    None => {
                        ids.insert(id.clone(), (index, format!("{} {}", op.method, item.key)));
                    }
                }
                // A tag's bounds first: from the most general to the operation's own.
                let mut bounds: Vec<BoundIndex> = tag_bounds
                    .iter()
                    .filter(|(name, ..)| op.tags.contains(name))
                    .flat_map(|(_, b, _)| b.iter().copied())
                    .collect();
                if let Some(located) = &op.rate_limit {
                    for b in self.entries(&located.value, &located.pointer, &prefix, &Scope::Operation(index)) {
                        if !bounds.contains(&b) {
                            bounds.push(b);
                        }
                    }
                }
                let base_paths = op.base_paths.as_ref().or(item.base_paths.as_ref()).unwrap_or(&document.base_paths);
                let stripped = strip_suffix(&item.key);
                let mut paths: Vec<String> = Vec::new();
                for base in base_paths {
                    let path = join(base, stripped);
                    if !paths.contains(&path) {
                        paths.push(path);
                    }
                }
                let security = op.security.as_ref().or(document.security.as_ref());
                operations.push(Operation {
                    id,
                    method: op.method.clone(),
                    template: item.key.clone(),
                    paths,
                    pointer: op.pointer.clone(),
                    bounds,
                    credentials: credentials(security, &document.security_schemes),
                    routable: true,
                    shares_route_with: Vec::new(),
                });
            }
        }
        for (id, uses) in reused {
            let why = "ids should be unique, as bounds, logs and metrics name operations by id";
            let finding = match uses.as_slice() {
                [(_, first), (at, _)] => {
                    Finding::warning(at.clone(), format!("operationId {id} is also used by {first}; {why}"))
                }
                _ => {
                    let names = uses.iter().map(|(_, words)| words.clone()).collect();
                    let listing = crate::finding::listing(names);
                    Finding::warning(
                        "/paths",
                        format!("operationId {id} is used by {} operations; {why}{listing}", uses.len()),
                    )
                }
            };
            self.findings.push(finding);
        }
        operations
    }

    fn route(&mut self, document: &Document, operations: &mut [Operation]) -> Router {
        let mut builder = RouterBuilder::default();
        let item_of: Vec<&crate::spec::model::PathItem> =
            document.path_items.iter().flat_map(|item| item.operations.iter().map(move |_| item)).collect();
        for (index, op) in operations.iter().enumerate() {
            // A key without `?` or `#` wins a clash over one with; then the smaller key.
            let rank =
                format!("{}{}\u{0}{}", u8::from(strip_suffix(&op.template) != op.template), op.template, op.pointer);
            for path in &op.paths {
                builder.add(path, &op.method, index, rank.clone());
            }
        }
        let (router, problems) = builder.build();
        let mut failed: BTreeMap<usize, usize> = BTreeMap::new();
        let mut reported: Vec<(usize, usize)> = Vec::new();
        for problem in problems {
            let (op, message) = match problem {
                Unroutable::Clash { dropped, kept, path } => {
                    *failed.entry(dropped).or_default() += 1;
                    let own: Vec<BoundIndex> = operations[dropped].bounds.clone();
                    let keeper = &mut operations[kept];
                    if !keeper.shares_route_with.contains(&dropped) {
                        keeper.shares_route_with.push(dropped);
                    }
                    for b in own {
                        if !keeper.bounds.contains(&b) {
                            keeper.bounds.push(b);
                        }
                    }
                    if reported.contains(&(dropped, kept)) {
                        continue;
                    }
                    reported.push((dropped, kept));
                    let (d, k) = (&operations[dropped], &operations[kept]);
                    (
                        dropped,
                        format!(
                            "{} {} ({}) clashes with {} {} ({}): both are {} {path}; requests go to {}, checked against the bounds of both",
                            d.method, d.template, d.id, k.method, k.template, k.id, d.method, k.id
                        ),
                    )
                }
                Unroutable::Malformed { operation, reason } => {
                    *failed.entry(operation).or_default() += 1;
                    (operation, format!("path {} cannot be routed: {reason}", operations[operation].template))
                }
                Unroutable::Conflict { operation, with } => {
                    *failed.entry(operation).or_default() += 1;
                    (
                        operation,
                        format!("path {} cannot be routed: it clashes with {with}", operations[operation].template),
                    )
                }
            };
            self.findings.push(Finding::warning(item_of[op].pointer.clone(), message));
        }
        for (op, count) in failed {
            if count >= operations[op].paths.len() {
                operations[op].routable = false;
            }
        }
        router
    }

    /// The sum of `max-keys` over every table must fit `--max-counters`.
    fn budget(&mut self, max_counters: u64) {
        let total: u64 = self.bounds.iter().map(|b| u64::from(b.def.table_size())).sum();
        if total <= max_counters {
            return;
        }
        let mut groups: BTreeMap<(u8, std::cmp::Reverse<u32>), u64> = BTreeMap::new();
        for b in &self.bounds {
            let kind = match b.scope {
                Scope::Route => 0,
                Scope::Policy(_) => 1,
                Scope::Tag(_) => 2,
                Scope::Operation(_) => 3,
            };
            *groups.entry((kind, std::cmp::Reverse(b.def.table_size()))).or_default() += 1;
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(&(kind, std::cmp::Reverse(size)), &count)| {
                let names = [
                    ("route bound", "route bounds"),
                    ("policy", "policies"),
                    ("tag bound", "tag bounds"),
                    ("operation bound", "operation bounds"),
                ];
                let (one, many) = names[usize::from(kind)];
                let what = if count == 1 { one } else { many };
                format!(
                    "{count} {what} of {} keys = {}",
                    thousands(u64::from(size)),
                    thousands(count * u64::from(size))
                )
            })
            .collect();
        self.findings.push(Finding::error(
            "",
            format!(
                "the bounds ask for {} counters, over the budget of {} (--max-counters): {}; lower max-keys on some bounds or raise --max-counters",
                thousands(total),
                thousands(max_counters),
                parts.join(", ")
            ),
        ));
    }

    fn deployment(&mut self, options: &Options) {
        if !self.bounds.is_empty() && !options.shared_store {
            self.findings.push(Finding::warning(
                "",
                "counts are per instance: with the in-memory store each opbound instance counts on its own, so N instances admit up to N times each limit; use --store redis://... to share them",
            ));
        }
        if options.decision_service {
            // One cause however many bounds it reaches: one warning.
            let concurrent: Vec<&Bound> =
                self.bounds.iter().filter(|b| b.def.algorithm == Algorithm::Concurrency).collect();
            let why = "cannot be released through a decision service: opbound decide never sees the response end, so each permit is returned at once; serve this spec with opbound serve, or use a token bucket";
            match concurrent.as_slice() {
                [] => {}
                [b] => {
                    self.findings.push(Finding::warning(b.pointer.clone(), format!("concurrency bound {} {why}", b.id)))
                }
                many => {
                    let listing = crate::finding::listing(many.iter().map(|b| b.id.clone()).collect());
                    self.findings
                        .push(Finding::warning("", format!("{} concurrency bounds {why}{listing}", many.len())));
                }
            }
        }
    }
}

/// Names the operation each finding sits in (`POST /v1/customers`), found by walking up its
/// pointer to an operation's. A path item shared through `$ref` holds several; all are named.
fn name_operations(operations: &[Operation], findings: &mut [Finding]) {
    let mut by_pointer: HashMap<&str, Vec<String>> = HashMap::new();
    for op in operations {
        by_pointer.entry(op.pointer.as_str()).or_default().push(format!("{} {}", op.method, op.template));
    }
    for f in findings.iter_mut().filter(|f| f.operation.is_none()) {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            if let Some(names) = by_pointer.get(p) {
                f.operation = Some(names.join(" and "));
                break;
            }
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
}

/// The entry's position in its list, as it appears in pointers (0 for a single map).
fn list_position(value: &Value, position: usize) -> usize {
    if value.is_array() { position } else { 0 }
}

fn credentials(
    security: Option<&Vec<crate::spec::model::Requirement>>,
    schemes: &IndexMap<String, SecurityScheme>,
) -> Vec<Credential> {
    let mut out = Vec::new();
    for requirement in security.into_iter().flatten() {
        for name in &requirement.0 {
            let credential = match schemes.get(name) {
                Some(SecurityScheme::ApiKey { name, location }) => match location {
                    ParameterIn::Header => Credential::Header(name.to_ascii_lowercase()),
                    ParameterIn::Query => Credential::Query(name.clone()),
                    ParameterIn::Cookie => Credential::Cookie(name.clone()),
                    _ => continue,
                },
                Some(SecurityScheme::Authorization { .. }) => Credential::Authorization,
                _ => continue,
            };
            if !out.contains(&credential) {
                out.push(credential);
            }
        }
    }
    if out.is_empty() {
        out.push(Credential::Authorization);
    }
    out
}

/// `2000000` as `2,000,000`.
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each finding inside an operation names it in words; a path item shared by `$ref` names
    /// every operation it stands for; findings outside operations name none.
    #[test]
    fn findings_name_the_operation_they_sit_in() {
        let spec = json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "x-rate-limit": {"per": "adress", "limit": 1, "window": "PT1M"},
            "paths": {
                "/v1/customers": {"post": {"x-rate-limit": {"per": "address", "limit": 0, "window": "PT1M"}}},
                "/a": {"$ref": "#/components/pathItems/Shared"},
                "/b": {"$ref": "#/components/pathItems/Shared"}
            },
            "components": {"pathItems": {"Shared": {"get": {"x-rate-limit": {"per": "user", "limt": 1}}}}}
        });
        let findings = compile(&spec, &Options::default()).expect_err("the spec has errors");
        let named = |pointer: &str| {
            let f = findings.iter().find(|f| f.pointer == pointer).unwrap_or_else(|| panic!("no finding at {pointer}"));
            f.operation.clone()
        };
        let cases = [
            ("/x-rate-limit/per", None),
            ("/paths/~1v1~1customers/post/x-rate-limit/limit", Some("POST /v1/customers")),
            ("/components/pathItems/Shared/get/x-rate-limit/limt", Some("GET /a and GET /b")),
        ];
        for (pointer, expected) in cases {
            assert_eq!(named(pointer).as_deref(), expected, "{pointer}");
        }
    }
}
