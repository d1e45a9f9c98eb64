//! The router: every operation's paths, clashes resolved by rank, and the bounds of an operation
//! that lost a clash merged into the one its requests go to.

use std::collections::BTreeMap;

use super::Compiler;
use crate::finding::Finding;
use crate::policy::{BoundIndex, Operation};
use crate::router::template::strip_suffix;
use crate::router::{Router, RouterBuilder, Unroutable};
use crate::spec::model::Document;

impl Compiler {
    pub(super) fn route(&mut self, document: &Document, operations: &mut [Operation]) -> Router {
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
}
