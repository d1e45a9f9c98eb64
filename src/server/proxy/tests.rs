use std::io::Write;
use std::sync::Mutex;

use super::*;
use crate::engine::Clock;
use crate::engine::ManualClock;

/// What the log says, a line a string.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().map(|l| l.trim().to_string()).collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_upstream_is_a_line_at_once_then_a_count_a_period() {
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .finish();
    // The test's runtime has one thread, so the reporter's lines land here too.
    let _guard = tracing::subscriber::set_default(subscriber);
    let manual = ManualClock::starting_at(Duration::from_secs(100));
    let clock: Arc<dyn Clock> = Arc::new(manual.clone());
    let failures = UpstreamFailures::default();

    failures.failed("connection refused", crate::server::judge::RequestId(1), &clock);
    assert_eq!(
        log.lines(),
        ["WARN upstream request failed request_id=0000000000000001 error=connection refused suppressed=0"]
    );
    for _ in 0..9 {
        manual.advance(Duration::from_millis(100));
        failures.failed("connection refused", crate::server::judge::RequestId::next(), &clock);
    }
    assert_eq!(log.lines().len(), 1, "within the period: counted, not logged");

    // A period after the first line, the next failure is logged, counting the nine.
    manual.advance(FAILURE_LOG_PERIOD);
    failures.failed("connection reset by peer", crate::server::judge::RequestId(0xab), &clock);
    let second = log.lines();
    assert_eq!(
        second[1..],
        ["WARN upstream request failed request_id=00000000000000ab error=connection reset by peer suppressed=9"]
    );
    let at = manual.now();

    // Three more, then the upstream recovers: a period later the rest is reported, once.
    for _ in 0..3 {
        manual.advance(Duration::from_millis(10));
        failures.failed("connection reset by peer", crate::server::judge::RequestId::next(), &clock);
    }
    assert_eq!(log.lines().len(), 2);
    manual.set(Duration::from_nanos(at) + FAILURE_LOG_PERIOD);
    tokio::time::sleep(FAILURE_LOG_PERIOD).await;
    let lines = log.lines();
    assert_eq!(lines[2..], ["WARN upstream requests failed, not logged one by one since the last line suppressed=3"]);
    manual.advance(FAILURE_LOG_PERIOD * 2);
    tokio::time::sleep(FAILURE_LOG_PERIOD * 2).await;
    assert_eq!(log.lines().len(), 3, "nothing more to say");
}
