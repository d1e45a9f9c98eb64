//! The book (`docs/src`) and the README, held to what they show: every `opbound` command in a
//! `sh` or `console` block (or a CI workflow's `run:` step) is run, and every link between the
//! pages resolves, so a page cannot go stale unnoticed.
//!
//! A page's commands run in order in one temporary copy of `fixtures/book/PAGE/` (or
//! `fixtures/book/common/` when the page has none), so a file one command writes is there for the
//! next, as for a reader who runs them one after the other. Short commands run through `sh` as
//! written and must exit 0 (or the `# exit N` their comment states); in a `console` block, the
//! lines after a `$ ` command are output it must print (`[..]` stands for any text, `...` for
//! lines left out). Servers (`serve`, `decide`, `demo`, unless a flag in `EXITS_AT_ONCE` makes
//! them print and exit) are started as written, but listening on free ports (`--listen`,
//! `--admin` and `--grpc` set to `127.0.0.1:0`), and must come up.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Opbound, Upstream};

/// Every page, read at compile time so that editing one rebuilds this test.
const PAGES: &[(&str, &str)] = &[
    ("README.md", include_str!("../README.md")),
    ("docs/src/SUMMARY.md", include_str!("../docs/src/SUMMARY.md")),
    ("docs/src/introduction.md", include_str!("../docs/src/introduction.md")),
    ("docs/src/install.md", include_str!("../docs/src/install.md")),
    ("docs/src/ten-minutes.md", include_str!("../docs/src/ten-minutes.md")),
    ("docs/src/x-rate-limit.md", include_str!("../docs/src/x-rate-limit.md")),
    ("docs/src/counting.md", include_str!("../docs/src/counting.md")),
    ("docs/src/quotas.md", include_str!("../docs/src/quotas.md")),
    ("docs/src/overlays.md", include_str!("../docs/src/overlays.md")),
    ("docs/src/model-servers.md", include_str!("../docs/src/model-servers.md")),
    ("docs/src/publishing.md", include_str!("../docs/src/publishing.md")),
    ("docs/src/replay-suggest.md", include_str!("../docs/src/replay-suggest.md")),
    ("docs/src/serve.md", include_str!("../docs/src/serve.md")),
    ("docs/src/decide.md", include_str!("../docs/src/decide.md")),
    ("docs/src/gateways/nginx.md", include_str!("../docs/src/gateways/nginx.md")),
    ("docs/src/gateways/caddy.md", include_str!("../docs/src/gateways/caddy.md")),
    ("docs/src/gateways/traefik.md", include_str!("../docs/src/gateways/traefik.md")),
    ("docs/src/gateways/envoy.md", include_str!("../docs/src/gateways/envoy.md")),
    ("docs/src/gateways/kubernetes.md", include_str!("../docs/src/gateways/kubernetes.md")),
    ("docs/src/identity.md", include_str!("../docs/src/identity.md")),
    ("docs/src/trust.md", include_str!("../docs/src/trust.md")),
    ("docs/src/connections.md", include_str!("../docs/src/connections.md")),
    ("docs/src/cluster.md", include_str!("../docs/src/cluster.md")),
    ("docs/src/redis.md", include_str!("../docs/src/redis.md")),
    ("docs/src/operating.md", include_str!("../docs/src/operating.md")),
    ("docs/src/cli.md", include_str!("../docs/src/cli.md")),
    ("docs/src/ci.md", include_str!("../docs/src/ci.md")),
    ("docs/src/editor.md", include_str!("../docs/src/editor.md")),
    ("docs/src/specs.md", include_str!("../docs/src/specs.md")),
    ("docs/src/benchmarks.md", include_str!("../docs/src/benchmarks.md")),
];

/// Flags with which a server command prints what it is asked for and exits instead of serving.
const EXITS_AT_ONCE: &[&str] = &["--help", "-h", "--print-gateway"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn page(name: &str) -> &'static str {
    PAGES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("{name} is not in PAGES")).1
}

/// A fenced code block: its language and its lines, with the line number of the first.
struct Block {
    lang: String,
    first_line: usize,
    /// The fence's indentation, which its lines share (a block inside a list item).
    indent: usize,
    lines: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => out.push(block),
                None => {
                    let (lang, indent) = (rest.trim().to_string(), line.len() - trimmed.len());
                    open = Some(Block { lang, first_line: i + 2, indent, lines: Vec::new() });
                }
            }
        } else if let Some(block) = open.as_mut() {
            let indent = line.len() - trimmed.len();
            block.lines.push(line[indent.min(block.indent)..].to_string());
        }
    }
    out
}

