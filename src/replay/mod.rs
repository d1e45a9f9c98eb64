//! Recorded traffic through a spec's bounds (`opbound replay`) and bounds proposed from it
//! (`opbound suggest`).

pub mod logs;
mod measure;
pub(crate) mod peaks;
mod record;
pub(crate) mod report;
pub mod run;
pub(crate) mod sketch;
pub mod suggest;
pub(crate) mod tally;

pub use record::{Record, Source};

use crate::policy::Policy;
use logs::LogError;
use run::{Replayer, Settings};
use tally::Tally;

/// One policy replaying a log: its replayer and what it counted.
pub struct Lane {
    /// The judge.
    pub replayer: Replayer,
    /// The counts.
    pub tally: Tally,
}

impl Lane {
    /// A lane for `policy`, replaying logs that lack `lacks`.
    pub fn new(policy: Policy, settings: Settings, show_keys: bool, lacks: &[String]) -> Lane {
        let tally = Tally::new(&policy, show_keys);
        Lane { replayer: Replayer::new(policy, settings, lacks), tally }
    }

    /// Judges and counts one record.
    pub async fn feed(&mut self, record: &Record) {
        let replayed = self.replayer.replay(record).await;
        let at = self.replayer.now();
        let limiter = self.replayer.limiter();
        self.tally.count(limiter.policy(), record, &replayed, at);
    }
}

/// Runs every record through every lane (one for a replay, two for `--diff`), in log order.
/// A log that stops being readable ends the run with its error.
pub fn run(lanes: &mut [Lane], records: impl Iterator<Item = Result<Record, LogError>>) -> Result<(), LogError> {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    runtime.block_on(async {
        for record in records {
            let record = record?;
            for lane in lanes.iter_mut() {
                lane.feed(&record).await;
            }
        }
        for lane in lanes.iter_mut() {
            lane.replayer.finish();
        }
        Ok(())
    })
}
