//! `opbound routes --spec SPEC... [--json]` (or `opbound routes SPEC...`)

use serde_json::{Value, json};

use super::{SpecOptions, Specs, exit, load_or_report};
use crate::policy::{Bound, Policy, report};

#[derive(clap::Args)]
#[command(override_usage = "opbound routes [OPTIONS] --spec <SPEC>...\n       opbound routes [OPTIONS] <SPEC>...")]
pub(super) struct Args {
    #[command(flatten)]
    specs: Specs,
    /// Print JSON: the route bounds once, and every operation with method, template, id and its
    /// own bounds (with several specs, an array of these, each with its "spec").
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    spec: SpecOptions,
}

pub(super) fn run(args: Args) -> u8 {
    let options = args.spec.options(false);
    let many = args.specs.many();
    let mut code = exit::OK;
    let mut listed: Vec<Value> = Vec::new();
    let mut first = true;
    for path in args.specs.paths() {
        let loaded = match load_or_report(path, &options) {
            Ok(l) => l,
            // The other specs are still listed: each failure is said where it happens.
            Err(failed) => {
                code = code.max(failed.print());
                continue;
            }
        };
        let policy = &loaded.policy;
        if args.json {
            let mut listing = report::routes(policy);
            if many && let Value::Object(fields) = &mut listing {
                // The spec first, then the listing's own fields: one object per spec.
                let mut with_spec = serde_json::Map::new();
                with_spec.insert("spec".to_string(), json!(path.display().to_string()));
                with_spec.extend(std::mem::take(fields));
                *fields = with_spec;
            }
            listed.push(listing);
            continue;
        }
        // Several listings are told apart as `head` and `tail` tell files apart.
        if many {
            if !first {
                outln!();
            }
            outln!("==> {} <==", path.display());
        }
        first = false;
        print_routes(policy);
    }
    if args.json && !listed.is_empty() {
        let out = if many { Value::Array(listed) } else { listed.swap_remove(0) };
        outln!("{}", serde_json::to_string_pretty(&out).expect("json values serialize"));
    }
    code
}

/// The route bounds, one row per operation, and the operations' own bounds.
fn print_routes(policy: &Policy) {
    if policy.route_bounds.is_empty() {
        outln!("route bounds: none");
    } else {
        outln!("route bounds (every request, matched or not):");
        let list: Vec<&Bound> = policy.route_bounds.iter().map(|&b| &policy.bounds[b]).collect();
        print_bounds(&list);
    }
    outln!();
    let rows: Vec<[String; 5]> = policy
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let mut bounds: Vec<String> = op.bounds.iter().map(|&b| policy.bounds[b].id.clone()).collect();
            if bounds.is_empty() {
                bounds.push("-".to_string());
            }
            let at = if op.routable {
                op.paths.join(", ")
            } else {
                match policy.operations.iter().find(|o| o.shares_route_with.contains(&i)) {
                    Some(keeper) => format!("(shares the route of {})", keeper.id),
                    None => "(unroutable)".to_string(),
                }
            };
            [op.method.clone(), op.template.clone(), at, op.id.clone(), bounds.join(", ")]
        })
        .collect();
    let header = ["METHOD", "TEMPLATE", "AT", "OPERATION", "BOUNDS"].map(str::to_string);
    let width = |i: usize| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (w0, w1, w2, w3) = (width(0), width(1), width(2), width(3));
    for [method, template, at, id, bounds] in [&header].into_iter().chain(rows.iter()) {
        outln!("{method:w0$}  {template:w1$}  {at:w2$}  {id:w3$}  {bounds}");
    }
    let own: Vec<&Bound> =
        policy.indexed_bounds().filter(|(i, _)| !policy.route_bounds.contains(i)).map(|(_, b)| b).collect();
    if !own.is_empty() {
        outln!();
        outln!("bounds:");
        print_bounds(&own);
    }
}

fn print_bounds(bounds: &[&Bound]) {
    let width = bounds.iter().map(|b| b.id.chars().count()).max().unwrap_or(0);
    for b in bounds {
        outln!("  {:width$}  {}{}", b.id, b.def.describe(), applies(&b.def));
    }
}

fn applies(def: &crate::policy::BoundDef) -> String {
    let mut s = def.audience().map(|a| format!("; for {a}")).unwrap_or_default();
    if def.mode == crate::policy::Mode::Shadow {
        s.push_str("; shadow");
    }
    s
}
