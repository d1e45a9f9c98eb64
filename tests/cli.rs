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
