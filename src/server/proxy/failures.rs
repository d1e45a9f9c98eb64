//! Failed upstream requests, logged so that an upstream that is down does not bury the log.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Clock;
use crate::throttle::{self, Throttle};

/// The shortest time between two lines about failed upstream requests: an upstream that is down
/// fails every request, and a warning each would bury the log.
pub(super) const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(5);

/// Upstream requests that failed (no answer, not a timeout): the first is logged at once with its
/// cause, then at most one line every `FAILURE_LOG_PERIOD`, each with how many failed unlogged
/// since the last; once the failures stop, one line with those left.
pub(super) struct UpstreamFailures(Arc<Throttle>);

impl Default for UpstreamFailures {
    fn default() -> UpstreamFailures {
        UpstreamFailures(Arc::new(Throttle::new(FAILURE_LOG_PERIOD)))
    }
}

impl UpstreamFailures {
    /// A request the upstream did not answer, for `cause`, at the time `clock` reads: every one
    /// at DEBUG, the first of each period at WARN, each with the id its client was given.
    pub(super) fn failed(&self, cause: &str, id: crate::server::judge::RequestId, clock: &Arc<dyn Clock>) {
        tracing::debug!(request_id = %id, error = %cause, "upstream request failed");
        let Some(line) = self.0.occurred(|| clock.now()) else { return };
        tracing::warn!(request_id = %id, error = %cause, suppressed = line.suppressed, "upstream request failed");
        // Outside a runtime (a unit test) there is no one to report the rest; the next line will.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let clock = clock.clone();
            runtime.spawn(throttle::report_rest(
                self.0.clone(),
                move || clock.now(),
                line,
                |line| {
                    tracing::warn!(
                        suppressed = line.suppressed,
                        "upstream requests failed, not logged one by one since the last line"
                    );
                },
            ));
        }
    }
}
