//! `opbound replay SPEC LOG...`: what the spec's bounds would have done to recorded traffic.

use std::path::PathBuf;

use super::exit;
use super::failure::Failure;
use super::specs::{SpecOptions, report};
use crate::replay::logs::{self, Logs, Mapping};
use crate::replay::report::{self, Replay};
use crate::replay::run::{Settings, notes};
use crate::replay::{Lane, run as replay_all};
use crate::router::canonical::EscapedSlashes;

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 replayed, 1 a spec is invalid (its findings are printed), 2 a spec or log \
                  cannot be read, or a usage error. Lines a log format cannot read are skipped, counted and reported \
                  with their line numbers; they never stop the replay.")]
pub(super) struct Args {
    /// The spec whose bounds are replayed.
    #[arg(value_name = "SPEC")]
    spec: PathBuf,
    /// Access logs (plain or gzip), merged by time: nginx combined, nginx/Caddy/Envoy JSON, or
    /// opbound's own request log.
    #[arg(value_name = "LOG", required = true)]
    logs: Vec<PathBuf>,
    #[command(flatten)]
    reading: Reading,
    /// Replay shadow bounds as if enforced: what turning them on would have done.
    #[arg(long)]
    enforce: bool,
    /// Compare with this spec on the same traffic: which operations it refuses more or less.
    #[arg(long, value_name = "OLD_SPEC")]
    diff: Option<PathBuf>,
    /// Show refused callers by the value the log holds (an address, a user, a hashed key)
    /// instead of the replay's own hash of it.
    #[arg(long)]
    show_keys: bool,
    /// `text`: tables; `json`: one JSON document.
    #[arg(long, value_enum, default_value_t = Output::Text, value_name = "FORMAT")]
    format: Output,
    #[command(flatten)]
    options: SpecOptions,
}

/// How logs are read and their requests' paths: the flags `replay` and `suggest` share.
#[derive(clap::Args)]
pub(super) struct Reading {
    /// The logs' format; `auto` detects each file's from its first lines.
    #[arg(long, value_enum, default_value_t = logs::Format::Auto, value_name = "FORMAT")]
    log_format: logs::Format,
    /// Where a fact comes from in the log: user=, org=, roles=, token=, address=, header:NAME= or
    /// cookie:NAME= followed by a field name (a JSON key, dotted for nested ones, or a name=value
    /// field of a combined line). Repeatable.
    #[arg(long = "field", value_name = "FACT=FIELD", value_parser = Mapping::parse)]
    fields: Vec<(String, String)>,
    /// How far out of order log lines may come and still be read in order.
    #[arg(long, default_value = "5s", value_parser = super::flags::parse_duration, value_name = "DURATION")]
    reorder: std::time::Duration,
    /// What an escaped slash in a path gets, as `serve --escaped-slashes` says.
    #[arg(long, default_value = "reject", value_name = "ACTION")]
    pub(super) escaped_slashes: EscapedSlashes,
}

impl Reading {
    /// The logs' reading options.
    pub(super) fn options(&self) -> logs::Options {
        logs::Options {
            format: self.log_format,
            mapping: Mapping { fields: self.fields.clone() },
            reorder: self.reorder,
        }
    }
}

/// What `--format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let options = args.options.options(false)?;
    let new = report(crate::load(&args.spec, &options), "fix it to replay")?;
    let old = match &args.diff {
        Some(path) => Some(report(crate::load(path, &options), "fix it to compare")?),
        None => None,
    };
    let settings = Settings { enforce: args.enforce, escaped_slashes: args.reading.escaped_slashes };
    let log_options = args.reading.options();
    let unreadable = |e: logs::LogError| Failure::unreadable(e.to_string());
    let mut logs = Logs::open(&args.logs, log_options).map_err(unreadable)?;
    // The first record settles each file's format, and so what the logs lack, which decides
    // which bounds replay can count.
    let first = logs.next().transpose().map_err(unreadable)?;
    let lacks = logs.problems().lacks.clone();
    let notes = notes(&new.policy, &lacks);
    let mut lanes = vec![Lane::new(new.policy, settings, args.show_keys, &lacks)];
    if let Some(old) = old {
        lanes.push(Lane::new(old.policy, settings, args.show_keys, &lacks));
    }
    replay_all(&mut lanes, first.map(Ok).into_iter().chain(&mut logs)).map_err(unreadable)?;
    let problems = logs.problems().clone();
    let limiters: Vec<_> = lanes.iter().map(|l| l.replayer.limiter()).collect();
    let replays: Vec<Replay<'_>> =
        lanes.iter().zip(&limiters).map(|(l, limiter)| Replay { policy: limiter.policy(), tally: &l.tally }).collect();
    let changes = replays.get(1).map(|old| report::changes(old, &replays[0]));
    match args.format {
        Output::Text => {
            outln!("{}", report::text(&replays[0], &problems, &notes).trim_end());
            if let Some(changes) = &changes {
                outln!();
                outln!("{}", report::diff_text(changes).trim_end());
            }
        }
        Output::Json => {
            let mut doc = report::json(&replays[0], &problems, &notes);
            if let Some(changes) = &changes {
                doc["diff"] = report::diff_json(changes);
            }
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
    }
    Ok(exit::OK)
}
