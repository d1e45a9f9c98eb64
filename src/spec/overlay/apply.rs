//! Applying an overlay to a spec's tree, action by action, with the semantics of Overlay 1.1
//! (which 1.0 documents get too): an `update` merges an object's members into an object
//! (recursively, arrays inside appended to), appends to an array (an array's items, or one value),
//! and replaces a primitive with a primitive; `remove` takes the selected nodes out of their
//! parents; `copy` merges, as `update` does, the one node its JSONPath selects.

use serde_json::Value;
use serde_json_path::PathElement;

use super::{Action, Applied, Change, Origin, Overlay};
use crate::finding::Finding;
use crate::spec::pointer;

/// One step into a tree: a member's name or an item's index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps_pointer(steps: &[Step]) -> String {
    steps.iter().fold(String::new(), |p, s| match s {
        Step::Key(k) => pointer::push(&p, k),
        Step::Index(i) => pointer::push_index(&p, *i),
    })
}

fn node_mut<'a>(tree: &'a mut Value, steps: &[Step]) -> Option<&'a mut Value> {
    steps.iter().try_fold(tree, |node, step| match step {
        Step::Key(k) => node.as_object_mut()?.get_mut(k),
        Step::Index(i) => node.as_array_mut()?.get_mut(*i),
    })
}

/// Where a JSONPath's nodes are, as steps from the root.
fn select(path: &serde_json_path::JsonPath, tree: &Value) -> Vec<Vec<Step>> {
    path.query_located(tree)
        .locations()
        .map(|location| {
            location
                .iter()
                .map(|e| match e {
                    PathElement::Name(n) => Step::Key((*n).to_string()),
                    PathElement::Index(i) => Step::Index(*i),
                })
                .collect()
        })
        .collect()
}

impl Overlay {
    /// Applies every action in order. An action that cannot be carried out (a `remove` of the
    /// whole document, an update of the wrong shape for its target, a `copy` that selects other
    /// than one node) is an error located at it; the tree is then not to be used.
    pub fn apply(&self, tree: &mut Value, applied: &mut Applied) -> Result<(), Vec<Finding>> {
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        for action in &self.actions {
            self.act(action, tree, applied, &mut errors, &mut warnings);
        }
        // Placed together: one pass over the overlay's file, however many there are.
        applied.warnings.extend(self.own(warnings));
        if errors.is_empty() { Ok(()) } else { Err(self.own(errors)) }
    }

    /// Findings about this overlay, located in its file.
    fn own(&self, findings: Vec<Finding>) -> Vec<Finding> {
        let file = self.source.path.display().to_string();
        let mut findings = super::locate(&self.source, findings);
        for f in &mut findings {
            f.file = Some(file.as_str().into());
        }
        findings
    }

    fn act(
        &self,
        action: &Action,
        tree: &mut Value,
        applied: &mut Applied,
        errors: &mut Vec<Finding>,
        warnings: &mut Vec<Finding>,
    ) {
        let at = format!("/actions/{}", action.index);
        let (target_text, target) = &action.target;
        let mut selected = select(target, tree);
        if selected.is_empty() {
            warnings.push(Finding::warning(
                format!("{at}/target"),
                format!("target {target_text} selects nothing in the spec (was the path renamed?)"),
            ));
            return;
        }
        let incoming = match &action.change {
            Change::Remove => {
                if selected.iter().any(Vec::is_empty) {
                    errors
                        .push(Finding::error(format!("{at}/target"), "remove cannot take out the whole document ($)"));
                    return;
                }
                // Later items first, so removing one does not move the next.
                selected.sort();
                for steps in selected.iter().rev() {
                    let (last, parent) = steps.split_last().expect("not the root");
                    match (node_mut(tree, parent), last) {
                        (Some(Value::Object(o)), Step::Key(k)) => {
                            o.shift_remove(k);
                        }
                        (Some(Value::Array(a)), Step::Index(i)) if *i < a.len() => {
                            a.remove(*i);
                        }
                        _ => {}
                    }
                }
                return;
            }
            Change::Update(value) => value.clone(),
            Change::Copy(text, from) => {
                let found = from.query(tree).all();
                if found.len() != 1 {
                    errors.push(Finding::error(
                        format!("{at}/copy"),
                        format!("copy {text} selects {} nodes; it must select exactly one", found.len()),
                    ));
                    return;
                }
                found[0].clone()
            }
        };
        let position = self.position(action.index);
        let by = Origin {
            pointer: String::new(),
            action: format!("{}, action {}", self.source.path.display(), action.index + 1),
            line: position.map(|p| p.0),
            column: position.map(|p| p.1),
        };
        for steps in &selected {
            let Some(node) = node_mut(tree, steps) else { continue };
            let here = steps_pointer(steps);
            match merge(node, incoming.clone(), &here, applied, &by) {
                Ok(()) => {}
                Err(why) => {
                    let field = if matches!(action.change, Change::Copy(..)) { "copy" } else { "update" };
                    errors.push(Finding::error(format!("{at}/{field}"), format!("{why} (target {target_text})")));
                }
            }
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        _ => "a primitive",
    }
}

/// Merges `incoming` into the node at `at`, recording what it wrote.
fn merge(node: &mut Value, incoming: Value, at: &str, applied: &mut Applied, by: &Origin) -> Result<(), String> {
    let mut record = |pointer: String| applied.record(Origin { pointer, ..by.clone() });
    match (node, incoming) {
        (Value::Array(items), Value::Array(more)) => {
            for item in more {
                record(pointer::push_index(at, items.len()));
                items.push(item);
            }
        }
        (Value::Array(items), one) => {
            record(pointer::push_index(at, items.len()));
            items.push(one);
        }
        (Value::Object(members), Value::Object(more)) => {
            for (key, value) in more {
                record(pointer::push(at, &key));
                match members.get_mut(&key) {
                    Some(existing) => deep_merge(existing, value),
                    None => {
                        members.insert(key, value);
                    }
                }
            }
        }
        (Value::Object(_), other) => {
            return Err(format!("the update is {} but the target selects an object at {at}", kind(&other)));
        }
        (node, Value::Object(_) | Value::Array(_)) => {
            return Err(format!("the update is not a primitive but the target selects {} at {at}", kind(node)));
        }
        (node, primitive) => {
            record(at.to_string());
            *node = primitive;
        }
    }
    Ok(())
}

/// Below the target: objects merge member by member, arrays are appended to, anything else is
/// replaced.
fn deep_merge(node: &mut Value, incoming: Value) {
    match (node, incoming) {
        (Value::Object(members), Value::Object(more)) => {
            for (key, value) in more {
                match members.get_mut(&key) {
                    Some(existing) => deep_merge(existing, value),
                    None => {
                        members.insert(key, value);
                    }
                }
            }
        }
        (Value::Array(items), Value::Array(more)) => items.extend(more),
        (node, other) => *node = other,
    }
}
