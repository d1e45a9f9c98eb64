//! Operations: their ids (made unique for bound ids, with a warning for each id given twice),
//! their bounds (tags' first, then their own), and the full paths they are reachable at.

use std::collections::HashMap;

use indexmap::IndexMap;

use super::Compiler;
use super::credentials::credentials;
use crate::finding::Finding;
use crate::policy::{BoundIndex, Operation, Scope};
use crate::router::template::{join, strip_suffix};
use crate::spec::model::Document;
use crate::spec::pointer::push;

impl Compiler {
    pub(super) fn operations(
        &mut self,
        document: &Document,
        tag_bounds: &[(String, Vec<BoundIndex>, String)],
    ) -> Vec<Operation> {
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
                self.body_media(op, &id, &bounds);
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
                    asks_usage: false,
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
}
