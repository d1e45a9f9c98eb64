//! `opbound suggest SPEC LOG...`: bounds proposed from recorded traffic, with their evidence,
//! written as `x-rate-limit` into a copy of the spec.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::exit;
use super::failure::Failure;
use super::specs::{SpecOptions, report};
use crate::numbers::thousands;
use crate::replay::logs::{self, Logs};
use crate::replay::suggest::{self, Measurements, Proposal};
use crate::replay::{Lane, run as replay_all};

mod written;

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 proposals made (or none the traffic supports), 1 the spec is invalid, 2 a \
                  spec or log cannot be read, or a usage error, 3 the proposals did not compile (nothing is \
                  written). Existing bounds are left alone unless --replace. Each proposal's max-keys is twice the \
                  callers seen; when they do not all fit --max-counters, the proposals of the operations with the \
                  least traffic are left out. The annotated spec is replayed on the logs with every bound \
                  enforced, for each proposal's evidence; the proposals refusing most are raised until the \
                  refusals fit --max-refused-share, and the output says first if they do not. -o is written only \
                  once all of this has succeeded.")]
pub(super) struct Args {
    /// The spec to propose bounds for.
    #[arg(value_name = "SPEC")]
    spec: PathBuf,
    /// Access logs (plain or gzip), merged by time; formats as for `replay`.
    #[arg(value_name = "LOG", required = true)]
    logs: Vec<PathBuf>,
    /// Write the spec with the proposals added here (YAML for a YAML spec, JSON for JSON).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// What a limit is: this percentile of callers' busiest window, times --headroom.
    #[arg(long, default_value_t = 99.0, value_name = "P")]
    percentile: f64,
    /// How much room above the chosen percentile a limit leaves.
    #[arg(long, default_value_t = 2.0, value_name = "FACTOR")]
    headroom: f64,
    /// The window a proposed limit counts over (10s, 1m, 1h).
    #[arg(long, default_value = "1m", value_parser = super::flags::parse_duration, value_name = "DURATION")]
    window: std::time::Duration,
    /// How many callers each distribution keeps at most (a uniform sample by hash): memory is
    /// bounded by this whatever the number of callers.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    sample: usize,
    /// The most of the replayed requests (a percentage) the proposals together may refuse:
    /// those refusing more are raised, and what cannot be brought within it is said first.
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT")]
    max_refused_share: f64,
    /// Replace bounds already written where a proposal goes.
    #[arg(long)]
    replace: bool,
    /// What -o writes: `spec`, a copy of the spec with the proposals in it; `overlay`, the
    /// proposals alone as an OpenAPI Overlay, to pass to `serve --overlay` (YAML, or JSON for a
    /// .json file).
    #[arg(long = "as", value_enum, default_value_t = written::Written::Spec, value_name = "WHAT")]
    written: written::Written,
    #[command(flatten)]
    reading: super::replay::Reading,
    /// `text`: the proposals with their evidence; `json`: the same as one document.
    #[arg(long, value_enum, default_value_t = Output::Text, value_name = "FORMAT")]
    format: Output,
    #[command(flatten)]
    options: SpecOptions,
}

