//! The state store against real files: round trips, periods ending, locks held by another
//! process, damaged files, and a writer killed with SIGKILL mid-transaction. Over 400 lines: each
//! failure mode needs its own real file and, for locks and kills, a second process.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const BOUND: &str = "op:createConversion:0|per=org|period=P1M|reset=calendar|tz=Europe/Berlin";
const OTHER: &str = "op:exportReport:0|per=org|period=P1D|reset=calendar|tz=UTC";

/// A directory under the system's temporary directory, unique to this test and process, removed
/// when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("opbound-durable-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("quotas.redb")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Opens the state in `dir` as the tests do, again after a close. A lock this process let go of
/// can still be held for an instant by a child another test is starting: between its fork and
/// its exec, the child shares the lock file's description, and `flock` belongs to that. Such a
/// refusal naming this process is waited out; any other outcome is returned as it is.
fn open(dir: &Path, start_over: bool) -> Result<StateStore, StateError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match StateStore::open(dir, start_over) {
            Err(StateError::Locked { holder: Some(pid), .. })
                if pid == std::process::id() && std::time::Instant::now() < deadline =>
            {
                std::thread::yield_now();
            }
            other => return other,
        }
    }
}

fn entry(a: u64, expires: u64) -> Entry {
    Entry { a, b: a as u32 + 1, c: a as u32 + 2, expires }
}

fn sorted(mut entries: Vec<(Key, Entry)>) -> Vec<(Key, Entry)> {
    entries.sort_by_key(|(key, _)| *key);
    entries
}

fn count(store: &StateStore, table: &str) -> u64 {
    store.tables().unwrap().into_iter().find(|t| t.name == table).map_or(0, |t| t.entries)
}

#[test]
fn round_trip_with_the_overflow_counter_apart() {
    let dir = TempDir::new("round-trip");
    let store = open(&dir.0, false).unwrap();
    let stats = store
        .write(
            &[
                Change::put(BOUND, Key::Caller(7), entry(1, 500)),
                Change::put(BOUND, Key::Overflow, entry(2, 500)),
                Change::put(BOUND, Key::Caller(0), entry(3, 500)),
                Change::put(OTHER, Key::Caller(7), entry(4, 900)),
            ],
            100,
        )
        .unwrap();
    assert_eq!((stats.written, stats.removed, stats.pruned, stats.committed), (4, 0, 0, true));
    assert!(stats.file_bytes > 0);
    assert_eq!(
        sorted(store.load(BOUND, 100).unwrap()),
        vec![(Key::Caller(0), entry(3, 500)), (Key::Caller(7), entry(1, 500)), (Key::Overflow, entry(2, 500)),]
    );
    assert_eq!(store.load(OTHER, 100).unwrap(), vec![(Key::Caller(7), entry(4, 900))]);
    assert_eq!(store.load("never-written", 100).unwrap(), vec![]);
    let mut tables = store.tables().unwrap();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        tables,
        vec![TableInfo { name: BOUND.to_string(), entries: 3 }, TableInfo { name: OTHER.to_string(), entries: 1 }]
    );
}

#[test]
fn the_last_change_to_a_key_wins_and_writing_it_again_changes_nothing() {
    let dir = TempDir::new("last-wins");
    let store = open(&dir.0, false).unwrap();
    let changes = [
        Change::put(BOUND, Key::Caller(1), entry(1, 500)),
        Change::put(OTHER, Key::Caller(1), entry(9, 500)),
        Change::put(BOUND, Key::Caller(1), entry(2, 500)),
        Change::put(BOUND, Key::Caller(2), entry(5, 500)),
        Change::remove(BOUND, Key::Caller(2)),
    ];
    store.write(&changes, 0).unwrap();
    // A batch retried after a failure that in fact committed: values, not deltas, so no double count.
    store.write(&changes, 0).unwrap();
    assert_eq!(store.load(BOUND, 0).unwrap(), vec![(Key::Caller(1), entry(2, 500))]);
    assert_eq!(store.load(OTHER, 0).unwrap(), vec![(Key::Caller(1), entry(9, 500))]);
    // Removing from a bound that has no table creates nothing.
    let stats = store.write(&[Change::remove("gone", Key::Caller(1))], 0).unwrap();
    assert_eq!((stats.removed, stats.committed), (0, false));
    assert!(store.tables().unwrap().iter().all(|t| t.name != "gone"));
}

