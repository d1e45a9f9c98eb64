//! The journal and `count-when` bounds: what a sliding window or a token bucket is written as,
//! when its entry expires, and pending reservations counted on the safe side.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::engine::{Clock, Decision, KeyHasher, ManualClock, Stage};
use crate::request::Given;

const FAILED: &str = "{per: address, limit: 5, window: PT15M, count-when: [401, 403]}";
const BUCKET: &str = "{per: address, algorithm: token-bucket, limit: 4, window: PT1M, count-when: [401]}";

/// A state directory removed when the test ends.
struct Dir(std::path::PathBuf, Option<StateStore>);

impl Dir {
    fn open(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("opbound-journal-{name}-{}", std::process::id()));
        let state = StateStore::open(&dir, true).unwrap();
        Dir(dir, Some(state))
    }

    fn state(&self) -> &StateStore {
        self.1.as_ref().unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        drop(self.1.take());
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn limiter(bound: &str, clock: &ManualClock, state: &StateStore) -> Limiter {
    let yaml = format!("openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\nx-rate-limit: {bound}\npaths: {{}}\n");
    let source = crate::spec::Source::from_text(std::path::Path::new("c.yaml"), yaml);
    let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
    Limiter::new(policy, Arc::new(clock.clone()), KeyHasher::with_secret(state.secret()))
}

fn attempt(l: &Limiter) -> Decision {
    let facts = Given { address: std::net::IpAddr::from([192, 0, 2, 1]), headers: vec![], query: None };
    l.decide(&l.plan(None, &facts, None, Stage::All))
}

fn answered(mut d: Decision, status: u16) {
    assert!(d.allowed());
    std::mem::take(&mut d.reservations).settle(status, |_| None, false);
}

/// The bound's one stored entry now, if any.
fn stored(state: &StateStore, l: &Limiter, now: Nanos) -> Option<Entry> {
    let name = table_name(&l.policy().bounds[0]).unwrap();
    let entries = state.load(&name, now).unwrap();
    assert!(entries.len() <= 1, "{entries:?}");
    entries.first().map(|(_, e)| *e)
}

fn start() -> ManualClock {
    ManualClock::starting_at(Duration::from_secs(1_790_000_000))
}

#[test]
fn a_sliding_window_entry_expires_when_its_two_windows_are_over() {
    let dir = Dir::open("sliding");
    let clock = start();
    let l = limiter(FAILED, &clock, dir.state());
    answered(attempt(&l), 401);
    answered(attempt(&l), 200);
    sync(dir.state(), &l, clock.now()).unwrap();
    let window = 15 * 60 * 1_000_000_000;
    let e = stored(dir.state(), &l, clock.now()).expect("a failure is written");
    assert_eq!((e.c, e.expires), (1, (clock.now() / window + 2) * window), "the success is not counted");
    // A restart within the window finds it; after the next window it is over and pruned.
    assert_eq!(restore(dir.state(), &limiter(FAILED, &clock, dir.state()), clock.now()).unwrap(), 1);
    clock.set(Duration::from_nanos(e.expires));
    assert_eq!(stored(dir.state(), &l, clock.now()), None);
    assert!(dir.state().write(&[], clock.now()).unwrap().pruned >= 1, "pruned: the file stays bounded");
    assert_eq!(restore(dir.state(), &limiter(FAILED, &clock, dir.state()), clock.now()).unwrap(), 0);
}

#[test]
fn a_token_bucket_entry_expires_when_the_bucket_is_full_again() {
    let dir = Dir::open("bucket");
    let clock = start();
    let l = limiter(BUCKET, &clock, dir.state());
    let t0 = clock.now();
    for _ in 0..2 {
        answered(attempt(&l), 401);
    }
    sync(dir.state(), &l, t0).unwrap();
    // Two tokens at one per 15 s: full again 30 s from now.
    let e = stored(dir.state(), &l, t0).expect("written");
    assert_eq!(e.expires, t0 + 30_000_000_000);
    clock.advance(Duration::from_secs(29));
    assert!(stored(dir.state(), &l, clock.now()).is_some());
    clock.advance(Duration::from_secs(1));
    assert_eq!(stored(dir.state(), &l, clock.now()), None, "full again: nothing to keep");
}

#[test]
fn pending_reservations_are_written_counted_and_a_release_takes_them_back() {
    let dir = Dir::open("pending");
    let clock = start();
    let l = limiter(FAILED, &clock, dir.state());
    let held: Vec<Decision> = (0..3).map(|_| attempt(&l)).collect();
    sync(dir.state(), &l, clock.now()).unwrap();
    assert_eq!(stored(dir.state(), &l, clock.now()).map(|e| e.c), Some(3), "a hard kill now counts them");
    // A restart from this file refuses the third attempt after two more: the safe side.
    let after_kill = limiter(FAILED, &clock, dir.state());
    restore(dir.state(), &after_kill, clock.now()).unwrap();
    answered(attempt(&after_kill), 401);
    answered(attempt(&after_kill), 401);
    assert!(!attempt(&after_kill).allowed());
    // In the first process the responses come: all successes, so nothing stays counted.
    for d in held {
        answered(d, 200);
    }
    sync(dir.state(), &l, clock.now()).unwrap();
    assert_eq!(stored(dir.state(), &l, clock.now()), None, "released: the entry is removed");
}

#[test]
fn a_count_when_table_is_named_by_what_gives_its_count_meaning() {
    let dir = Dir::open("names");
    let clock = start();
    let name = |bound: &str| table_name(&limiter(bound, &clock, dir.state()).policy().bounds[0]);
    let failed = name(FAILED).unwrap();
    assert!(failed.contains("window=PT15M") && failed.contains("count-when=401, 403"), "{failed}");
    assert_eq!(name(&FAILED.replace("limit: 5", "limit: 3")).unwrap(), failed, "a new limit counts the same");
    assert_ne!(name(&FAILED.replace("PT15M", "PT1H")).unwrap(), failed);
    assert_ne!(name(&FAILED.replace("[401, 403]", "[401]")).unwrap(), failed);
    let bucket = name(BUCKET).unwrap();
    assert_ne!(name(&BUCKET.replace("limit: 4", "limit: 8")).unwrap(), bucket, "a bucket's time means tokens");
    assert_eq!(name("{per: address, limit: 5, window: PT15M}"), None, "a plain rate bound is not durable");
}