/// What `--format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    if !(args.percentile > 0.0 && args.percentile <= 100.0) {
        return Err(Failure::usage(format!("--percentile {} must be above 0 and at most 100", args.percentile)));
    }
    if !(args.headroom >= 1.0 && args.headroom.is_finite()) {
        return Err(Failure::usage(format!("--headroom {} must be at least 1", args.headroom)));
    }
    if !(args.max_refused_share >= 0.0 && args.max_refused_share <= 100.0) {
        return Err(Failure::usage(format!(
            "--max-refused-share {} must be a percentage from 0 to 100",
            args.max_refused_share
        )));
    }
    if args.window.as_secs() == 0 || args.window.subsec_nanos() != 0 {
        return Err(Failure::usage("--window must be a whole number of seconds, at least 1s".to_string()));
    }
    if let Some(out) = &args.output
        && std::fs::canonicalize(out).ok().is_some_and(|o| std::fs::canonicalize(&args.spec).ok() == Some(o))
    {
        return Err(Failure::usage(format!(
            "-o {} is the spec itself; write the copy elsewhere and review it with `opbound diff`",
            out.display()
        )));
    }
    let options = args.options.options(false)?;
    let loaded = report(crate::load(&args.spec, &options), "fix it to suggest bounds")?;
    let log_options = || args.reading.options();
    let unreadable = |e: logs::LogError| Failure::unreadable(e.to_string());

    let settings = suggest::Settings {
        window: args.window.as_nanos() as u64,
        percentile: args.percentile,
        headroom: args.headroom,
        sample: args.sample.max(16),
        escaped_slashes: args.reading.escaped_slashes,
    };
    let mut measurements = Measurements::new(&loaded.policy, settings);
    let mut read = Logs::open(&args.logs, log_options()).map_err(unreadable)?;
    for record in &mut read {
        measurements.insert(&loaded.policy, &record.map_err(unreadable)?);
    }
    let problems = read.problems().clone();
    let (mut proposals, heavy) = suggest::propose(&measurements);
    // The spec's own bounds keep their counters (all of them: a conservative count under
    // --replace); the proposals share what is left.
    let existing: u64 = loaded.policy.bounds.iter().map(|b| u64::from(b.def.table_size())).sum();
    let left_out = suggest::fit_budget(&mut proposals, options.max_counters.saturating_sub(existing));

    // The annotated copy is written beside where it goes and replayed for the evidence; it
    // takes the output's name only once everything has worked, so a failure leaves no file.
    let ext = args.spec.extension().and_then(|e| e.to_str()).unwrap_or("yaml");
    let scratch = Scratch(match &args.output {
        Some(out) => {
            let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("suggested");
            out.with_file_name(format!(".{name}.{}.tmp.{ext}", std::process::id()))
        }
        None => std::env::temp_dir().join(format!("opbound-suggest-{}.{ext}", std::process::id())),
    });
    let share = args.max_refused_share / 100.0;
    let mut raised: BTreeMap<usize, Raised> = BTreeMap::new();
    let mut round = 0;
    let (skipped, outcome) = loop {
        let mut tree = loaded.source.parse().map_err(|f| Failure::invalid(f.to_string()))?;
        let skipped = suggest::annotate(&mut tree, &loaded.policy, &proposals, args.replace);
        let text = crate::publish::render(&tree, loaded.source.format);
        std::fs::write(&scratch.0, &text)
            .map_err(|e| Failure::unreadable(format!("cannot write {}: {e}", scratch.0.display())))?;
        let annotated = match crate::load(&scratch.0, &options) {
            Ok(annotated) => annotated,
            Err(crate::LoadError::Read(e)) => return Err(Failure::unreadable(e.to_string())),
            Err(crate::LoadError::Invalid { findings, .. }) => {
                for f in &findings {
                    errln!("{f}");
                }
                errln!("the proposals did not compile, so nothing was written; please report this");
                return Err(Failure::quiet(exit::NOT_PROPOSED));
            }
        };
        let mut lanes = vec![Lane::new(
            annotated.policy,
            crate::replay::run::Settings { enforce: true, escaped_slashes: args.reading.escaped_slashes },
            false,
            &problems.lacks,
        )];
        let mut again = Logs::open(&args.logs, log_options()).map_err(unreadable)?;
        replay_all(&mut lanes, &mut again).map_err(unreadable)?;
        let lane = &lanes[0];
        let limiter = lane.replayer.limiter();
        let replayed = limiter.policy();
        for (i, p) in proposals.iter_mut().enumerate() {
            p.evidence.refused = None;
            if skipped.contains(&i) {
                continue;
            }
            let id = match p.operation {
                Some(op) => format!("{}:{}", loaded.policy.operations[op].id, p.name),
                None => format!("route:{}", p.name),
            };
            if let Some(b) = replayed.bounds.iter().position(|b| b.id == id) {
                let t = &lane.tally.bounds[b];
                let callers = if t.refused == 0 { 0 } else { t.callers.estimate() };
                p.evidence.refused = Some((t.refused, callers));
            }
        }
        let outcome = Outcome {
            judged: lane.tally.records - lane.tally.malformed,
            refused: lane.tally.operations.iter().map(|o| o.limited + o.malformed_keys).sum(),
            by_proposals: proposals.iter().filter_map(|p| p.evidence.refused).map(|(r, _)| r).sum(),
        };
        let allowed = (share * outcome.judged as f64).floor() as u64;
        if outcome.refused <= allowed || round == MAX_ROUNDS {
            break (skipped, outcome);
        }
        // Raise the proposals refusing most until what the others refused would fit with room
        // to spare (a raised one seldom goes to nothing).
        let mut order: Vec<usize> = (0..proposals.len()).filter(|&i| proposals[i].evidence.refused.is_some()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(proposals[i].evidence.refused.map_or(0, |(r, _)| r)), i));
        let mut remaining = outcome.refused;
        let mut any = false;
        for i in order {
            let refused = proposals[i].evidence.refused.map_or(0, |(r, _)| r);
            if refused == 0 || remaining <= allowed / 2 {
                break;
            }
            let (refused, callers) = proposals[i].evidence.refused.unwrap_or_default();
            if let Some(from) = suggest::raise(&mut proposals[i]) {
                raised.entry(i).or_insert(Raised { from, refused, callers });
                remaining -= refused;
                any = true;
            }
        }
        if !any {
            break (skipped, outcome);
        }
        round += 1;
    };
    if let Some(out) = &args.output {
        written::write(out, args.written, &scratch.0, &args.spec, args.replace, &loaded, &proposals)?;
    }
    let within = outcome.refused as f64 <= share * outcome.judged as f64;
    if !within {
        errln!(
            "warning: replayed with the proposals the logs saw {} of {} requests refused ({}), over --max-refused-share {}%{}",
            thousands(outcome.refused),
            thousands(outcome.judged),
            percent(outcome.refused, outcome.judged),
            args.max_refused_share,
            if outcome.refused > outcome.by_proposals { "; the spec's own bounds refused some of them" } else { "" }
        );
    }

    let place = |p: &Proposal| match p.operation {
        Some(op) => {
            let o = &loaded.policy.operations[op];
            format!("{} {} ({})", o.method, o.template, o.id)
        }
        None => String::from("route (every request)"),
    };
    match args.format {
        Output::Text => {
            outln!(
                "{} requests read ({} skipped); limits are the p{} of callers' busiest {} × {}",
                measurements.records,
                if problems.malformed == 1 {
                    "1 unreadable line".to_string()
                } else {
                    format!("{} unreadable lines", problems.malformed)
                },
                args.percentile,
                suggest::iso_window(settings.window),
                args.headroom
            );
            outln!(
                "replayed with the proposals: {} of {} requests refused ({}), {} --max-refused-share {}%",
                thousands(outcome.refused),
                thousands(outcome.judged),
                percent(outcome.refused, outcome.judged),
                if within { "within" } else { "OVER" },
                args.max_refused_share
            );
            if outcome.refused > outcome.by_proposals {
                outln!("  the spec's own bounds refused {} of them", outcome.refused - outcome.by_proposals);
            }
            let mut most: Vec<(&usize, &Raised)> = raised.iter().collect();
            most.sort_by_key(|(i, r)| (std::cmp::Reverse(r.refused), **i));
            for &(&i, r) in most.iter().take(SHOWN_RAISED) {
                let p = &proposals[i];
                outln!(
                    "  raised {} {}: limit {} -> {}; at {} it refused {} requests from {} callers (the busiest sent {} in {})",
                    place(p),
                    p.name,
                    r.from,
                    p.bound["limit"],
                    r.from,
                    thousands(r.refused),
                    r.callers,
                    p.evidence.max,
                    suggest::iso_window(settings.window),
                );
            }
            if raised.len() > SHOWN_RAISED {
                outln!("  and {} more raised, each marked below", raised.len() - SHOWN_RAISED);
            }
            if !left_out.is_empty() {
                outln!(
                    "  {} operation {} left out to fit --max-counters {} (least traffic first; the route's bounds still count those operations)",
                    left_out.len(),
                    if left_out.len() == 1 { "proposal" } else { "proposals" },
                    options.max_counters
                );
            }
            for (i, p) in proposals.iter().enumerate() {
                let e = &p.evidence;
                let written = if skipped.contains(&i) {
                    " (not written: bounds already there; --replace to replace them)"
                } else {
                    ""
                };
                outln!("\n{}{written}", place(p));
                outln!("  {}", serde_json::to_string(&p.bound).unwrap_or_default());
                if p.bound["algorithm"] == "concurrency" {
                    outln!(
                        "  in flight at arrival: p50 {}, p90 {}, p99 {}, most {} ({} timed requests)",
                        e.p50,
                        e.p90,
                        e.p99,
                        e.max,
                        e.requests
                    );
                } else {
                    outln!(
                        "  {} requests from ~{} callers; busiest {} per caller: p50 {}, p90 {}, p99 {}, most {}; busiest second p{} {}",
                        e.requests,
                        e.callers,
                        suggest::iso_window(settings.window),
                        e.p50,
                        e.p90,
                        e.p99,
                        e.max,
                        args.percentile,
                        e.burst
                    );
                }
                if let Some((requests, callers)) = e.refused {
                    let (requests, callers) =
                        (crate::numbers::counted(requests, "request"), crate::numbers::counted(callers, "caller"));
                    outln!("  on these logs it would have refused {requests} from {callers}");
                }
                if let Some(r) = raised.get(&i) {
                    outln!(
                        "  raised from {}, at which it refused {} requests from {} callers",
                        r.from,
                        r.refused,
                        r.callers
                    );
                }
            }
            for h in &heavy {
                let o = &loaded.policy.operations[h.operation];
                outln!(
                    "\n{} {} ({}): mean {:.1} ms against a typical {:.1} ms: a candidate for `cost` (about {})",
                    o.method,
                    o.template,
                    o.id,
                    h.mean as f64 / 1e6,
                    h.typical as f64 / 1e6,
                    (h.mean / h.typical.max(1)).max(1)
                );
            }
            if proposals.is_empty() {
                outln!("no proposals: no operation had {} requests or more", suggest::MIN_REQUESTS);
            }
            if let Some(out) = &args.output {
                outln!("\nwrote {}", out.display());
            }
        }
        Output::Json => {
            let doc = json!({
                "records": measurements.records,
                "unreadable_lines": problems.malformed,
                "window": suggest::iso_window(settings.window),
                "percentile": args.percentile,
                "headroom": args.headroom,
                "replayed": {
                    "judged": outcome.judged,
                    "refused": outcome.refused,
                    "refused_by_proposals": outcome.by_proposals,
                    "max_refused_share": args.max_refused_share,
                    "within": within,
                },
                "raised": raised.iter().map(|(&i, r)| json!({
                    "where": place(&proposals[i]),
                    "name": proposals[i].name,
                    "from": r.from,
                    "to": proposals[i].bound["limit"],
                    "refused_at_first": r.refused,
                    "callers_refused_at_first": r.callers,
                })).collect::<Vec<Value>>(),
                "left_out": left_out.iter().map(|p| json!({
                    "where": place(p),
                    "bound": p.bound,
                    "requests": p.evidence.requests,
                })).collect::<Vec<Value>>(),
                "proposals": proposals.iter().enumerate().map(|(i, p)| {
                    let e = &p.evidence;
                    json!({
                        "where": place(p),
                        "operation": p.operation.map(|op| loaded.policy.operations[op].id.clone()),
                        "bound": p.bound,
                        "written": !skipped.contains(&i),
                        "evidence": {
                            "requests": e.requests,
                            "callers": e.callers,
                            "sampled": e.sampled,
                            "p50": e.p50, "p90": e.p90, "p99": e.p99, "max": e.max,
                            "burst": e.burst,
                            "refused": e.refused.map(|(r, _)| r),
                            "callers_refused": e.refused.map(|(_, c)| c),
                        },
                    })
                }).collect::<Vec<Value>>(),
                "cost_candidates": heavy.iter().map(|h| json!({
                    "operation": loaded.policy.operations[h.operation].id,
                    "mean_ms": h.mean as f64 / 1e6,
                    "typical_ms": h.typical as f64 / 1e6,
                })).collect::<Vec<Value>>(),
            });
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
    }
    Ok(exit::OK)
}

/// The most replays spent raising proposals that refused too much.
const MAX_ROUNDS: usize = 4;

/// How many raised proposals the summary at the top names (the most refusing first).
const SHOWN_RAISED: usize = 10;

/// What the last replay of the annotated copy refused.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    /// Requests judged (targets `serve` would refuse before any bound left out).
    judged: u64,
    /// Requests refused by any bound.
    refused: u64,
    /// Requests refused by a proposal.
    by_proposals: u64,
}

/// A proposal raised for refusing too much: its first limit, and what it refused at it.
#[derive(Clone, Copy, Debug)]
struct Raised {
    from: u64,
    refused: u64,
    callers: u64,
}

/// `part` of `whole` as a percentage people read: `0.42%`.
fn percent(part: u64, whole: u64) -> String {
    format!("{:.2}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// A file of our own that goes when we are done with it (renamed away first, it stays).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
