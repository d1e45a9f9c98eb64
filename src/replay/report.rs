//! A replay's counts for people (a table) and for programs (JSON), and two replays of the same
//! traffic compared (`--diff`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::logs::Problems;
use super::tally::{BoundTally, OperationTally, Tally};
use crate::engine::clock::{Nanos, SECOND};
use crate::numbers::thousands;
use crate::period::Zone;
use crate::policy::Policy;

/// How many heaviest callers and busiest periods a report shows.
const SHOWN: usize = 5;

/// One replay to report: the policy it ran and what it counted.
pub(crate) struct Replay<'a> {
    /// The policy replayed.
    pub policy: &'a Policy,
    /// Its counts.
    pub tally: &'a Tally,
}

fn time(at: Nanos) -> String {
    Zone::utc().rfc3339(at - at % SECOND)
}

/// `1 line`, `2 lines`.
fn many(n: u64, one: &str, more: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { more })
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 { String::from("-") } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

fn operation_name(policy: &Policy, slot: usize) -> String {
    match policy.operations.get(slot) {
        Some(op) => format!("{} {} ({})", op.method, op.template, op.id),
        None => String::from("(no operation)"),
    }
}

fn hash(key: u64) -> String {
    format!("{key:016x}")
}

/// The report as text.
pub(crate) fn text(replay: &Replay<'_>, problems: &Problems, warnings: &[String]) -> String {
    let (policy, t) = (replay.policy, replay.tally);
    let mut out = String::new();
    let judged = t.records - t.malformed;
    let refused: u64 = t.operations.iter().map(|o| o.limited + o.malformed_keys).sum();
    match t.span {
        Some((first, last)) => {
            let _ = writeln!(
                out,
                "replayed {} from {} to {}",
                many(t.records, "request", "requests"),
                time(first),
                time(last)
            );
        }
        None => {
            let _ = writeln!(out, "replayed no requests");
        }
    }
    let _ =
        writeln!(out, "refused {} of {} judged ({})", thousands(refused), thousands(judged), share(refused, judged));
    if problems.malformed > 0 {
        let _ = writeln!(out, "skipped {} that could not be read", many(problems.malformed, "log line", "log lines"));
        for (source, why) in problems.examples.iter().take(3) {
            let _ = writeln!(out, "  log {} line {}: {why}", source.file + 1, source.line);
        }
    }
    if problems.late > 0 {
        let _ = writeln!(
            out,
            "{} later than the reorder window allows: replayed at the latest time seen",
            many(problems.late, "line came", "lines came")
        );
    }
    if t.malformed > 0 {
        let _ =
            writeln!(out, "{} serve would refuse with 400 before any bound", many(t.malformed, "request", "requests"));
    }
    if t.without_client > 0 {
        let _ = writeln!(
            out,
            "{} without a client address, counted as 0.0.0.0",
            many(t.without_client, "request", "requests")
        );
    }
    if !problems.lacks.is_empty() {
        let _ = writeln!(out, "the logs do not hold: {}", problems.lacks.join(", "));
    }
    for w in warnings {
        let _ = writeln!(out, "note: {w}");
    }

    let bounds: Vec<Vec<String>> = policy
        .bounds
        .iter()
        .zip(&t.bounds)
        .map(|(b, bt)| {
            let shadow = if bt.shadow_refused > 0 { thousands(bt.shadow_refused) } else { String::from("-") };
            let counts = [thousands(bt.checked), thousands(bt.counted), thousands(bt.refused), callers(bt), shadow];
            [b.id.clone()].into_iter().chain(counts).collect()
        })
        .collect();
    out.push('\n');
    table(&mut out, &["bound", "checked", "counted", "refused", "callers", "shadow"], &bounds);

    let operations: Vec<Vec<String>> = t
        .operations
        .iter()
        .enumerate()
        .filter(|(_, o)| o.requests > 0)
        .map(|(slot, ot)| {
            vec![
                operation_name(policy, slot),
                thousands(ot.requests),
                thousands(ot.allowed),
                thousands(ot.limited),
                thousands(ot.malformed_keys),
                approx(ot.callers.estimate()),
            ]
        })
        .collect();
    out.push('\n');
    table(&mut out, &["operation", "requests", "allowed", "limited", "400/413", "callers"], &operations);

    let refusing: Vec<_> =
        policy.bounds.iter().zip(&t.bounds).filter(|(_, bt)| bt.refused + bt.shadow_refused > 0).collect();
    if !refusing.is_empty() {
        out.push_str("\ncallers refused most\n");
        for (b, bt) in refusing {
            let top: Vec<String> = bt
                .heaviest
                .top(SHOWN)
                .iter()
                .map(|h| {
                    let who = h.label.clone().unwrap_or_else(|| hash(h.key));
                    if h.error > 0 {
                        format!("{who} ≤{}", thousands(h.count))
                    } else {
                        format!("{who} {}", thousands(h.count))
                    }
                })
                .collect();
            let _ = writeln!(out, "  {}: {}", b.id, top.join(", "));
        }
    }
    let busiest = t.refusals.busiest(SHOWN);
    if !busiest.is_empty() {
        let _ = writeln!(out, "\nrefusals cluster at ({}s buckets)", t.refusals.width() / SECOND);
        for (start, n) in busiest {
            let _ = writeln!(out, "  {}  {}", time(start), thousands(n));
        }
    }
    out
}