/// A command a page shows, with the output a `console` block says it prints.
#[derive(Debug)]
struct Shown {
    page: &'static str,
    line: usize,
    command: String,
    expected: Vec<String>,
}

impl Shown {
    fn is_opbound(&self) -> bool {
        self.command.starts_with("opbound ")
    }

    /// `serve`, `decide` and `demo` run until stopped, unless told to print something and exit.
    fn is_server(&self) -> bool {
        let mut words = self.command.split_whitespace();
        matches!(words.nth(1), Some("serve" | "decide" | "demo")) && !words.any(|w| EXITS_AT_ONCE.contains(&w))
    }

    fn at(&self) -> String {
        format!("{} line {}: {}", self.page, self.line, self.command)
    }

    /// The exit code the command's comment states (`# exit 1`, `# exits 1: why`), 0 otherwise.
    fn expected_exit(&self) -> i32 {
        let (_, comment) = split_comment(&self.command);
        let stated = comment.and_then(|c| {
            let rest = c.trim().strip_prefix("exits ").or_else(|| c.trim().strip_prefix("exit "))?;
            rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        });
        stated.unwrap_or(0)
    }

    /// The command without its trailing comment.
    fn bare(&self) -> String {
        split_comment(&self.command).0.trim_end().to_string()
    }
}

/// Splits `cmd  # comment` at the first `#` that starts a word outside single quotes.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quoted = false;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '#' if !quoted && previous.is_whitespace() => return (&line[..i], Some(&line[i + 1..])),
            _ => {}
        }
        previous = c;
    }
    (line, None)
}

/// The commands of a page's `sh` and `console` blocks, continuation lines joined, and the
/// `opbound` lines of a CI workflow's `run:` steps in `yaml` blocks.
fn shown(page: &'static str, text: &str) -> Vec<Shown> {
    let mut out: Vec<Shown> = Vec::new();
    for block in blocks(text) {
        if block.lang == "yaml" {
            for (i, line) in block.lines.iter().enumerate() {
                let step = line.trim_start().trim_start_matches("- ").trim_start_matches("run: ");
                if step.starts_with("opbound ") {
                    out.push(Shown {
                        page,
                        line: block.first_line + i,
                        command: step.to_string(),
                        expected: Vec::new(),
                    });
                }
            }
            continue;
        }
        let console = block.lang == "console";
        if !console && block.lang != "sh" {
            continue;
        }
        let mut pending: Option<(usize, String)> = None;
        for (i, line) in block.lines.iter().enumerate() {
            let number = block.first_line + i;
            if let Some((start, mut command)) = pending.take() {
                command.push(' ');
                command.push_str(line.trim());
                match command.strip_suffix('\\') {
                    Some(c) => pending = Some((start, c.trim_end().to_string())),
                    None => out.push(Shown { page, line: start, command, expected: Vec::new() }),
                }
                continue;
            }
            let command = if console { line.strip_prefix("$ ") } else { Some(line.as_str()) };
            match command {
                Some(c) if !c.trim().is_empty() && !c.starts_with('#') => match c.strip_suffix('\\') {
                    Some(c) => pending = Some((number, c.trim_end().to_string())),
                    None => out.push(Shown { page, line: number, command: c.to_string(), expected: Vec::new() }),
                },
                Some(_) => {}
                None => {
                    if let Some(last) = out.last_mut() {
                        last.expected.push(line.clone());
                    }
                }
            }
        }
    }
    out
}

/// Whether `actual` holds every expected line, in order: `[..]` in a line matches any text, and
/// a line `...` stands for lines left out (which any line may be).
fn output_matches(expected: &[String], actual: &str) -> bool {
    let mut lines = actual.lines();
    'next: for want in expected.iter().map(|l| l.trim_end()).filter(|l| !l.is_empty() && *l != "...") {
        for line in lines.by_ref() {
            if line_matches(want, line.trim_end()) {
                continue 'next;
            }
        }
        return false;
    }
    true
}

