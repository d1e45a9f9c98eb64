//! Records put in time order: a bounded reorder buffer per log, then a merge of the logs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::problems::{LogError, Problems};
use crate::engine::clock::Nanos;
use crate::replay::{Record, Source};

/// A stream of records that reports what it runs into.
pub(super) trait Records {
    /// The next record, an error that ends this stream, or `None` at its end.
    fn pull(&mut self, problems: &mut Problems) -> Option<Result<Record, LogError>>;
}

/// A record keyed for ordering: by time, then where it was read, so ties come out the same way
/// on every run. Boxed: a heap moves its entries log(n) times a push and a pop, and a record is
/// a few hundred bytes, which would be moved whole each time.
struct Keyed(Box<Record>);

impl Keyed {
    fn key(&self) -> (Nanos, Source) {
        (self.0.time, self.0.source)
    }
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Keyed) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Keyed {}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Keyed) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed {
    fn cmp(&self, other: &Keyed) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// One log's records in time order, where its lines were at most `window` out of order.
///
/// A record waits until a record more than `window` newer has been read (or the log ends, or
/// `cap` records wait). A record older than one already given out is late: it is counted and
/// given out at that time, since the replay clock never runs backwards.
pub(super) struct Reorder<R> {
    input: R,
    waiting: BinaryHeap<Reverse<Keyed>>,
    window: Nanos,
    cap: usize,
    newest: Nanos,
    last: Option<Nanos>,
    ended: bool,
}

impl<R: Records> Reorder<R> {
    pub(super) fn new(input: R, window: Nanos, cap: usize) -> Reorder<R> {
        Reorder { input, waiting: BinaryHeap::new(), window, cap: cap.max(1), newest: 0, last: None, ended: false }
    }

    fn ready(&self) -> bool {
        self.waiting.peek().is_some_and(|Reverse(earliest)| {
            self.ended || self.waiting.len() > self.cap || self.newest - earliest.0.time > self.window
        })
    }
}

impl<R: Records> Records for Reorder<R> {
    fn pull(&mut self, problems: &mut Problems) -> Option<Result<Record, LogError>> {
        while !self.ready() {
            if self.ended {
                return None;
            }
            match self.input.pull(problems) {
                None => self.ended = true,
                Some(Err(error)) => return Some(Err(error)),
                Some(Ok(mut record)) => {
                    if let Some(last) = self.last.filter(|&last| record.time < last) {
                        problems.late += 1;
                        record.time = last;
                    }
                    self.newest = self.newest.max(record.time);
                    self.waiting.push(Reverse(Keyed(Box::new(record))));
                }
            }
        }
        let Reverse(Keyed(record)) = self.waiting.pop()?;
        self.last = Some(record.time);
        Some(Ok(*record))
    }
}

/// Several time-ordered streams as one, by time then source: N instances' logs, or a log and
/// its rotated predecessors, replay as one timeline.
pub(super) struct Merge<R> {
    inputs: Vec<R>,
    /// Each input's next record, with the input's index.
    heads: BinaryHeap<Reverse<(Keyed, usize)>>,
    /// Inputs whose next record is not among the heads yet.
    unread: Vec<usize>,
}

impl<R: Records> Merge<R> {
    pub(super) fn new(inputs: Vec<R>) -> Merge<R> {
        let unread = (0..inputs.len()).rev().collect();
        Merge { inputs, heads: BinaryHeap::new(), unread }
    }
}

impl<R: Records> Records for Merge<R> {
    fn pull(&mut self, problems: &mut Problems) -> Option<Result<Record, LogError>> {
        // Every input's head must be known before the earliest can be given out.
        while let Some(index) = self.unread.pop() {
            match self.inputs[index].pull(problems) {
                Some(Ok(record)) => self.heads.push(Reverse((Keyed(Box::new(record)), index))),
                Some(Err(error)) => return Some(Err(error)),
                None => {}
            }
        }
        let Reverse((Keyed(record), index)) = self.heads.pop()?;
        self.unread.push(index);
        Some(Ok(*record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::SECOND;

    /// Records given in a fixed order, as a log would.
    struct Given(std::vec::IntoIter<Record>);

    impl Records for Given {
        fn pull(&mut self, _: &mut Problems) -> Option<Result<Record, LogError>> {
            self.0.next().map(Ok)
        }
    }

    /// One file's records at these times (in seconds), on lines 1, 2, ...
    fn given(file: usize, seconds: &[f64]) -> Given {
        let records = seconds.iter().zip(1..).map(|(&at, line)| Record {
            source: Source { file, line },
            time: (at * SECOND as f64) as Nanos,
            ..Record::default()
        });
        Given(records.collect::<Vec<_>>().into_iter())
    }

    fn drain(mut records: impl Records) -> (Vec<(Nanos, usize, u64)>, Problems) {
        let mut problems = Problems::default();
        let mut out = Vec::new();
        while let Some(record) = records.pull(&mut problems) {
            let record = record.unwrap();
            out.push((record.time / (SECOND / 10), record.source.file, record.source.line));
        }
        (out, problems)
    }

    #[test]
    fn lines_shuffled_within_the_window_come_out_in_order() {
        let (out, problems) = drain(Reorder::new(given(0, &[3.0, 1.0, 2.0, 1.0, 7.0, 5.0, 9.0, 8.0]), 5 * SECOND, 100));
        assert_eq!(
            out,
            [(10, 0, 2), (10, 0, 4), (20, 0, 3), (30, 0, 1), (50, 0, 6), (70, 0, 5), (80, 0, 8), (90, 0, 7)]
        );
        assert_eq!(problems.late, 0);
    }

    #[test]
    fn a_line_beyond_the_window_is_late_and_clamped() {
        // 1.0 is given out when 6.5 arrives; 0.5 comes after, more than the window behind.
        let (out, problems) = drain(Reorder::new(given(0, &[1.0, 6.5, 0.5, 7.0]), 5 * SECOND, 100));
        assert_eq!(out, [(10, 0, 1), (10, 0, 3), (65, 0, 2), (70, 0, 4)]);
        assert_eq!(problems.late, 1);
    }

    #[test]
    fn the_cap_bounds_what_waits() {
        // With room for two, the third record forces the earliest out though the window is wide.
        let (out, problems) = drain(Reorder::new(given(0, &[5.0, 4.0, 3.0, 2.0]), 60 * SECOND, 2));
        // Line 4 (2.0) then comes after 3.0 went out: late, and raised to 3.0.
        assert_eq!(out, [(30, 0, 3), (30, 0, 4), (40, 0, 2), (50, 0, 1)]);
        assert_eq!(problems.late, 1);
    }

    #[test]
    fn files_merge_by_time_then_source() {
        let a = Reorder::new(given(0, &[1.0, 2.0, 4.0, 4.0]), SECOND, 100);
        let b = Reorder::new(given(1, &[0.5, 2.0, 3.0]), SECOND, 100);
        let c = Reorder::new(given(2, &[]), SECOND, 100);
        let (out, _) = drain(Merge::new(vec![a, b, c]));
        assert_eq!(out, [(5, 1, 1), (10, 0, 1), (20, 0, 2), (20, 1, 2), (30, 1, 3), (40, 0, 3), (40, 0, 4)]);
    }
}
