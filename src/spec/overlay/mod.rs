//! OpenAPI Overlays (1.0 and 1.1): a document of actions, each a JSONPath (RFC 9535) `target` with
//! an `update` merged in, a `remove`, or (1.1) a `copy` from another node, applied in order to a
//! spec one does not own. [`Overlay::read`] validates an overlay and places every problem at its
//! line and column; [`Overlay::apply`] (in `apply.rs`) changes a spec's tree and says which
//! action wrote what.

use std::collections::HashMap;

use serde_json::{Map, Value};
use serde_json_path::JsonPath;

use crate::finding::{self, Finding};
use crate::spec::Source;

mod apply;

/// What applying overlays made besides the tree: warnings about them (a target that selects
/// nothing, the usual sign of a path that changed in the spec), and which action wrote where.
#[derive(Debug, Default)]
pub struct Applied {
    /// Located in each overlay's file.
    pub warnings: Vec<Finding>,
    /// Every node an action wrote, in the order written.
    pub origins: Vec<Origin>,
    /// The last entry of `origins` for each pointer, so that finding the action behind a node
    /// costs a lookup per level of its pointer rather than a scan of everything written.
    latest: HashMap<String, usize>,
}

/// A node an overlay action wrote: a finding inside it is the action's.
#[derive(Clone, Debug)]
pub struct Origin {
    /// JSON pointer to the node in the merged document.
    pub pointer: String,
    /// How findings name the action: `limits.yaml, action 2`.
    pub action: String,
    /// The line the action is written on in the overlay's file.
    pub line: Option<usize>,
    /// Its column on that line.
    pub column: Option<usize>,
}

impl Applied {
    /// The action that wrote the node at `pointer` or the nearest written node above it: the
    /// last that did.
    pub fn origin_of(&self, at: &str) -> Option<&Origin> {
        let mut last = None;
        let mut p = at;
        loop {
            last = last.max(self.latest.get(p).copied());
            if p.is_empty() {
                break;
            }
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
        last.map(|i| &self.origins[i])
    }

    /// Notes that an action wrote the node at `origin.pointer`.
    pub fn record(&mut self, origin: Origin) {
        self.latest.insert(origin.pointer.clone(), self.origins.len());
        self.origins.push(origin);
    }
}

/// Which version of the Overlay Specification a document follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlayVersion {
    /// 1.0.x: `update` and `remove`.
    V1_0,
    /// 1.1.x: `copy` besides.
    V1_1,
}

/// An overlay, read and valid.
#[derive(Debug)]
pub struct Overlay {
    /// Its text and file: where findings about it are placed.
    pub source: Source,
    /// The version it declares.
    pub version: OverlayVersion,
    /// Its actions, in order.
    pub actions: Vec<Action>,
    /// Where each action is written, line and column, found in one pass over the file: asked
    /// for once per action, a pass each made applying an overlay quadratic in its length.
    positions: Vec<Option<(usize, usize)>>,
}

/// One action of an overlay.
#[derive(Debug)]
pub struct Action {
    /// Its position in `actions`, from 0.
    pub index: usize,
    /// The JSONPath that selects the nodes it changes, as written and parsed.
    pub target: (String, JsonPath),
    /// What it does to them.
    pub change: Change,
}

/// What an action does to the nodes its target selects.
#[derive(Debug)]
pub enum Change {
    /// Merges a value in: an object's members into an object (recursively), a value (or an
    /// array's items) appended to an array, a primitive in place of a primitive.
    Update(Value),
    /// Removes them from their parent.
    Remove,
    /// Merges in, as `Update` does, the one node another JSONPath selects (1.1).
    Copy(String, JsonPath),
}

/// The fields of the overlay object and of the objects in it; `x-` extensions are allowed in each.
const ROOT_FIELDS: &[&str] = &["overlay", "info", "extends", "actions"];
const INFO_FIELDS: &[&str] = &["title", "version", "description"];
const ACTION_FIELDS: &[&str] = &["target", "description", "update", "remove", "copy"];

