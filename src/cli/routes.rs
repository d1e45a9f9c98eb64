//! `opbound routes SPEC [--json]`

use std::path::PathBuf;

use super::{SpecOptions, exit, load_or_report};
use opbound::policy::{Bound, report};

#[derive(clap::Args)]
pub struct Args {
    /// Spec file (JSON or YAML).
    #[arg(value_name = "SPEC")]
    spec_file: PathBuf,
    /// Print a JSON array of operations, each with method, template, operation and bounds.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    spec: SpecOptions,
}

pub fn run(args: Args) -> u8 {
    let loaded = match load_or_report(&args.spec_file, &args.spec.options(false)) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let policy = &loaded.policy;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report::routes(policy)).expect("json values serialize"));
        return exit::OK;
    }
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
        policy.bounds.iter().enumerate().filter(|(i, _)| !policy.route_bounds.contains(i)).map(|(_, b)| b).collect();
    if !own.is_empty() {
        outln!();
        outln!("bounds:");
        print_bounds(&own);
    }
    exit::OK
}

fn print_bounds(bounds: &[&Bound]) {
    let width = bounds.iter().map(|b| b.id.chars().count()).max().unwrap_or(0);
    for b in bounds {
        outln!("  {:width$}  {}{}", b.id, b.def.describe(), applies(&b.def));
    }
}

fn applies(def: &opbound::policy::BoundDef) -> String {
    let mut s = def.audience().map(|a| format!("; for {a}")).unwrap_or_default();
    if def.mode == opbound::policy::Mode::Shadow {
        s.push_str("; shadow");
    }
    s
}
