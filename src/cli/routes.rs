//! `opbound routes --spec SPEC... [--json]` (or `opbound routes SPEC...`)

use serde_json::{Value, json};

use super::exit;
use super::specs::{SpecOptions, Specs, load_or_report};
use crate::policy::{Bound, BoundIndex, Policy, report};

#[derive(clap::Args)]
#[command(override_usage = "opbound routes [OPTIONS] --spec <SPEC>...\n       opbound routes [OPTIONS] <SPEC>...")]
pub(super) struct Args {
    #[command(flatten)]
    specs: Specs,
    /// Print JSON: the route bounds once, and every operation with method, template, id and its
    /// own bounds (with several specs, an array of these, each with its "spec").
    #[arg(long)]
    json: bool,
    /// Only the operations with bounds of their own (the route bounds apply to every one).
    #[arg(long)]
    bounded: bool,
    /// Only the operations whose template, path or id contains TEXT (letter case ignored).
    #[arg(long = "match", value_name = "TEXT")]
    matching: Option<String>,
    #[command(flatten)]
    spec: SpecOptions,
}

pub(super) fn run(args: Args) -> u8 {
    let options = match args.spec.options(false) {
        Ok(options) => options,
        Err(failed) => return failed.print(),
    };
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
        let shown: Vec<usize> = (0..policy.operations.len()).filter(|&i| args.shows(policy, i)).collect();
        if args.json {
            let mut listing = report::routes(policy);
            if let Some(Value::Array(ops)) = listing.get_mut("operations") {
                let mut i = 0;
                ops.retain(|_| {
                    i += 1;
                    shown.contains(&(i - 1))
                });
            }
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
        print_routes(&loaded, &shown, super::output::width());
    }
    if args.json && !listed.is_empty() {
        let out = if many { Value::Array(listed) } else { listed.swap_remove(0) };
        outln!("{}", serde_json::to_string_pretty(&out).expect("json values serialize"));
    }
    code
}

impl Args {
    /// Whether operation `i` passes `--bounded` and `--match`.
    fn shows(&self, policy: &Policy, i: usize) -> bool {
        let op = &policy.operations[i];
        if self.bounded && op.bounds.is_empty() {
            return false;
        }
        let Some(text) = &self.matching else { return true };
        let text = text.to_lowercase();
        [&op.template, &op.id].into_iter().chain(&op.paths).any(|s| s.to_lowercase().contains(&text))
    }
}