impl Overlay {
    /// Parses and validates an overlay. Every problem is a finding located in its file.
    pub fn read(source: Source) -> Result<Overlay, Vec<Finding>> {
        let tree = source.parse().map_err(|f| vec![f])?;
        let mut findings = Vec::new();
        let (version, actions) = check(&tree, &mut findings);
        if findings.iter().any(Finding::is_error) {
            return Err(locate(&source, findings));
        }
        match version {
            Some(version) => {
                let pointers: Vec<String> = actions.iter().map(|a| format!("/actions/{}", a.index)).collect();
                let refs: Vec<&str> = pointers.iter().map(String::as_str).collect();
                let mut found = source.locate(&refs);
                let mut positions = vec![None; actions.last().map_or(0, |a| a.index + 1)];
                for (action, pointer) in actions.iter().zip(&pointers) {
                    positions[action.index] = found.remove(pointer).map(|p| (p.line, p.column));
                }
                Ok(Overlay { source, version, actions, positions })
            }
            None => Err(locate(&source, vec![Finding::error("/overlay", "no overlay version")])),
        }
    }

    /// Where action `index` is written: its line and column in the overlay's file.
    pub fn position(&self, index: usize) -> Option<(usize, usize)> {
        self.positions.get(index).copied().flatten()
    }

    /// How a finding names action `index`: `limits.yaml, action 2 (line 5, column 5)`.
    pub fn describe(&self, index: usize) -> String {
        let place = match self.position(index) {
            Some((line, column)) => format!(" (line {line}, column {column})"),
            None => String::new(),
        };
        format!("{}, action {}{place}", self.source.path.display(), index + 1)
    }
}

/// The JSONPath (RFC 9535, normalized) of the node a JSON pointer names: `/paths/~1a/get` is
/// `$['paths']['/a']['get']`, the empty pointer `$`.
pub fn json_path_of(at: &str) -> String {
    let mut path = String::from("$");
    for token in crate::spec::pointer::tokens(at) {
        let escaped = token.replace('\\', "\\\\").replace('\'', "\\'");
        path.push_str(&format!("['{escaped}']"));
    }
    path
}

/// Places findings about an overlay at their lines and columns, sorted.
pub(crate) fn locate(source: &Source, mut findings: Vec<Finding>) -> Vec<Finding> {
    let mut wanted: Vec<String> = Vec::new();
    for f in &findings {
        let mut p = f.pointer.as_str();
        while !p.is_empty() {
            wanted.push(p.to_string());
            p = &p[..p.rfind('/').unwrap_or(0)];
        }
    }
    let refs: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let positions = source.locate(&refs);
    for f in findings.iter_mut().filter(|f| f.line.is_none()) {
        let mut p = f.pointer.clone();
        while !p.is_empty() && f.line.is_none() {
            if let Some(at) = positions.get(&p) {
                (f.line, f.column) = (Some(at.line), Some(at.column));
            }
            p.truncate(p.rfind('/').unwrap_or(0));
        }
    }
    finding::sort(&mut findings);
    findings
}

fn unknown_fields(object: &Map<String, Value>, pointer: &str, known: &[&str], what: &str, out: &mut Vec<Finding>) {
    for key in object.keys() {
        if !known.contains(&key.as_str()) && !key.starts_with("x-") {
            let expected = known.join(", ");
            out.push(Finding::error(
                crate::spec::pointer::push(pointer, key),
                format!("unknown field {key:?} in {what} (expected {expected}, or an x- extension)"),
            ));
        }
    }
}