#[test]
fn an_ended_period_is_not_loaded_and_is_pruned() {
    let dir = TempDir::new("expiry");
    let store = open(&dir.0, false).unwrap();
    store
        .write(
            &[
                Change::put(BOUND, Key::Caller(1), entry(1, 100)),
                Change::put(BOUND, Key::Overflow, entry(2, 100)),
                Change::put(BOUND, Key::Caller(2), entry(3, 200)),
                Change::put(OTHER, Key::Caller(1), entry(4, 300)),
            ],
            50,
        )
        .unwrap();
    // The period ends at exactly `expires`.
    assert_eq!(store.load(BOUND, 99).unwrap().len(), 3);
    assert_eq!(store.load(BOUND, 100).unwrap(), vec![(Key::Caller(2), entry(3, 200))]);
    assert_eq!(count(&store, BOUND), 3, "loading prunes nothing");

    // Nothing has ended at 99: an idle tick touches nothing.
    let idle = store.write(&[], 99).unwrap();
    assert_eq!((idle.pruned, idle.committed), (0, false));

    assert_eq!(store.prune(150).unwrap(), 2);
    assert_eq!(count(&store, BOUND), 1);
    assert_eq!(count(&store, OTHER), 1);
    // Pruned as part of a write too, in its transaction.
    let stats = store.write(&[Change::put(OTHER, Key::Caller(2), entry(5, 400))], 250).unwrap();
    assert_eq!((stats.written, stats.pruned), (1, 1));
    assert_eq!(count(&store, BOUND), 0);
    assert_eq!(store.prune(250).unwrap(), 0);
    // An emptied bound keeps its (empty) table until the caller drops it.
    assert_eq!(store.tables().unwrap().len(), 2);
}

#[test]
fn a_write_is_there_after_reopening_and_so_is_the_secret() {
    let dir = TempDir::new("reopen");
    let store = open(&dir.0, false).unwrap();
    let secret = store.secret();
    assert_ne!(secret, [0; 16]);
    store.write(&[Change::put(BOUND, Key::Caller(42), entry(7, u64::MAX))], 0).unwrap();
    drop(store); // a plain drop, as a panic unwinding would
    let store = open(&dir.0, false).unwrap();
    assert_eq!(store.secret(), secret);
    assert_eq!(store.discarded(), None);
    assert_eq!(store.load(BOUND, 1).unwrap(), vec![(Key::Caller(42), entry(7, u64::MAX))]);
    store.close().unwrap();
    let store = open(&dir.0, false).unwrap();
    assert_eq!(store.load(BOUND, 1).unwrap().len(), 1);
}

#[test]
fn starting_over_moves_the_file_aside_and_starts_empty_with_a_new_secret() {
    let dir = TempDir::new("start-over");
    let store = open(&dir.0, false).unwrap();
    let old_secret = store.secret();
    store.write(&[Change::put(BOUND, Key::Caller(1), entry(1, u64::MAX))], 0).unwrap();
    store.close().unwrap();
    let old_bytes = fs::read(dir.file()).unwrap();

    let store = open(&dir.0, true).unwrap();
    let aside = store.discarded().expect("the old file was moved aside").to_path_buf();
    assert!(aside.file_name().unwrap().to_str().unwrap().starts_with("quotas.redb.discarded-"));
    assert_eq!(fs::read(&aside).unwrap(), old_bytes, "moved, not rewritten");
    assert_ne!(store.secret(), old_secret);
    assert_eq!(store.load(BOUND, 0).unwrap(), vec![]);
    assert_eq!(store.tables().unwrap(), vec![]);
    store.close().unwrap();

    // Twice within a second: the second file aside does not replace the first.
    let store = open(&dir.0, true).unwrap();
    assert_ne!(store.discarded().unwrap(), aside);
    assert!(aside.exists());
}

#[test]
fn drop_table_removes_a_bound_and_only_it() {
    let dir = TempDir::new("drop-table");
    let store = open(&dir.0, false).unwrap();
    store
        .write(
            &[Change::put(BOUND, Key::Caller(1), entry(1, 500)), Change::put(OTHER, Key::Caller(1), entry(2, 500))],
            0,
        )
        .unwrap();
    assert!(store.drop_table(BOUND).unwrap());
    assert!(!store.drop_table(BOUND).unwrap());
    assert_eq!(store.tables().unwrap(), vec![TableInfo { name: OTHER.to_string(), entries: 1 }]);
    assert_eq!(store.load(BOUND, 0).unwrap(), vec![]);
    assert_eq!(store.load(OTHER, 0).unwrap().len(), 1);
}

