//! Bounds as written: each `x-rate-limit` value becomes bound indices in the order written, and a
//! `use` of a named policy becomes that policy's one bound, however many operations use it.

use std::collections::HashMap;

use serde_json::Value;

use super::Compiler;
use crate::finding::Finding;
use crate::policy::parse::{self, Entry};
use crate::policy::{Bound, BoundIndex, Scope};
use crate::spec::pointer::push;
use crate::spec::read::POLICIES;
use crate::suggest;

impl Compiler {
    /// Reads one `x-rate-limit` value into bound indices, in the order written, without repeats.
    pub(super) fn entries(&mut self, value: &Value, at: &str, prefix: &str, scope: &Scope) -> Vec<BoundIndex> {
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
                    self.bounds.push(Bound::new(format!("{prefix}:{label}"), *def, scope.clone(), pointer));
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
}

/// The entry's position in its list, as it appears in pointers (0 for a single map).
fn list_position(value: &Value, position: usize) -> usize {
    if value.is_array() { position } else { 0 }
}
