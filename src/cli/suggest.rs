//! `opbound suggest SPEC LOG...`: bounds proposed from recorded traffic, with their evidence,
//! written as `x-rate-limit` into a copy of the spec.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{Failure, SpecOptions, exit};
use crate::replay::logs::{self, Logs};
use crate::replay::suggest::{self, Measurements, Proposal};
use crate::replay::{Lane, run as replay_all};

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 proposals made (or none the traffic supports), 1 the spec is invalid, 2 a \
                  spec or log cannot be read, or a usage error. Existing bounds are left alone unless --replace. \
                  Each proposal's evidence includes what it would have refused on these logs, found by replaying \
                  the annotated spec with every bound enforced.")]
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
    /// Replace bounds already written where a proposal goes.
    #[arg(long)]
    replace: bool,
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
    let options = args.options.options(false);
    let loaded = super::report(crate::load(&args.spec, &options), "fix it to suggest bounds")?;
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

    let mut tree = loaded.source.parse().map_err(|f| Failure::invalid(f.to_string()))?;
    let skipped = suggest::annotate(&mut tree, &loaded.policy, &proposals, args.replace);
    let text = crate::publish::render(&tree, loaded.source.format);
    // The annotated copy is replayed for the evidence: from where it is written, or a file
    // of our own that goes when we are done.
    let (path, scratch) = match &args.output {
        Some(path) => (path.clone(), false),
        None => {
            let ext = args.spec.extension().and_then(|e| e.to_str()).unwrap_or("yaml");
            (std::env::temp_dir().join(format!("opbound-suggest-{}.{ext}", std::process::id())), true)
        }
    };
    std::fs::write(&path, &text).map_err(|e| Failure::unreadable(format!("cannot write {}: {e}", path.display())))?;
    let annotated = crate::load(&path, &options);
    if scratch {
        let _ = std::fs::remove_file(&path);
    }
    let annotated = super::report(annotated, "the proposals did not compile; please report this")?;
    let mut lanes = vec![Lane::new(
        annotated.policy,
        crate::replay::run::Settings { enforce: true, escaped_slashes: args.reading.escaped_slashes },
        false,
        &problems.lacks,
    )];
    let mut again = Logs::open(&args.logs, log_options()).map_err(unreadable)?;
    replay_all(&mut lanes, &mut again).map_err(unreadable)?;
    let limiter = lanes[0].replayer.limiter();
    let replayed = limiter.policy();
    for (i, p) in proposals.iter_mut().enumerate() {
        if skipped.contains(&i) {
            continue;
        }
        let id = match p.operation {
            Some(op) => format!("{}:{}", loaded.policy.operations[op].id, p.name),
            None => format!("route:{}", p.name),
        };
        if let Some(b) = replayed.bounds.iter().position(|b| b.id == id) {
            let t = &lanes[0].tally.bounds[b];
            let callers = if t.refused == 0 { 0 } else { t.callers.estimate() };
            p.evidence.refused = Some((t.refused, callers));
        }
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