/// Checks an overlay's tree; its version and actions when they read.
fn check(tree: &Value, out: &mut Vec<Finding>) -> (Option<OverlayVersion>, Vec<Action>) {
    let Some(root) = tree.as_object() else {
        out.push(Finding::error("", "an overlay is an object with overlay, info and actions"));
        return (None, Vec::new());
    };
    unknown_fields(root, "", ROOT_FIELDS, "the overlay", out);
    let version = match root.get("overlay") {
        None => {
            out.push(Finding::error("", "no overlay field: an overlay starts with overlay: 1.0.0 or 1.1.0"));
            None
        }
        Some(Value::String(v)) if is_version(v, "1.0.") => Some(OverlayVersion::V1_0),
        Some(Value::String(v)) if is_version(v, "1.1.") => Some(OverlayVersion::V1_1),
        Some(other) => {
            out.push(Finding::error("/overlay", format!("overlay version {other} is not 1.0.x or 1.1.x")));
            None
        }
    };
    match root.get("info") {
        Some(Value::Object(info)) => {
            unknown_fields(info, "/info", INFO_FIELDS, "info", out);
            for field in ["title", "version"] {
                if !info.get(field).is_some_and(Value::is_string) {
                    out.push(Finding::error("/info", format!("info needs a {field} (a string)")));
                }
            }
        }
        Some(_) => out.push(Finding::error("/info", "info is an object with a title and a version")),
        None => out.push(Finding::error("", "no info: an overlay has info with a title and a version")),
    }
    if root.get("extends").is_some_and(|e| !e.is_string()) {
        out.push(Finding::error("/extends", "extends is a URL (a string)"));
    }
    let actions = match root.get("actions") {
        Some(Value::Array(actions)) if !actions.is_empty() => {
            actions.iter().enumerate().filter_map(|(i, a)| action(i, a, version, out)).collect()
        }
        Some(Value::Array(_)) => {
            out.push(Finding::error("/actions", "actions is empty: an overlay has at least one"));
            Vec::new()
        }
        Some(_) => {
            out.push(Finding::error("/actions", "actions is a list of actions"));
            Vec::new()
        }
        None => {
            out.push(Finding::error("", "no actions: an overlay has a list of at least one"));
            Vec::new()
        }
    };
    (version, actions)
}

fn is_version(v: &str, prefix: &str) -> bool {
    v.strip_prefix(prefix).is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()))
}

/// A JSONPath as an action writes it: a string that starts with `$` and parses by RFC 9535.
fn json_path(value: Option<&Value>, pointer: &str, field: &str, out: &mut Vec<Finding>) -> Option<(String, JsonPath)> {
    let Some(Value::String(text)) = value else {
        let what = if value.is_some() { "is not a string" } else { "is missing" };
        out.push(Finding::error(pointer, format!("the action's {field} {what}: it is a JSONPath such as $.paths")));
        return None;
    };
    match JsonPath::parse(text) {
        Ok(path) => Some((text.clone(), path)),
        Err(e) => {
            out.push(Finding::error(
                crate::spec::pointer::push(pointer, field),
                format!("{field} {text:?} is not a JSONPath (RFC 9535): {e}"),
            ));
            None
        }
    }
}

fn action(index: usize, value: &Value, version: Option<OverlayVersion>, out: &mut Vec<Finding>) -> Option<Action> {
    let pointer = format!("/actions/{index}");
    let Some(object) = value.as_object() else {
        out.push(Finding::error(pointer, "an action is an object with a target"));
        return None;
    };
    unknown_fields(object, &pointer, ACTION_FIELDS, "an action", out);
    if object.get("description").is_some_and(|d| !d.is_string()) {
        out.push(Finding::error(format!("{pointer}/description"), "description is a string"));
    }
    let target = match object.get("target") {
        Some(t) => json_path(Some(t), &pointer, "target", out),
        None => json_path(None, &pointer, "target", out),
    };
    let remove = match object.get("remove") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(other) => {
            out.push(Finding::error(format!("{pointer}/remove"), format!("remove is true or false, not {other}")));
            false
        }
    };
    let change = match (object.get("update"), remove, object.get("copy")) {
        (_, true, Some(_)) | (Some(_), _, Some(_)) => {
            out.push(Finding::error(pointer.as_str(), "an action has one of update, remove and copy, not several"));
            return None;
        }
        // The specification: update has no effect when remove is true.
        (_, true, None) => Change::Remove,
        (Some(update), false, None) => Change::Update(update.clone()),
        (None, false, Some(copy)) => {
            if version == Some(OverlayVersion::V1_0) {
                out.push(Finding::error(
                    format!("{pointer}/copy"),
                    "copy is an Overlay 1.1 action: declare overlay: 1.1.0",
                ));
                return None;
            }
            let (text, path) = json_path(Some(copy), &pointer, "copy", out)?;
            Change::Copy(text, path)
        }
        (None, false, None) => {
            out.push(Finding::error(pointer.as_str(), "the action does nothing: give it update, remove: true or copy"));
            return None;
        }
    };
    Some(Action { index, target: target?, change })
}

#[cfg(test)]
mod tests;
