//! Quota counts across restarts of the real binary: a graceful stop keeps them exactly, a hard
//! kill loses at most what came within one sync interval and never adds any, and a state file
//! that is damaged or held by another opbound stops the start with its name.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::{Opbound, TempSpec, Upstream, get_with};

const SPEC: &str = r#"
openapi: 3.0.3
info: {title: quota state, version: '1'}
paths:
  /convert:
    get:
      operationId: convert
      x-rate-limit:
        - {algorithm: quota, per: 'header:x-org', limit: 10, period: P1M}
"#;

fn state_dir(spec: &TempSpec) -> PathBuf {
    spec.dir().join("state")
}

fn serve(spec: &TempSpec, up: &Upstream, sync: &str) -> Opbound {
    let dir = state_dir(spec);
    Opbound::start(&[
        "serve",
        "--spec",
        spec.arg(),
        "--upstream",
        &up.url(),
        "--state-dir",
        dir.to_str().unwrap(),
        "--state-sync",
        sync,
    ])
}

/// `RateLimit-Remaining` after one request of org `org`.
async fn remaining_after_one(o: &Opbound, org: &str) -> u32 {
    let got = get_with(&o.url("/convert"), &[("x-org", org)]).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    got.header("ratelimit-remaining").unwrap().parse().unwrap()
}

fn stop(mut o: Opbound) {
    o.stop_and_read_log();
    let deadline = Instant::now() + Duration::from_secs(10);
    while o.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "opbound did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(o.logged_at_least("durable state written", 1).len(), 1, "{:?}", o.stderr.lock().unwrap());
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_keeps_every_count() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-sigterm", SPEC);
    // An hour between syncs: only the write on the way out can keep these.
    let first = serve(&spec, &up, "1h");
    for left in [9, 8, 7, 6] {
        assert_eq!(remaining_after_one(&first, "acme").await, left);
    }
    stop(first);
    let second = serve(&spec, &up, "1h");
    assert_eq!(remaining_after_one(&second, "acme").await, 5, "four were admitted before the restart");
    assert_eq!(remaining_after_one(&second, "globex").await, 9, "another org's count is its own");
    stop(second);
    let third = serve(&spec, &up, "1h");
    assert_eq!(remaining_after_one(&third, "acme").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_kill_loses_at_most_one_interval_and_never_adds() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-sigkill", SPEC);
    let file = state_dir(&spec).join("quotas.redb");
    let mut first = serve(&spec, &up, "100ms");
    let before = modified(&file);
    for _ in 0..3 {
        remaining_after_one(&first, "acme").await;
    }
    // Wait for the write behind (the file changes), not for any window.
    let deadline = Instant::now() + Duration::from_secs(10);
    while modified(&file) == before {
        assert!(Instant::now() < deadline, "no write behind within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two more, and a kill straight after: they may or may not have been written.
    remaining_after_one(&first, "acme").await;
    remaining_after_one(&first, "acme").await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let second = serve(&spec, &up, "100ms");
    let left = remaining_after_one(&second, "acme").await;
    assert!(left == 6 || left == 4, "3 synced (and 2 maybe) of 5 admitted, then this one: {left} left");
}

fn start_and_fail(spec: &TempSpec, dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(["serve", "--spec", spec.arg(), "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"])
        .args(["--state-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_state_file_stops_the_start_and_names_the_file() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-corrupt", SPEC);
    let first = serve(&spec, &up, "1h");
    remaining_after_one(&first, "acme").await;
    stop(first);
    let file = state_dir(&spec).join("quotas.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let len = bytes.len();
    bytes.truncate(len / 3);
    std::fs::write(&file, &bytes).unwrap();
    let (code, stderr) = start_and_fail(&spec, &state_dir(&spec));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(file.to_str().unwrap()), "the file is named: {stderr}");
    assert!(stderr.contains("--state-start-over"), "the way out is named: {stderr}");
    assert_eq!(std::fs::metadata(&file).unwrap().len() as usize, len / 3, "nothing was reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_opbound_on_the_same_state_refuses_to_start() {
    let up = Upstream::start().await;
    let spec = TempSpec::new("quota-locked", SPEC);
    let first = serve(&spec, &up, "1h");
    let (code, stderr) = start_and_fail(&spec, &state_dir(&spec));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("quotas.lock") || stderr.contains("quotas.redb"), "{stderr}");
    assert!(stderr.contains(&first.child.id().to_string()), "the holder's pid is named: {stderr}");
    // The first one still counts.
    assert_eq!(remaining_after_one(&first, "acme").await, 9);
}

/// Regression: a quota brought by a reload, to an opbound started without one, never opened the
/// state directory, so its consumption silently did not survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_brought_by_a_reload_keeps_its_count_across_a_restart() {
    let up = Upstream::start().await;
    let without = SPEC.replace(
        "{algorithm: quota, per: 'header:x-org', limit: 10, period: P1M}",
        "{per: 'header:x-org', limit: 100, window: PT1M}",
    );
    let spec = TempSpec::new("quota-reloaded", &without);
    let first = serve(&spec, &up, "1h");
    assert!(!state_dir(&spec).join("quotas.redb").exists(), "no quota, no state file");
    let tmp = spec.dir().join(".spec.yaml.tmp");
    std::fs::write(&tmp, SPEC).unwrap();
    std::fs::rename(&tmp, &spec.path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while first.logged("reloaded:").is_empty() {
        assert!(Instant::now() < deadline, "no reload: {:?}", first.stderr.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for left in [9, 8, 7] {
        assert_eq!(remaining_after_one(&first, "acme").await, left);
    }
    stop(first);
    let second = serve(&spec, &up, "1h");
    assert_eq!(remaining_after_one(&second, "acme").await, 6, "three were admitted before the restart");
}

/// A reload bringing the first quota when the state directory cannot be opened (another opbound
/// holds it) is refused, and the old policy keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_quota_whose_state_is_locked_is_refused_and_the_old_policy_serves() {
    let up = Upstream::start().await;
    let holder_spec = TempSpec::new("quota-holder", SPEC);
    let holder = serve(&holder_spec, &up, "1h");
    let without = SPEC.replace(
        "{algorithm: quota, per: 'header:x-org', limit: 10, period: P1M}",
        "{per: 'header:x-org', limit: 100, window: PT1M}",
    );
    let spec = TempSpec::new("quota-reload-locked", &without);
    let dir = state_dir(&holder_spec);
    let o =
        Opbound::start(&["serve", "--spec", spec.arg(), "--upstream", &up.url(), "--state-dir", dir.to_str().unwrap()]);
    let tmp = spec.dir().join(".spec.yaml.tmp");
    std::fs::write(&tmp, SPEC).unwrap();
    std::fs::rename(&tmp, &spec.path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while o.logged("reload refused").is_empty() {
        assert!(Instant::now() < deadline, "no refusal: {:?}", o.stderr.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(o.logged("reload refused")[0].contains("quotas."), "the state file or lock is named");
    assert_eq!(remaining_after_one(&o, "acme").await, 99, "the rate bound still serves");
    assert_eq!(remaining_after_one(&holder, "acme").await, 9);
}
