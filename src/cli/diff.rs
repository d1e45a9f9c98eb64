//! `opbound diff OLD NEW`: what a change to the spec does to the limits, for review before a
//! deploy.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Value, json};

use super::exit;
use super::failure::Failure;
use super::specs::{SpecOptions, report};
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
    let options = args.spec.options(false)?;
    // Both specs are read before either fails, so one run says everything wrong with both; an
    // invalid spec is exit 2 here, since there is nothing to compare.
    let old = report(crate::load(&args.old, &options), "fix it to compare");
    let new = report(crate::load(&args.new, &options), "fix it to compare");
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
    let gained: BTreeSet<&str> = d.every_operation_gained.iter().map(String::as_str).collect();
    let lost: BTreeSet<&str> = d.every_operation_lost.iter().map(String::as_str).collect();
    let changed = |direction: Direction| d.changed.iter().filter(|c| c.direction == direction).map(change).collect();
    let (loosened, tightened, otherwise): (Vec<String>, Vec<String>, Vec<String>) =
        (changed(Direction::Loosened), changed(Direction::Tightened), changed(Direction::Changed));
    // A route bound added or removed is one line: the operations under other bounds by it alone
    // are not listed one by one (196 of them on a large spec).
    let rebounded: Vec<String> = d
        .rebounded
        .iter()
        .filter_map(|r| {
            let mut parts = Vec::new();
            let gained: Vec<&str> = r.gained.iter().map(String::as_str).filter(|b| !gained.contains(b)).collect();
            let lost: Vec<&str> = r.lost.iter().map(String::as_str).filter(|b| !lost.contains(b)).collect();
            if !gained.is_empty() {
                parts.push(format!("now under {}", gained.join(", ")));
            }
            if !lost.is_empty() {
                parts.push(format!("no longer under {}", lost.join(", ")));
            }
            (!parts.is_empty()).then(|| format!("{}: {}", operation(&r.operation), parts.join("; ")))
        })
        .collect();
    let mut every = Vec::new();
    if !d.every_operation_gained.is_empty() {
        every.push(format!("now under {}", d.every_operation_gained.join(", ")));
    }
    if !d.every_operation_lost.is_empty() {
        every.push(format!("no longer under {}", d.every_operation_lost.join(", ")));
    }
    let unbounded = collapsed(&d.unbounded, &lost, "had");
    let newly_bounded = collapsed(&d.newly_bounded, &gained, "now");

    // What changed, counted, before the details.
    let mut summary = Vec::new();
    for (n, what) in [
        (d.unbounded.len(), ("operation became unbounded", "operations became unbounded")),
        (d.newly_bounded.len(), ("operation newly bounded", "operations newly bounded")),
        (d.added.len(), ("bound added", "bounds added")),
        (d.removed.len(), ("bound removed", "bounds removed")),
        (loosened.len(), ("bound loosened", "bounds loosened")),
        (tightened.len(), ("bound tightened", "bounds tightened")),
        (otherwise.len(), ("bound changed", "bounds changed")),
        (rebounded.len(), ("operation under other bounds", "operations under other bounds")),
        (d.operations_added.len(), ("operation added", "operations added")),
        (d.operations_removed.len(), ("operation removed", "operations removed")),
    ] {
        if n > 0 {
            summary.push(format!("{n} {}", if n == 1 { what.0 } else { what.1 }));
        }
    }
    let (before, after) = d.budget;
    let delta = i128::from(after) - i128::from(before);
    if delta != 0 {
        summary.push(format!("counter budget {delta:+}"));
    }
    outln!("summary: {}", summary.join(", "));

    // Each section says how many it concerns, which its lines may not (collapsed ones).
    let group = |title: &str, count: Option<usize>, lines: Vec<String>| {
        if !lines.is_empty() {
            // A title's own parenthesis, if any, takes the count first: `unbounded (1; review: ...)`.
            match (count, title.split_once(" (")) {
                (Some(n), Some((title, note))) => outln!("{title} ({n}; {note}:"),
                (Some(n), None) => outln!("{title} ({n}):"),
                (None, _) => outln!("{title}:"),
            }
            for line in lines {
                outln!("  {line}");
            }
        }
    };
    let ops = |list: &[OperationRef]| list.iter().map(operation).collect::<Vec<_>>();
    group(
        "operations that became unbounded (review: no bound can refuse them now)",
        Some(d.unbounded.len()),
        unbounded,
    );
    group("operations newly bounded", Some(d.newly_bounded.len()), newly_bounded);
    group("every operation, by a route bound", None, every);
    group("bounds added", Some(d.added.len()), d.added.iter().map(|(id, what)| format!("+ {id}: {what}")).collect());
    group(
        "bounds removed",
        Some(d.removed.len()),
        d.removed.iter().map(|(id, what)| format!("- {id}: {what}")).collect(),
    );
    group("bounds loosened", Some(loosened.len()), loosened);
    group("bounds tightened", Some(tightened.len()), tightened);
    group("bounds changed", Some(otherwise.len()), otherwise);
    group("operations under other bounds", Some(rebounded.len()), rebounded);
    group("operations added", Some(d.operations_added.len()), ops(&d.operations_added));
    group("operations removed", Some(d.operations_removed.len()), ops(&d.operations_removed));
    outln!("counter budget: {before} -> {after} ({delta:+})");
}

/// One line per operation (`GET /a (getA): had route:0`), except that the many operations whose
/// bounds are only route bounds in `route` (added or removed for every operation) are one line
/// per set of bounds, naming a few: `GET /a, GET /b, GET /c and 192 more: had route:0` (the
/// section's header gives the count).
fn collapsed(list: &[OperationRef], route: &BTreeSet<&str>, verb: &str) -> Vec<String> {
    let by_route = |o: &OperationRef| o.bounds.iter().all(|b| route.contains(b.as_str()));
    let mut groups: BTreeMap<&[String], Vec<String>> = BTreeMap::new();
    for o in list.iter().filter(|o| by_route(o)) {
        groups.entry(o.bounds.as_slice()).or_default().push(operation(o));
    }
    let many = |o: &OperationRef| by_route(o) && groups[o.bounds.as_slice()].len() > crate::finding::FEW + 1;
    let mut lines: Vec<String> =
        list.iter().filter(|o| !many(o)).map(|o| format!("{}: {verb} {}", operation(o), o.bounds.join(", "))).collect();
    for (bounds, names) in groups.into_iter().filter(|(_, names)| names.len() > crate::finding::FEW + 1) {
        lines.push(format!("{}: {verb} {}", crate::finding::few(names), bounds.join(", ")));
    }
    lines
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
        "every_operation": { "gained": d.every_operation_gained, "lost": d.every_operation_lost },
        "budget": { "old": before, "new": after, "change": i128::from(after) - i128::from(before) },
    })
}