#[test]
fn a_second_open_in_the_same_process_is_refused_naming_the_lock_file() {
    let dir = TempDir::new("locked-here");
    let _store = StateStore::open(&dir.0, false).unwrap();
    for start_over in [false, true] {
        let error = StateStore::open(&dir.0, start_over).unwrap_err();
        match &error {
            StateError::Locked { path, holder } => {
                assert_eq!(path, &dir.0.join("quotas.lock"));
                assert_eq!(*holder, Some(std::process::id()));
            }
            other => panic!("expected Locked, got {other}"),
        }
        assert!(error.to_string().contains(&dir.0.join("quotas.lock").display().to_string()), "{error}");
    }
    // Starting over while locked moved nothing.
    assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 2);
}

#[test]
fn an_open_while_another_process_holds_the_state_is_refused() {
    let dir = TempDir::new("locked-there");
    let (mut child, mut lines) = child("hold", &dir.0);
    assert_eq!(next_line(&mut lines), "locked");
    let error = open(&dir.0, false).unwrap_err();
    match &error {
        StateError::Locked { path, holder } => {
            assert_eq!(path, &dir.0.join("quotas.lock"));
            assert_eq!(*holder, Some(child.id()));
        }
        other => panic!("expected Locked, got {other}"),
    }
    assert!(error.to_string().contains(&format!("(pid {})", child.id())), "{error}");
    drop(child.stdin.take()); // lets the child go
    assert!(child.wait().unwrap().success());
    // Released when it ended.
    open(&dir.0, false).unwrap();
}

/// Each kill lands wherever the child is: between transactions, or part way through one.
#[test]
fn a_writer_killed_mid_write_leaves_every_committed_batch_and_no_half_of_one() {
    let dir = TempDir::new("killed");
    let mut last_acked = 0;
    for round in 0..6 {
        let (mut child, mut lines) = child("write", &dir.0);
        // Let it commit one to four batches, then kill it during the next.
        for _ in 0..=round % 4 {
            let line = next_line(&mut lines);
            last_acked = line.strip_prefix("committed ").and_then(|n| n.parse().ok()).expect(&line);
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let store = open(&dir.0, false).expect("a killed writer leaves a file that opens");
        let entries = store.load(BOUND, 0).unwrap();
        assert_eq!(entries.len(), BATCH as usize, "round {round}: a batch is whole or absent");
        let batch = entries[0].1.a;
        assert!(entries.iter().all(|(_, e)| e.a == batch), "round {round}: two batches mixed");
        assert!(
            batch == last_acked || batch == last_acked + 1,
            "round {round}: batch {batch} on disk, {last_acked} acknowledged"
        );
        last_acked = batch;
        store.close().unwrap();
    }
}

#[test]
fn a_damaged_file_is_an_error_naming_it_never_a_panic_or_an_empty_state() {
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 4] = [
        ("one bit of a stored counter", |file| {
            for at in copies_of_a_counter(file) {
                file[at] ^= 0x10;
            }
        }),
        ("a page of counters overwritten", |file| {
            for at in copies_of_a_counter(file) {
                let page = at / 4096 * 4096;
                file[page..page + 4096].fill(0xA5);
            }
        }),
        ("the header overwritten", |file| file[..64].fill(0x5A)),
        ("truncated to a third", |file| file.truncate(file.len() / 3)),
    ];
    for (what, damage) in damages {
        let dir = TempDir::new("damaged");
        let store = open(&dir.0, false).unwrap();
        let changes: Vec<_> =
            (0..20_000).map(|i| Change::put(BOUND, Key::Caller(i * 7919), entry(i, u64::MAX))).collect();
        store.write(&changes, 0).unwrap();
        store.close().unwrap();
        let mut damaged = fs::read(dir.file()).unwrap();
        damage(&mut damaged);
        fs::write(dir.file(), &damaged).unwrap();

        for _ in 0..2 {
            let error = open(&dir.0, false).unwrap_err();
            assert!(matches!(&error, StateError::Corrupt { path, .. } if path == &dir.file()), "{what}: {error}");
            assert!(error.to_string().contains(&dir.file().display().to_string()), "{what}: {error}");
            assert_eq!(fs::read(dir.file()).unwrap(), damaged, "{what}: the file was left as it was");
        }
        // Starting over is the explicit way out, and keeps the damaged file.
        let store = open(&dir.0, true).unwrap();
        assert_eq!(fs::read(store.discarded().unwrap()).unwrap(), damaged, "{what}");
        assert_eq!(store.load(BOUND, 0).unwrap(), vec![], "{what}");
    }
}