/// A table whose first column (names) is left-aligned and the others (counts) right-aligned,
/// each as wide as its widest cell, so a long operation name moves the columns instead of
/// pushing its own row out of line (issue 47, item 10).
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).chain([header[c].chars().count()]).max().unwrap_or(0))
        .collect();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in [&header].into_iter().chain(rows) {
        for (c, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[c] - cell.chars().count());
            if c == 0 {
                out.push_str(cell);
                out.push_str(&pad);
            } else {
                out.push_str("   ");
                out.push_str(&pad);
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
}

fn callers(bt: &BoundTally) -> String {
    if bt.refused + bt.shadow_refused == 0 { String::from("0") } else { approx(bt.callers.estimate()) }
}

/// An estimate, marked as one once it is past where linear counting is exact-looking.
fn approx(n: u64) -> String {
    if n < 100 { thousands(n) } else { format!("~{}", thousands(n)) }
}

/// The report as JSON.
pub(crate) fn json(replay: &Replay<'_>, problems: &Problems, warnings: &[String]) -> Value {
    let (policy, t) = (replay.policy, replay.tally);
    let bounds: Vec<Value> = policy
        .bounds
        .iter()
        .zip(&t.bounds)
        .map(|(b, bt)| {
            json!({
                "id": b.id,
                "checked": bt.checked,
                "counted": bt.counted,
                "refused": bt.refused,
                "shadow_refused": bt.shadow_refused,
                "callers_refused": if bt.refused + bt.shadow_refused == 0 { 0 } else { bt.callers.estimate() },
                "heaviest": bt.heaviest.top(SHOWN * 2).iter().map(|h| json!({
                    "key": hash(h.key),
                    "value": h.label,
                    "refused": h.count,
                    "error": h.error,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let operations: Vec<Value> = t
        .operations
        .iter()
        .enumerate()
        .filter(|(_, o)| o.requests > 0)
        .map(|(slot, o)| operation_json(policy, slot, o))
        .collect();
    json!({
        "records": t.records,
        "from": t.span.map(|(f, _)| time(f)),
        "to": t.span.map(|(_, l)| time(l)),
        "unreadable_lines": problems.malformed,
        "unreadable_examples": problems.examples.iter().map(|(s, why)| json!({"log": s.file + 1, "line": s.line, "why": why})).collect::<Vec<_>>(),
        "late_lines": problems.late,
        "malformed_requests": t.malformed,
        "without_client": t.without_client,
        "lacks": problems.lacks,
        "notes": warnings,
        "bounds": bounds,
        "operations": operations,
        "refusals": {
            "bucket_seconds": t.refusals.width() / SECOND,
            "buckets": t.refusals.buckets().map(|(s, n)| json!([time(s), n])).collect::<Vec<_>>(),
        },
    })
}

fn operation_json(policy: &Policy, slot: usize, o: &OperationTally) -> Value {
    let (id, method, template) = match policy.operations.get(slot) {
        Some(op) => (Some(op.id.as_str()), Some(op.method.as_str()), Some(op.template.as_str())),
        None => (None, None, None),
    };
    json!({
        "operation": id,
        "method": method,
        "template": template,
        "requests": o.requests,
        "allowed": o.allowed,
        "limited": o.limited,
        "refused_400_413": o.malformed_keys,
        "callers_refused": o.callers.estimate(),
    })
}

/// One operation's refusals under the old spec and the new, matched by method and template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    /// `GET /search (search)`.
    pub operation: String,
    /// Requests refused under the old spec, and under the new.
    pub refused: (u64, u64),
    /// Callers refused under each (estimates).
    pub callers: (u64, u64),
}

/// Operations whose refusals differ between two replays of the same traffic, most changed first.
pub(crate) fn changes(old: &Replay<'_>, new: &Replay<'_>) -> Vec<Change> {
    let key =
        |policy: &Policy, slot: usize| policy.operations.get(slot).map(|op| (op.method.clone(), op.template.clone()));
    let refused = |o: &OperationTally| o.limited + o.malformed_keys;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (slot, n) in new.tally.operations.iter().enumerate() {
        let k = key(new.policy, slot);
        let o = (0..old.tally.operations.len()).find(|&s| key(old.policy, s) == k).map(|s| &old.tally.operations[s]);
        seen.insert(k);
        let (ro, co) = o.map_or((0, 0), |o| (refused(o), o.callers.estimate()));
        if ro != refused(n) {
            out.push(Change {
                operation: operation_name(new.policy, slot),
                refused: (ro, refused(n)),
                callers: (co, n.callers.estimate()),
            });
        }
    }
    for (slot, o) in old.tally.operations.iter().enumerate() {
        if !seen.contains(&key(old.policy, slot)) && refused(o) > 0 {
            out.push(Change {
                operation: operation_name(old.policy, slot),
                refused: (refused(o), 0),
                callers: (o.callers.estimate(), 0),
            });
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.refused.0.abs_diff(c.refused.1)));
    out
}

/// The comparison in words, a line per operation.
pub(crate) fn diff_text(changes: &[Change]) -> String {
    let mut out = String::new();
    if changes.is_empty() {
        out.push_str("the two specs refuse the same requests on this traffic\n");
        return out;
    }
    out.push_str("old spec → new spec, on the same traffic:\n");
    for c in changes {
        let (ro, rn) = c.refused;
        let (co, cn) = c.callers;
        let line = if rn < ro && cn < co {
            format!(
                "{}: would have spared {} {} ({} → {} refused)",
                c.operation,
                many(co - cn, "caller", "callers"),
                many(ro - rn, "refusal", "refusals"),
                thousands(ro),
                thousands(rn)
            )
        } else if rn < ro {
            format!(
                "{}: {} fewer {} ({} → {} refused), callers refused {} → {}",
                c.operation,
                thousands(ro - rn),
                if ro - rn == 1 { "refusal" } else { "refusals" },
                thousands(ro),
                thousands(rn),
                approx(co),
                approx(cn)
            )
        } else {
            format!(
                "{}: {} more {} ({} → {} refused), callers refused {} → {}",
                c.operation,
                thousands(rn - ro),
                if rn - ro == 1 { "refusal" } else { "refusals" },
                thousands(ro),
                thousands(rn),
                approx(co),
                approx(cn)
            )
        };
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The comparison as JSON.
pub(crate) fn diff_json(changes: &[Change]) -> Value {
    Value::Array(
        changes
            .iter()
            .map(|c| {
                json!({
                    "operation": c.operation,
                    "refused": {"old": c.refused.0, "new": c.refused.1},
                    "callers_refused": {"old": c.callers.0, "new": c.callers.1},
                })
            })
            .collect(),
    )
}