fn line_matches(want: &str, line: &str) -> bool {
    let parts: Vec<&str> = want.split("[..]").collect();
    if parts.len() == 1 {
        return want == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line.ends_with(last) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// A fresh copy of the page's fixture directory.
fn workdir(page: &str) -> tempfile_dir::Dir {
    let stem = Path::new(page).file_stem().unwrap().to_str().unwrap().to_lowercase();
    let own = root().join("fixtures/book").join(&stem);
    let from = if own.is_dir() { own } else { root().join("fixtures/book/common") };
    let dir = tempfile_dir::Dir::new(&format!("book-{stem}"));
    copy_dir(&from, dir.path());
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Temporary directories under the target directory, removed when dropped.
mod tempfile_dir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Dir(PathBuf);

    impl Dir {
        /// A new directory; tests running at once each get their own, whatever the name.
        pub fn new(name: &str) -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
            let dir = base.join(format!("{name}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `PATH` with the opbound under test first, so `sh` runs it as `opbound`.
fn path_with_opbound() -> String {
    let binary = Path::new(env!("CARGO_BIN_EXE_opbound"));
    format!("{}:{}", binary.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs a shell command in `dir`; its exit code and everything it printed, stdout and stderr in the
/// order a terminal shows them.
fn sh(dir: &Path, command: &str) -> (i32, String) {
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec 2>&1\n{command}")])
        .current_dir(dir)
        .env("PATH", path_with_opbound())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`{command}` did not finish within two minutes");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A server command's arguments (after `opbound`), listening on free ports instead of the ones
/// written, and with `replace` applied to each argument.
fn server_args(command: &str, replace: &[(&str, &str)]) -> Vec<String> {
    let mut args: Vec<String> = command.split_whitespace().skip(1).map(str::to_string).collect();
    for arg in &mut args {
        for (from, to) in replace {
            if arg == from {
                *arg = to.to_string();
            }
        }
    }
    for i in 1..args.len() {
        if matches!(args[i - 1].as_str(), "--listen" | "--admin" | "--grpc") {
            args[i] = "127.0.0.1:0".to_string();
        }
    }
    let http = !args.iter().any(|a| a == "--no-http");
    if http && !args.iter().any(|a| a == "--listen") {
        args.extend(["--listen".to_string(), "127.0.0.1:0".to_string()]);
    }
    args
}

/// Starts a server command as a page shows it (on free ports) and checks that it comes up.
fn start_server(dir: &Path, shown: &Shown) {
    let args = server_args(&shown.bare(), &[]);
    if args[0] == "demo" {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_opbound"))
            .args(&args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines: Vec<String> =
            BufReader::new(stdout).lines().map_while(Result::ok).take_while(|l| !l.starts_with("Ctrl-C")).collect();
        let _ = child.kill();
        let _ = child.wait();
        assert!(lines.iter().any(|l| l.contains("curl -i")), "{}: the demo did not start: {lines:#?}", shown.at());
        return;
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Opbound::start_in(dir, &refs);
    assert!(common::listening(server.addr), "{}: not listening at {}", shown.at(), server.addr);
}

/// Every `opbound` command the README and the book show, run (servers started), page by page.
#[test]
fn every_command_shown_runs() {
    let mut ran = 0;
    for (name, text) in PAGES {
        let commands: Vec<Shown> = shown(name, text).into_iter().filter(Shown::is_opbound).collect();
        if commands.is_empty() {
            continue;
        }
        let dir = workdir(name);
        for command in &commands {
            if command.is_server() {
                start_server(dir.path(), command);
            } else {
                let (code, output) = sh(dir.path(), &command.bare());
                assert_eq!(code, command.expected_exit(), "{}: exit {code}\n{output}", command.at());
                assert!(
                    output_matches(&command.expected, &output),
                    "{}: the page shows\n{}\nit printed\n{output}",
                    command.at(),
                    command.expected.join("\n")
                );
            }
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} commands found: is the extraction broken?");
}

/// The ten-minute page end to end: its spec is the fixture, and its `serve` in front of an API
/// (a stub here, on the page's `127.0.0.1:3000`) answers the page's `curl` lines as the page
/// shows, the last with a 429. Sliding windows are aligned to the clock: requests that straddle a
/// minute see the previous minute's count decay, so such a run is tried again on a fresh `serve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ten_minute_page_ends_in_a_429() {
    let text = page("docs/src/ten-minutes.md");
    let spec = blocks(text).into_iter().find(|b| b.lang == "yaml").expect("the page shows its spec");
    let fixture = std::fs::read_to_string(root().join("fixtures/book/ten-minutes/api.yaml")).unwrap();
    assert_eq!(
        spec.lines.join("\n").trim_end(),
        fixture.trim_end(),
        "the page's spec is fixtures/book/ten-minutes/api.yaml"
    );
    let commands = shown("docs/src/ten-minutes.md", text);
    let serve = commands.iter().find(|c| c.command.starts_with("opbound serve ")).expect("the page runs serve");
    let curls: Vec<&Shown> = commands.iter().filter(|c| c.command.contains("curl ")).collect();
    assert!(curls.len() >= 2, "the page sends requests with curl");
    let minute = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 60;
    for _attempt in 0..3 {
        let dir = workdir("docs/src/ten-minutes.md");
        let up = Upstream::start().await;
        let args = server_args(&serve.bare(), &[("http://127.0.0.1:3000", up.url().as_str())]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Opbound::start_in(dir.path(), &refs);
        let started = minute();
        let mut failure = None;
        for curl in &curls {
            let command = curl.bare().replace("127.0.0.1:8080", &server.addr.to_string());
            let dir_path = dir.path().to_path_buf();
            let (code, output) = tokio::task::spawn_blocking(move || sh(&dir_path, &command)).await.unwrap();
            if code != 0 || !output_matches(&curl.expected, &output) {
                failure = Some(format!(
                    "{}: exit {code}; the page shows\n{}\ncurl printed\n{output}",
                    curl.at(),
                    curl.expected.join("\n")
                ));
                break;
            }
        }
        match failure {
            Some(f) if minute() != started => eprintln!("the requests straddled a minute ({f}); again"),
            Some(f) => panic!("{f}"),
            None => {
                assert!(!up.targets().is_empty(), "requests reached the API");
                return;
            }
        }
    }
    panic!("three runs in a row straddled a minute: each takes well under a second");
}

/// An `opbound` line in a block of another language would be run by nobody: the blocks that show
/// one without running it are `text` (a command's output, or the command line's synopsis).
#[test]
fn no_command_hides_in_a_block_that_is_not_run() {
    let mut hidden = Vec::new();
    for (name, text) in PAGES {
        for block in blocks(text) {
            if matches!(block.lang.as_str(), "sh" | "console" | "yaml" | "text") {
                continue;
            }
            for (i, line) in block.lines.iter().enumerate() {
                if line.starts_with("opbound ") || line.starts_with("$ opbound ") {
                    hidden.push(format!("{name} line {}: {line}", block.first_line + i));
                }
            }
        }
    }
    assert!(hidden.is_empty(), "commands in blocks that are not run (use sh or console):\n{}", hidden.join("\n"));
}

/// The replay page shows what `replay` and `suggest` print for the shop of `fixtures/replay/`,
/// cut short: each line it shows is in the golden output `tests/cli.rs` keeps for that command.
#[test]
fn the_replay_page_shows_the_golden_outputs() {
    let samples: Vec<Block> =
        blocks(page("docs/src/replay-suggest.md")).into_iter().filter(|b| b.lang.is_empty()).collect();
    for (sample, golden) in samples.iter().zip(["replay-combined", "suggest-shop"]) {
        let path = root().join("fixtures/commands").join(format!("{golden}.golden"));
        let output = std::fs::read_to_string(&path).unwrap();
        assert!(
            output_matches(&sample.lines, &output),
            "docs/src/replay-suggest.md line {}: not what {} holds:\n{}",
            sample.first_line,
            path.display(),
            sample.lines.join("\n")
        );
    }
    assert_eq!(samples.len(), 2, "the page shows replay's and suggest's output");
}

/// GitHub's and mdBook's id for a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Markdown links `[text](target)` outside code blocks and code spans, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_block = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut in_code = false;
        let chars: Vec<char> = line.chars().collect();
        let mut j = 0;
        while j < chars.len() {
            match chars[j] {
                '`' => in_code = !in_code,
                ']' if !in_code && chars.get(j + 1) == Some(&'(') => {
                    if let Some(end) = chars[j + 2..].iter().position(|c| *c == ')') {
                        out.push((i + 1, chars[j + 2..j + 2 + end].iter().collect()));
                        j += 2 + end;
                    }
                }
                _ => {}
            }
            j += 1;
        }
    }
    out
}

/// Every relative link in the README and the book leads to a file, and every `#anchor` to a
/// heading of the page it names; links from the book stay inside `docs/src`, which is all the
/// built book holds.
#[test]
fn every_link_resolves() {
    let by_path: BTreeMap<PathBuf, &str> = PAGES.iter().map(|(n, t)| (root().join(n), *t)).collect();
    let src = root().join("docs/src");
    let mut broken = Vec::new();
    for (name, text) in PAGES {
        let here = root().join(name);
        for (line, target) in links(text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { here.clone() } else { normalize(&here.parent().unwrap().join(path)) };
            if !file.exists() {
                broken.push(format!("{name}:{line}: {target}: no such file"));
                continue;
            }
            if here.starts_with(&src) && !file.starts_with(&src) {
                broken.push(format!("{name}:{line}: {target}: outside docs/src, so not in the built book"));
            }
            if let Some(fragment) = fragment {
                match by_path.get(&file) {
                    Some(target_text) if anchors(target_text).contains(fragment) => {}
                    Some(_) => broken.push(format!("{name}:{line}: {target}: no such heading")),
                    None => broken.push(format!("{name}:{line}: {target}: an anchor into a page not in PAGES")),
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Resolves `.` and `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// PAGES is the book: every page under `docs/src` is in it and in SUMMARY.md (or is SUMMARY.md),
/// so no page escapes the checks above or the book's table of contents.
#[test]
fn every_page_is_checked_and_listed() {
    let mut files = Vec::new();
    let mut stack = vec![root().join("docs/src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path.strip_prefix(root()).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    let listed: BTreeSet<String> =
        links(page("docs/src/SUMMARY.md")).into_iter().map(|(_, t)| format!("docs/src/{t}")).collect();
    for file in files {
        assert!(PAGES.iter().any(|(n, _)| *n == file), "{file} is not in tests/book.rs's PAGES");
        assert!(file.ends_with("SUMMARY.md") || listed.contains(&file), "{file} is not in SUMMARY.md");
    }
}

/// The extraction itself, on the shapes the pages use.
#[test]
fn commands_are_read_as_a_reader_would_type_them() {
    let text = "```sh\nopbound serve --spec api.yaml \\\n  --shadow   # comment\n```\n\n```console\n$ opbound check api.yaml\napi.yaml: valid[..]\n...\n$ curl x\n```\n\n```text\nopbound demo: not a command\n```\n";
    let got = shown("page.md", text);
    assert!(got[0].is_server());
    let printed =
        Shown { page: "p.md", line: 1, command: "opbound decide --print-gateway nginx".into(), expected: vec![] };
    assert!(!printed.is_server(), "a command that prints and exits is run as a short one");
    let commands: Vec<&str> = got.iter().map(|s| s.command.as_str()).collect();
    assert_eq!(commands, ["opbound serve --spec api.yaml --shadow   # comment", "opbound check api.yaml", "curl x"]);
    assert_eq!(got[0].bare(), "opbound serve --spec api.yaml --shadow");
    assert_eq!(got[0].line, 2);
    assert_eq!(got[1].expected, ["api.yaml: valid[..]", "..."]);
    assert!(output_matches(&got[1].expected, "warning: x\napi.yaml: valid (3 operations)\n"));
    assert!(!output_matches(&got[1].expected, "api.yaml: invalid\n"));
    assert_eq!(split_comment("opbound diff a b  # exit 1").1, Some(" exit 1"));
    let workflow = shown(
        "ci.md",
        "```yaml\nsteps:\n  - run: opbound check api.yaml\n  - run: |\n      opbound diff a b\n# opbound: a comment\n```\n",
    );
    let commands: Vec<&str> = workflow.iter().map(|s| s.command.as_str()).collect();
    assert_eq!(commands, ["opbound check api.yaml", "opbound diff a b"]);
    assert_eq!(split_comment("curl -w '%{http_code} #x'").1, None);
    let invalid =
        Shown { page: "p.md", line: 1, command: "opbound check a.yaml  # exits 1: invalid".into(), expected: vec![] };
    assert_eq!((got[1].expected_exit(), invalid.expected_exit()), (0, 1));
}
