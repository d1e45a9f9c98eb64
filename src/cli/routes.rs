//! `opbound routes SPEC [--json]`

use std::path::PathBuf;

use super::{SpecOptions, exit, load_or_report};
use opbound::policy::report;

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
        println!(
            "{}",
            serde_json::to_string_pretty(&report::routes(policy)).expect("json values serialize")
        );
        return exit::OK;
    }
    if policy.route_bounds.is_empty() {
        println!("route bounds: none");
    } else {
        println!("route bounds (every request, matched or not):");
        for &b in &policy.route_bounds {
            let b = &policy.bounds[b];
            println!("  {}  {}{}", b.id, b.def.describe(), applies(&b.def));
        }
    }
    println!();
    let rows: Vec<[String; 4]> = policy
        .operations
        .iter()
        .map(|op| {
            let mut bounds: Vec<String> = op
                .bounds
                .iter()
                .map(|&b| policy.bounds[b].id.clone())
                .collect();
            if bounds.is_empty() {
                bounds.push("-".to_string());
            }
            let mut template = op.template.clone();
            if !op.routable {
                template.push_str(" (unroutable)");
            }
            [
                op.method.clone(),
                template,
                op.id.clone(),
                bounds.join(", "),
            ]
        })
        .collect();
    let header = ["METHOD", "TEMPLATE", "OPERATION", "BOUNDS"].map(str::to_string);
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in [&header].into_iter().chain(rows.iter()) {
        println!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    let own: Vec<&opbound::policy::Bound> = policy
        .bounds
        .iter()
        .filter(|b| {
            !policy
                .route_bounds
                .iter()
                .any(|&r| policy.bounds[r].id == b.id)
        })
        .collect();
    if !own.is_empty() {
        println!();
        println!("bounds:");
        for b in own {
            println!("  {}  {}{}", b.id, b.def.describe(), applies(&b.def));
        }
    }
    exit::OK
}

fn applies(def: &opbound::policy::BoundDef) -> String {
    let mut parts = Vec::new();
    if !def.applies_to.roles.is_empty() {
        parts.push(format!("roles {}", def.applies_to.roles.join(", ")));
    }
    if let Some(a) = def.applies_to.authenticated {
        parts.push(if a {
            "signed-in callers".to_string()
        } else {
            "anonymous callers".to_string()
        });
    }
    let mut s = if parts.is_empty() {
        String::new()
    } else {
        format!("; for {}", parts.join(", "))
    };
    if def.mode == opbound::policy::Mode::Shadow {
        s.push_str("; shadow");
    }
    s
}