/// The route bounds, one row per operation shown, and the operations' own bounds. A column
/// that would say the same on every row is said once above the table instead, and the table is
/// cut to `width` when there is one (issue 47, item 10: 377-character lines).
fn print_routes(loaded: &crate::Loaded, shown: &[usize], width: Option<usize>) {
    let policy = &loaded.policy;
    if policy.route_bounds.is_empty() {
        outln!("route bounds: none");
    } else {
        outln!("route bounds (every request, matched or not):");
        let list: Vec<&Bound> = policy.route_bounds.iter().map(|&b| &policy.bounds[b]).collect();
        print_bounds(loaded, &list, width);
    }
    outln!();
    let rows: Vec<[String; 5]> = shown
        .iter()
        .map(|&i| {
            let op = &policy.operations[i];
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
    if rows.is_empty() {
        outln!("no operation to list: none of the {} passes --bounded and --match", policy.operations.len());
        return print_own_bounds(loaded, shown, width);
    }
    let mut columns = vec![0, 1, 2, 3, 4];
    let mut said = false;
    // Where operations are reached: said once when it is the template (no base path) or the
    // template under one base path, for every row.
    let base = rows.first().and_then(|r| r[2].strip_suffix(r[1].as_str())).map(str::to_string);
    if let Some(base) = base.filter(|b| rows.iter().all(|r| r[2].strip_suffix(r[1].as_str()) == Some(b.as_str()))) {
        if !base.is_empty() {
            outln!("every operation is reached at {base} followed by its template");
            said = true;
        }
        columns.retain(|&c| c != 2);
    }
    if rows.iter().all(|r| r[4] == rows[0][4]) && rows.len() > 1 {
        let bounds = if rows[0][4] == "-" { "none" } else { rows[0][4].as_str() };
        outln!("bounds of their own, on every operation listed: {bounds}");
        said = true;
        columns.retain(|&c| c != 4);
    }
    if said {
        outln!();
    }
    let header = ["METHOD", "TEMPLATE", "AT", "OPERATION", "BOUNDS"].map(str::to_string);
    let table: Vec<Vec<String>> =
        [&header].into_iter().chain(rows.iter()).map(|r| columns.iter().map(|&c| r[c].clone()).collect()).collect();
    print_table(&table, 1, width);
    print_own_bounds(loaded, shown, width);
}

/// Rows of cells, columns two spaces apart, the last unpadded. With a `width`, the widest
/// columns give way first (column `keep` last), and a cut cell has `…` where text was left out.
fn print_table(table: &[Vec<String>], keep: usize, width: Option<usize>) {
    let n = table.first().map_or(0, Vec::len);
    let mut widths: Vec<usize> =
        (0..n).map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    if let Some(limit) = width {
        // The widest column gives way first, column `keep` counting half its width: it ends about
        // twice as wide as the others, and nothing goes below its header or 8 characters.
        let floor: Vec<usize> = (0..n).map(|c| table[0][c].chars().count().max(8).min(widths[c])).collect();
        let weight = |c: usize| if c == keep { 1 } else { 2 };
        while widths.iter().sum::<usize>() + 2 * n.saturating_sub(1) > limit {
            let Some(c) = (0..n).filter(|&c| widths[c] > floor[c]).max_by_key(|&c| (widths[c] * weight(c), c)) else {
                break;
            };
            widths[c] -= 1;
        }
    }
    for row in table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let cell = cut(cell, widths[c]);
            if c + 1 == n {
                line.push_str(&cell);
            } else {
                line.push_str(&format!("{cell:w$}  ", w = widths[c]));
            }
        }
        outln!("{}", line.trim_end());
    }
}

/// `text` in at most `width` characters; when cut, its middle gives way to `…`, since a
/// template's start and end (`/2010-04-01/Accounts/…/Recordings/{Sid}.json`) tell rows apart.
fn cut(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width {
        return text.to_string();
    }
    let kept = width.saturating_sub(1);
    let head = kept / 2;
    let tail = kept - head;
    let mut cut: String = chars[..head].iter().collect();
    cut.push('…');
    cut.extend(&chars[chars.len() - tail..]);
    cut
}

/// The bounds of operations, each once, with what they are.
fn print_own_bounds(loaded: &crate::Loaded, shown: &[usize], width: Option<usize>) {
    let policy = &loaded.policy;
    // Every one when every operation is listed (a policy no operation uses too), else those of
    // the operations listed.
    let listed = |i: &BoundIndex| {
        shown.len() == policy.operations.len() || shown.iter().any(|&o| policy.operations[o].bounds.contains(i))
    };
    let own: Vec<&Bound> = policy
        .indexed_bounds()
        .filter(|(i, _)| !policy.route_bounds.contains(i) && listed(i))
        .map(|(_, b)| b)
        .collect();
    if !own.is_empty() {
        outln!();
        outln!("bounds:");
        print_bounds(loaded, &own, width);
    }
}

/// Each bound with what it is, and where it was written ([`crate::Loaded::written_at`]).
fn print_bounds(loaded: &crate::Loaded, bounds: &[&Bound], limit: Option<usize>) {
    let width = bounds.iter().map(|b| b.id.chars().count()).max().unwrap_or(0);
    let written = loaded.written_at(&bounds.iter().map(|b| b.pointer.as_str()).collect::<Vec<_>>());
    for (b, written) in bounds.iter().zip(written) {
        let from = written.map(|at| format!("; from {at}")).unwrap_or_default();
        let line = format!("  {:width$}  {}{}{from}", b.id, b.def.describe(), applies(&b.def));
        outln!("{}", limit.map_or(line.clone(), |limit| cut(&line, limit)));
    }
}

fn applies(def: &crate::policy::BoundDef) -> String {
    let mut s = def.audience().map(|a| format!("; for {a}")).unwrap_or_default();
    if def.mode == crate::policy::Mode::Shadow {
        s.push_str("; shadow");
    }
    s
}
