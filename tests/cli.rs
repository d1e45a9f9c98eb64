//! The real `opbound` binary run against the fixtures, its output compared with the golden files
//! beside them. After an intended change, refresh them with `OPBOUND_BLESS=1 cargo test --test cli`
//! and read the diff before committing.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Runs the binary in `fixtures/` and renders everything it did as one text.
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(args)
        .current_dir(fixtures())
        // A table is cut to COLUMNS: goldens are the uncut output, whatever the terminal.
        .env_remove("COLUMNS")
        .output()
        .expect("the opbound binary runs");
    let mut text = format!("$ opbound {}\nexit: {}\n", args.join(" "), out.status.code().unwrap_or(-1));
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let s = String::from_utf8_lossy(bytes);
        if !s.is_empty() {
            let _ = write!(text, "--- {name}\n{s}");
            if !s.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    text
}

/// Compares with the golden file, or rewrites it when blessing. Returns a report on mismatch.
fn compare(golden: &Path, actual: &str) -> Option<String> {
    if std::env::var_os("OPBOUND_BLESS").is_some() {
        std::fs::write(golden, actual).expect("golden file is writable");
        return None;
    }
    let expected = std::fs::read_to_string(golden).unwrap_or_default();
    if expected == actual {
        return None;
    }
    let mut report = format!("\n=== {} differs (expected | actual)\n", golden.display());
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..e.len().max(a.len()) {
        let (l, r) = (e.get(i).copied().unwrap_or(""), a.get(i).copied().unwrap_or(""));
        let mark = if l == r { ' ' } else { '!' };
        let _ = writeln!(report, "{mark} {l:<70} | {r}");
    }
    Some(report)
}

/// Runs each case and fails once, listing every mismatch.
fn run_cases(cases: &[(PathBuf, Vec<String>)]) {
    assert!(!cases.is_empty(), "no cases found: the fixtures folder is missing");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(golden, args)| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            compare(golden, &run(&args))
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} golden outputs differ:{}", failures.len(), cases.len(), failures.concat());
}

fn specs_in(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join(dir))
        .expect("fixture folder exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

fn golden_name(dir: &str, spec: &str, suffix: &str) -> PathBuf {
    let stem = spec.rsplit_once('.').map_or(spec, |(s, _)| s);
    fixtures().join(dir).join(format!("{stem}{suffix}.golden"))
}

#[test]
fn check_reports_every_fixture_exactly() {
    let cases: Vec<(PathBuf, Vec<String>)> = specs_in("check")
        .into_iter()
        .map(|spec| (golden_name("check", &spec, ""), vec!["check".to_string(), format!("check/{spec}")]))
        .collect();
    run_cases(&cases);
}

#[test]
fn routes_of_every_routing_fixture() {
    let mut cases = Vec::new();
    for spec in specs_in("routing") {
        let path = format!("routing/{spec}");
        cases.push((golden_name("routing", &spec, ".routes"), vec!["routes".into(), path.clone()]));
        cases.push((golden_name("routing", &spec, ".routes-json"), vec!["routes".into(), "--json".into(), path]));
    }
    for spec in ["../specs/petstore.yaml", "../specs/saas.yaml"] {
        let name = Path::new(spec).file_name().unwrap().to_str().unwrap();
        cases.push((golden_name("routing", name, ".routes"), vec!["routes".into(), spec.into()]));
    }
    run_cases(&cases);
}

/// Issue 47, item 10: `routes` printed 377-character lines on a 196-operation spec. With
/// `COLUMNS` (or a terminal) every line fits, the cut cells keep both ends, and the AT column,
/// which repeated TEMPLATE on every row, is gone.
#[test]
fn routes_fit_the_width_columns_gives() {
    let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(["routes", "routing/long-names.yaml"])
        .current_dir(fixtures())
        .env("COLUMNS", "72")
        .output()
        .expect("the opbound binary runs");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 72, "{} characters: {line}\n{text}", line.chars().count());
    }
    assert!(text.contains("METHOD  TEMPLATE ") && !text.contains(" AT "), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("DELETE  /2010-04-01/") && l.contains('…') && l.contains("s/{Sid}.json ")),
        "{text}"
    );
}

/// Issue 47, item 10: replay's tables had fixed widths, and an operation name longer than 48
/// characters pushed its row out of line. Every row of a table now ends in the same column.
#[test]
fn replay_tables_stay_aligned_with_long_names() {
    let text = run(&["replay", "replay/long-names.yaml", "replay/long-names.log"]);
    let tables: Vec<&str> =
        text.split("\n\n").filter(|t| t.starts_with("bound ") || t.starts_with("operation ")).collect();
    assert_eq!(tables.len(), 2, "{text}");
    for table in tables {
        let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "rows of unequal length {widths:?}:\n{table}");
        assert!(table.contains("ListIncomingPhoneNumberAssignedAddOn"), "{table}");
    }
}

/// `diff` on each pair `fixtures/diff/OLD-NAME.yaml` and `NEW-NAME.yaml`, as text and JSON.
#[test]
fn diff_of_every_fixture_pair() {
    let mut cases = Vec::new();
    for old in specs_in("diff").into_iter().filter(|n| n.starts_with("OLD-")) {
        let name = old.trim_start_matches("OLD-").trim_end_matches(".yaml");
        let (old, new) = (format!("diff/{old}"), format!("diff/NEW-{name}.yaml"));
        let golden = |suffix: &str| fixtures().join("diff").join(format!("{name}{suffix}.golden"));
        cases.push((golden(""), vec!["diff".to_string(), old.clone(), new.clone()]));
        cases.push((golden("-json"), vec!["diff".to_string(), "--format".into(), "json".into(), old, new]));
    }
    run_cases(&cases);
}

