//! Refusal lines, at most one a second per bound. Under a flood a bound writes one line a second
//! saying how many refusals it did not log one by one, instead of a line per request.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Clock;
use crate::throttle::{Line, Throttle};

/// The shortest time between two lines of one bound.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// The log target of refusal lines.
pub(crate) const TARGET: &str = "opbound::refusal";

/// When one bound may write its next refusal line, and how many of its refusals no line has
/// reported yet.
pub(crate) fn throttle() -> Throttle {
    Throttle::new(PERIOD)
}

/// A refusal of the bound `throttle` belongs to, on the limiter's clock. `Some`: log it, with
/// the refusals since the last line that went unlogged. `None`: counted for the next line.
pub(crate) fn refusal(throttle: &Throttle, clock: &dyn Clock) -> Option<Line> {
    throttle.occurred(|| clock.now())
}

/// Logs what `bound` refused after `line` once nothing else will: a `PERIOD` after each line it
/// writes, until a period passes with nothing to report or a refusal's own line takes over.
pub(crate) async fn report_rest(throttle: Arc<Throttle>, clock: Arc<dyn Clock>, bound: String, line: Line) {
    crate::throttle::report_rest(throttle, move || clock.now(), line, |line| {
        tracing::info!(target: TARGET, bound, suppressed = line.suppressed, "refusals not logged one by one since the bound's last line");
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ManualClock;

    #[test]
    fn one_line_a_second_per_bound() {
        let clock = ManualClock::starting_at(Duration::from_secs(100));
        let t = throttle();
        let start = clock.now();
        assert_eq!(refusal(&t, &clock), Some(Line { suppressed: 0, at: start }), "the first refusal is logged");
        clock.advance(Duration::from_millis(999));
        assert_eq!(refusal(&t, &clock), None, "within the second: counted, not logged");
        clock.advance(Duration::from_millis(1));
        assert_eq!(refusal(&t, &clock), Some(Line { suppressed: 1, at: start + 1_000_000_000 }));
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_a_flood_is_reported_after_it_stops() {
        let clock = ManualClock::starting_at(Duration::from_secs(10));
        let t = Arc::new(throttle());
        let line = refusal(&t, &clock).unwrap();
        let rest = tokio::spawn(report_rest(t.clone(), Arc::new(clock.clone()), "b".into(), line));
        for _ in 0..7 {
            clock.advance(Duration::from_millis(1));
            assert_eq!(refusal(&t, &clock), None);
        }
        // The flood stops. Once the second is over, the reporter takes the seven, then finds
        // nothing more and ends.
        clock.set(Duration::from_nanos(line.at) + PERIOD);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(t.unreported(), 0, "reported");
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(3), rest).await.expect("the reporter ends").unwrap();
    }
}
