//! `opbound diff OLD NEW`: what a change to the spec does to the limits, for review before a
//! deploy.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{Failure, SpecOptions, exit};
use crate::policy::diff::{BoundChange, Diff, Direction, OperationRef, diff};

#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when no operation loses every bound, 1 when some operation that a bound could refuse \
                  before is refused by none now (route bounds count; a bound in shadow mode refuses nothing), so CI \
                  can require a review, 2 when either spec cannot be read or is invalid (its findings are printed)."
)]
pub(super) struct Args {
    /// The spec as deployed.
    #[arg(value_name = "OLD")]
    old: PathBuf,
    /// The spec as changed.
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// `text`: one line per change, grouped; `json`: the same as one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Text, value_name = "FORMAT")]
    format: Format,
    #[command(flatten)]
    spec: SpecOptions,
}

/// What `--format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let options = args.spec.options(false);
    // Both specs are read before either fails, so one run says everything wrong with both; an
    // invalid spec is exit 2 here, since there is nothing to compare.
    let old = super::report(crate::load(&args.old, &options), "fix it to compare");
    let new = super::report(crate::load(&args.new, &options), "fix it to compare");
    let (old, new) = match (old, new) {
        (Ok(old), Ok(new)) => (old, new),
        (old, new) => {
            for failure in [old.err(), new.err()].into_iter().flatten() {
                failure.print();
            }
            return Err(Failure::quiet(exit::UNREADABLE));
        }
    };
    let d = diff(&old.policy, &new.policy);
    match args.format {
        Format::Text => text(&d),
        Format::Json => outln!("{}", serde_json::to_string_pretty(&to_json(&d)).unwrap_or_default()),
    }
    Ok(if d.needs_review() { exit::INVALID } else { exit::OK })
}

fn text(d: &Diff) {
    if d.is_empty() {
        outln!("no change to the limits (counter budget {})", d.budget.0);
        return;
    }
    let group = |title: &str, lines: Vec<String>| {
        if !lines.is_empty() {
            outln!("{title}:");
            for line in lines {
                outln!("  {line}");
            }
        }
    };
    let ops = |list: &[OperationRef]| list.iter().map(operation).collect::<Vec<_>>();
    group(
        "operations that became unbounded (review: no bound can refuse them now)",
        d.unbounded.iter().map(|o| format!("{}: had {}", operation(o), o.bounds.join(", "))).collect(),
    );
    group(
        "operations newly bounded",
        d.newly_bounded.iter().map(|o| format!("{}: now {}", operation(o), o.bounds.join(", "))).collect(),
    );
    group("bounds added", d.added.iter().map(|(id, what)| format!("+ {id}: {what}")).collect());
    group("bounds removed", d.removed.iter().map(|(id, what)| format!("- {id}: {what}")).collect());
    for (title, direction) in [
        ("bounds loosened", Direction::Loosened),
        ("bounds tightened", Direction::Tightened),
        ("bounds changed", Direction::Changed),
    ] {
        group(title, d.changed.iter().filter(|c| c.direction == direction).map(change).collect());
    }
    group(
        "operations under other bounds",
        d.rebounded
            .iter()
            .map(|r| {
                let mut parts = Vec::new();
                if !r.gained.is_empty() {
                    parts.push(format!("now under {}", r.gained.join(", ")));
                }
                if !r.lost.is_empty() {
                    parts.push(format!("no longer under {}", r.lost.join(", ")));
                }
                format!("{}: {}", operation(&r.operation), parts.join("; "))
            })
            .collect(),
    );
    group("operations added", ops(&d.operations_added));
    group("operations removed", ops(&d.operations_removed));
    let (before, after) = d.budget;
    let delta = i128::from(after) - i128::from(before);
    outln!("counter budget: {before} -> {after} ({delta:+})");
}

/// `GET /a (search)`, or `GET /a` when the id is the method and template.
fn operation(o: &OperationRef) -> String {
    if o.id == o.key { o.key.clone() } else { format!("{} ({})", o.key, o.id) }
}

/// `~ search:0: limit 10 -> 20; window PT1M -> PT1H`.
fn change(c: &BoundChange) -> String {
    let fields: Vec<String> = c.fields.iter().map(|f| format!("{} {} -> {}", f.field, f.old, f.new)).collect();
    format!("~ {}: {}", c.id, fields.join("; "))
}

fn to_json(d: &Diff) -> Value {
    let op = |o: &OperationRef| json!({ "operation": o.id, "key": o.key, "bounds": o.bounds });
    let bound = |(id, what): &(String, String)| json!({ "id": id, "description": what });
    let changes = |direction: Direction| -> Vec<Value> {
        d.changed
            .iter()
            .filter(|c| c.direction == direction)
            .map(|c| {
                let fields: Vec<Value> =
                    c.fields.iter().map(|f| json!({ "field": f.field, "old": f.old, "new": f.new })).collect();
                json!({ "id": c.id, "old": c.old, "new": c.new, "fields": fields })
            })
            .collect()
    };
    let (before, after) = d.budget;
    json!({
        "needs_review": d.needs_review(),
        "bounds": {
            "added": d.added.iter().map(bound).collect::<Vec<_>>(),
            "removed": d.removed.iter().map(bound).collect::<Vec<_>>(),
            "loosened": changes(Direction::Loosened),
            "tightened": changes(Direction::Tightened),
            "changed": changes(Direction::Changed),
        },
        "operations": {
            "unbounded": d.unbounded.iter().map(op).collect::<Vec<_>>(),
            "newly_bounded": d.newly_bounded.iter().map(op).collect::<Vec<_>>(),
            "rebounded": d.rebounded.iter().map(|r| json!({
                "operation": r.operation.id, "key": r.operation.key, "gained": r.gained, "lost": r.lost,
            })).collect::<Vec<_>>(),
            "added": d.operations_added.iter().map(op).collect::<Vec<_>>(),
            "removed": d.operations_removed.iter().map(op).collect::<Vec<_>>(),
        },
        "budget": { "old": before, "new": after, "change": i128::from(after) - i128::from(before) },
    })
}
