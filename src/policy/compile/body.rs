//! Bounds that read a request body, against the body the operation declares: a key read from a
//! JSON body on an operation that takes only forms is never there.

use super::Compiler;
use crate::finding::Finding;
use crate::policy::source::{FORM, is_json};
use crate::policy::{BoundIndex, CostFrom, Per};
use crate::spec::pointer::push;

impl Compiler {
    /// Warns for each bound of `bounds` that reads a body the operation does not declare.
    pub(super) fn body_media(&mut self, op: &crate::spec::model::Operation, id: &str, bounds: &[BoundIndex]) {
        let Some(declared) = &op.body_media_types else { return };
        for &b in bounds {
            let bound = &self.bounds[b.index()];
            let def = &bound.def;
            let mut wants = Vec::new();
            for part in def.per.parts() {
                match part {
                    Per::Json(_) => wants.push(("json", format!("per {part}"))),
                    Per::Form(_) => wants.push(("form", format!("per {part}"))),
                    _ => {}
                }
            }
            if let Some(c) = def.cost_from.as_ref().filter(|c| matches!(c.from, CostFrom::Json(_))) {
                wants.push(("json", format!("cost-from {}", c.from)));
            }
            for (kind, what) in wants {
                let fits = |t: &String| if kind == "json" { is_json(t) } else { t == FORM };
                if declared.iter().any(fits) {
                    continue;
                }
                let media = if kind == "json" { "application/json (or a +json type)" } else { FORM };
                let has = if declared.is_empty() {
                    "declares no requestBody".to_string()
                } else {
                    format!("declares its body as {}", declared.join(", "))
                };
                let why = if what.starts_with("cost") { "every request costs cost" } else { "its key is missing" };
                self.findings.push(Finding::warning(
                    push(&op.pointer, "requestBody"),
                    format!(
                        "bound {} reads {what} from a body sent as {media}, but operation {id} {has}: unless a client sends one, {why}",
                        bound.id
                    ),
                ));
            }
        }
    }
}