/// Commands with options, one per line of `fixtures/commands.txt`: `name: args...`.
#[test]
fn commands() {
    let table = std::fs::read_to_string(fixtures().join("commands.txt")).expect("commands.txt exists");
    let cases: Vec<(PathBuf, Vec<String>)> = table
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (name, args) = line.split_once(':').expect("each line is `name: args`");
            (fixtures().join("commands").join(format!("{}.golden", name.trim())), split_args(args))
        })
        .collect();
    run_cases(&cases);
}

/// Splits like a shell, for single-quoted arguments only.
fn split_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(current);
    }
    out
}

/// How a test's reader treats the command's standard output.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// Reads the first line and leaves, as `| head -1` does, while the command is still writing.
    LeavesAfterFirstLine,
    /// Has left before the command starts: its first write meets a closed pipe.
    GoneAtStart,
}

/// Runs the binary in `dir` with stdout (and stderr too, when `both`) into a pipe that `reader`
/// abandons; returns the exit code and what reached stderr.
fn run_into_closed_pipe(dir: &Path, args: &[String], reader: Reader, both: bool) -> (Option<i32>, String) {
    use std::io::BufRead;
    let (read_end, write_end) = std::io::pipe().expect("a pipe");
    let mut read_end = Some(read_end);
    if let Reader::GoneAtStart = reader {
        read_end = None;
    }
    let child = {
        // The command is dropped right after the spawn, so the child holds the only write end.
        let mut command = Command::new(env!("CARGO_BIN_EXE_opbound"));
        command.args(args).current_dir(dir);
        if both {
            command.stderr(write_end.try_clone().expect("a second write end"));
        } else {
            command.stderr(std::process::Stdio::piped());
        }
        command.stdout(write_end).spawn().expect("the opbound binary runs")
    };
    if let Some(read_end) = read_end {
        let mut first = String::new();
        std::io::BufReader::new(read_end).read_line(&mut first).expect("the first line arrives");
        if first.is_empty() {
            let out = child.wait_with_output().expect("the command ends");
            panic!("opbound {} printed nothing:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
    }
    let out = child.wait_with_output().expect("the command ends");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Regression: `opbound routes spec.yaml | head` panicked with `failed printing to stdout: Broken
/// pipe` (exit 101); so did `routes --json`, `check` and `explain`. A reader that leaves ends the
/// output quietly, and the exit code is still the command's own (1 for an invalid spec).
#[test]
fn a_reader_that_leaves_early_ends_output_quietly() {
    let dir = std::env::temp_dir().join(format!("opbound-cli-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Enough operations that the listing outgrows a pipe's buffer, so the command is still
    // writing when the reader leaves.
    let head = "openapi: 3.0.3\ninfo: {title: many, version: '1'}\n";
    let mut many = format!("{head}x-rate-limit: {{per: address, limit: 5, window: PT1M}}\npaths:\n");
    let mut broken = format!("{head}paths:\n");
    for i in 0..2000 {
        many.push_str(&format!("  /items{i}: {{get: {{operationId: item{i}}}}}\n"));
        broken.push_str(&format!(
            "  /items{i}: {{get: {{operationId: item{i}, x-rate-limit: {{per: adress, limit: 5, window: PT1M}}}}}}\n"
        ));
    }
    std::fs::write(dir.join("many.yaml"), many).unwrap();
    std::fs::write(dir.join("broken.yaml"), broken).unwrap();
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/petstore.yaml"), dir.join("petstore.yaml"))
        .unwrap();
    let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<String>>();
    // One summary line per spec on stdout; the shared store silences the per-instance warning.
    let mut check_many = words("check --store redis://127.0.0.1:6379");
    check_many.extend(std::iter::repeat_n("petstore.yaml".to_string(), 2000));

    // (arguments, reader, stderr into the same pipe, expected exit code)
    let cases: Vec<(Vec<String>, Reader, bool, i32)> = vec![
        (words("routes many.yaml"), Reader::LeavesAfterFirstLine, false, 0),
        (words("routes --json many.yaml"), Reader::LeavesAfterFirstLine, false, 0),
        (check_many, Reader::LeavesAfterFirstLine, false, 0),
        (words("check broken.yaml"), Reader::LeavesAfterFirstLine, true, 1),
        (words("routes petstore.yaml"), Reader::GoneAtStart, false, 0),
        (words("explain petstore.yaml GET /v1/pets"), Reader::GoneAtStart, false, 0),
        (words("explain --json petstore.yaml GET /v1/pets"), Reader::GoneAtStart, false, 0),
    ];
    let mut failures = Vec::new();
    for (args, reader, both, expected) in cases {
        let (code, stderr) = run_into_closed_pipe(&dir, &args, reader, both);
        if code != Some(expected) || stderr.contains("panicked") || stderr.contains("Broken pipe") {
            let shown = if args.len() > 5 { format!("{} ...", args[..5].join(" ")) } else { args.join(" ") };
            failures.push(format!("opbound {shown} ({reader:?}): exit {code:?}, expected {expected}\n{stderr}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