/// Where the stored value of counter 12,345 (written by the test above) sits in the file: every
/// copy, in case a page freed during the write still holds one; at least one is live.
fn copies_of_a_counter(file: &[u8]) -> Vec<usize> {
    let e = entry(12_345, u64::MAX);
    let value: Vec<u8> =
        [&e.a.to_le_bytes()[..], &e.b.to_le_bytes(), &e.c.to_le_bytes(), &e.expires.to_le_bytes()].concat();
    let copies: Vec<_> = file.windows(value.len()).enumerate().filter(|(_, w)| *w == value).map(|(at, _)| at).collect();
    assert!(!copies.is_empty(), "the counter is stored as (a, b, c, expires), little-endian");
    copies
}

#[test]
fn a_file_of_another_format_is_refused_with_both_versions() {
    let dir = TempDir::new("version");
    open(&dir.0, false).unwrap().close().unwrap();
    let db = redb::Database::open(dir.file()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(redb::TableDefinition::<&str, &[u8]>::new("meta"))
        .unwrap()
        .insert("format", 99u32.to_le_bytes().as_slice())
        .unwrap();
    tx.commit().unwrap();
    drop(db);
    let error = open(&dir.0, false).unwrap_err();
    match &error {
        StateError::Version { path, what, found, expected } => {
            assert_eq!((path, *what, *found, *expected), (&dir.file(), "opbound state format", 99, FORMAT));
        }
        other => panic!("expected Version, got {other}"),
    }
    assert!(error.to_string().contains("99"), "{error}");
}

#[test]
fn a_redb_file_opbound_did_not_write_is_refused() {
    let dir = TempDir::new("foreign");
    fs::create_dir_all(&dir.0).unwrap();
    let db = redb::Database::create(dir.file()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(redb::TableDefinition::<u64, u64>::new("something")).unwrap().insert(1, 2).unwrap();
    tx.commit().unwrap();
    drop(db);
    let error = open(&dir.0, false).unwrap_err();
    assert!(matches!(&error, StateError::Corrupt { detail, .. } if detail.contains("format record")), "{error}");
}

#[test]
fn a_state_directory_is_created_and_kept_private() {
    let dir = TempDir::new("create");
    let nested = dir.0.join("a/b");
    let store = open(&nested, false).unwrap();
    assert_eq!(store.path(), nested.join("quotas.redb"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&nested).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(store.path()).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(!format!("{store:?}").contains(&format!("{:?}", store.secret())), "Debug shows no secret");
}

// ---- the second process -----------------------------------------------------------------------

/// Entries per batch the killed writer commits.
const BATCH: u64 = 2_000;
const CHILD_ENV: &str = "OPBOUND_DURABLE_CHILD";
const CHILD_SAYS: &str = "durable-child: ";

/// Starts this test binary again as a second process running [`second_process`].
fn child(role: &str, dir: &Path) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "store::durable::tests::second_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{role}:{}", dir.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The child's next message (the test harness prints lines of its own around them).
fn next_line(lines: &mut std::io::Lines<BufReader<ChildStdout>>) -> String {
    for line in lines.by_ref() {
        // Not always at the start: the harness writes `test ... ` before the test's output.
        if let Some((_, said)) = line.unwrap().split_once(CHILD_SAYS) {
            return said.to_string();
        }
    }
    panic!("the child process ended without saying more")
}

/// Tells the parent, at once: straight to stdout (no capture), flushed (a pipe is not a terminal).
fn say(message: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{CHILD_SAYS}{message}").and_then(|()| out.flush()).unwrap();
}

/// Not a test: the other process of the tests above. `hold` keeps the state open until its
/// stdin closes; `write` commits batches forever (each entry of batch N has `a == N`), telling
/// after each commit, until it is killed.
#[test]
#[ignore = "run by other tests as a second process"]
fn second_process() {
    let Ok(task) = std::env::var(CHILD_ENV) else { return };
    let (role, dir) = task.split_once(':').unwrap();
    let store = StateStore::open(Path::new(dir), false).unwrap();
    match role {
        "hold" => {
            say("locked");
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
        "write" => {
            let mut batch = store.load(BOUND, 0).unwrap().first().map_or(0, |(_, e)| e.a);
            loop {
                batch += 1;
                let changes: Vec<_> = (0..BATCH)
                    .map(|i| {
                        Change::put(BOUND, Key::Caller(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)), entry(batch, u64::MAX))
                    })
                    .collect();
                store.write(&changes, 0).unwrap();
                say(&format!("committed {batch}"));
            }
        }
        other => panic!("unknown role {other}"),
    }
}
