//! The layering of `src/`, read from the source: no file-level import circle, no non-test source
//! file over 450 lines (counting every line, inline tests included), and no module importing
//! from a layer above its own (ARCHITECTURE.md, "Layers import downwards only").
//!
//! A file imports another when its code names an item defined in that file: in a `use` (grouped,
//! nested, over several lines, `pub use`) or in a path written in the code (`crate::…`,
//! `super::…`, `self::…`, a child module's name, or a name a `use` brought in). A path resolves
//! to the deepest module file on it that exists (`a/b/mod.rs` or `a/b.rs`); when that module only
//! re-exports the item (a top-level `use` of the name), on to the file the `use` takes it from.
//! So `crate::engine::Decision` imports `engine/decision.rs`, and a `mod.rs` that re-exports its
//! children makes no circle with them, while a child taking an item `mod.rs` itself defines does.
//! Comments, strings and test code (`#[cfg(test)]` items, files named `*tests*.rs` or declared
//! under `#[cfg(test)]`) are left out: a circle among tests does not tangle the program.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::Path;

/// The most lines a source file that is not a test file may have.
const MAX_LINES: usize = 450;

/// Debt of issue 49, section 2: the import circles `src/server/` has while it is reworked, each
/// as the files of one strongly connected component. The test fails on a circle not listed here
/// and on an entry that no longer matches a circle exactly, so this list can only shrink: when a
/// change breaks or narrows a circle, write what is left (the failure prints it), or remove the
/// entry. Nothing outside `src/server/` may be listed.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// Debt of issue 49, section 2: the files of `src/server/` over [`MAX_LINES`] while it is
/// reworked. The test fails on a file over the limit not listed here and on a listed file that
/// is no longer over it, so this list can only shrink. Nothing outside `src/server/` may be
/// listed.
const KNOWN_OVERSIZE: &[&str] = &[];

/// The layers of the crate, lowest first (ARCHITECTURE.md, "Layers import downwards only"). A
/// top-level module (the first directory or file under `src/`) imports only from the layers below
/// its own, never from its own layer's other modules or from above; every module must be placed.
/// The crate root, `lib.rs`, only declares and re-exports, and stands outside.
const LAYERS: &[&[&str]] = &[
    // Leaves: `std` and other crates only.
    &["choice", "finding", "latency", "numbers", "suggest", "throttle", "trust"],
    &["period"],
    &["spec"],
    &["router"],
    &["policy"],
    &["request"],
    &["engine"],
    &["publish", "store"],
    &["server"],
    &["fuzzing"],
    &["replay"],
    &["cli"],
];

/// The layers of `src/server/`, lowest first (ARCHITECTURE.md, the `server/` entry): a module
/// of the server (its first directory or file under `src/server/`; `mod` is `server/mod.rs`)
/// imports only from the layers below its own, so the request's way through the folders reads
/// upwards and nothing runs back down to up.
const SERVER_LAYERS: &[&[&str]] = &[
    &["buffers"],
    &["facts"],
    &["wire"],
    &["observe", "net"],
    &["upstream"],
    &["body"],
    &["judge"],
    &["proxy", "decide"],
    &["admin", "demo"],
    &["durable_state", "spec_file"],
    &["reload"],
    &["mod"],
];

#[test]
fn no_import_circle() {
    let graph = Graph::read(&sources());
    let circles = graph.circles();
    let mut unknown = String::new();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for circle in &circles {
        let members = circle.members.clone();
        if !KNOWN_CIRCLES.iter().any(|known| same_files(known, &members)) {
            unknown.push_str(&graph.describe(circle));
        }
        found.insert(members);
    }
    let gone: Vec<_> = KNOWN_CIRCLES.iter().filter(|known| !found.iter().any(|f| same_files(known, f))).collect();
    let mut message = String::new();
    if !unknown.is_empty() {
        writeln!(message, "import circles in src/ (break each by moving what both sides use below them):\n{unknown}")
            .unwrap();
    }
    if !gone.is_empty() {
        writeln!(message, "KNOWN_CIRCLES lists circles that are no longer there as written: {gone:?}").unwrap();
        writeln!(message, "the circles found now are:").unwrap();
        for members in &found {
            writeln!(message, "    &{members:?},").unwrap();
        }
    }
    assert!(message.is_empty(), "{message}");
}

#[test]
fn no_source_file_over_the_limit() {
    let files = sources();
    let tests = test_files(&files);
    let mut over = BTreeMap::new();
    for (path, text) in &files {
        let lines = text.lines().count();
        if !tests.contains(path) && lines > MAX_LINES {
            over.insert(path.clone(), lines);
        }
    }
    let mut message = String::new();
    for (path, lines) in &over {
        if !KNOWN_OVERSIZE.contains(&path.as_str()) {
            writeln!(message, "src/{path} has {lines} lines, over {MAX_LINES}: split it by what its parts do").unwrap();
        }
    }
    for known in KNOWN_OVERSIZE {
        if !over.contains_key(*known) {
            writeln!(message, "src/{known} is in KNOWN_OVERSIZE but no longer over {MAX_LINES} lines: remove it")
                .unwrap();
        }
    }
    assert!(message.is_empty(), "{message}");
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let graph = Graph::read(&sources());
    let layer = |module: &str| LAYERS.iter().position(|layer| layer.contains(&module));
    let mut message = String::new();
    let mut unplaced = BTreeSet::new();
    for (from, to, site) in graph.edges() {
        let (a, b) = (top_module(from), top_module(to));
        if a.is_empty() || b.is_empty() || a == b {
            continue;
        }
        match (layer(a), layer(b)) {
            (Some(i), Some(j)) if j < i => {}
            (Some(_), Some(_)) => {
                writeln!(message, "{a} must not import {b}: src/{from}:{} names {}", site.line, site.path).unwrap();
            }
            (None, _) => drop(unplaced.insert(a)),
            (_, None) => drop(unplaced.insert(b)),
        }
    }
    for module in unplaced {
        writeln!(message, "module {module} is in no layer of LAYERS: place it where its imports allow").unwrap();
    }
    assert!(message.is_empty(), "{message}");
}

#[test]
fn server_imports_run_downwards() {
    let graph = Graph::read(&sources());
    let module = |path: &str| -> Option<String> {
        let rest = path.strip_prefix("server/")?;
        let first = rest.split('/').next()?;
        Some(first.strip_suffix(".rs").unwrap_or(first).to_string())
    };
    let layer = |module: &str| SERVER_LAYERS.iter().position(|layer| layer.contains(&module));
    let mut message = String::new();
    let mut unplaced = BTreeSet::new();
    for (from, to, site) in graph.edges() {
        let (Some(a), Some(b)) = (module(from), module(to)) else { continue };
        if a == b {
            continue;
        }
        match (layer(&a), layer(&b)) {
            (Some(i), Some(j)) if j < i => {}
            (Some(_), Some(_)) => {
                writeln!(
                    message,
                    "server::{a} must not import server::{b}: src/{from}:{} names {}",
                    site.line, site.path
                )
                .unwrap();
            }
            (None, _) => drop(unplaced.insert(a)),
            (_, None) => drop(unplaced.insert(b)),
        }
    }
    for module in unplaced {
        writeln!(message, "server::{module} is in no layer of SERVER_LAYERS: place it where its imports allow")
            .unwrap();
    }
    assert!(message.is_empty(), "{message}");
}

/// The debt lists hold `src/server/` alone: everywhere else is already held to the rules.
#[test]
fn the_known_debt_is_only_the_servers() {
    let outside: Vec<&str> = KNOWN_CIRCLES
        .iter()
        .flat_map(|c| c.iter())
        .chain(KNOWN_OVERSIZE)
        .copied()
        .filter(|f| !f.starts_with("server/"))
        .collect();
    assert!(outside.is_empty(), "outside src/server/: {outside:?}");
}

/// The checker itself, on a small crate held in memory: it must find a circle where there is
/// one, through a grouped `use`, a `super::` path and an inline `crate::` path, and must not be
/// fooled by comments, strings or test code.
#[test]
fn the_checker_finds_a_circle_and_only_real_imports() {
    let files = crate_of(&[
        ("lib.rs", "pub mod engine;\npub mod policy;\npub mod spec;\n"),
        ("engine/mod.rs", "mod rate;\nmod quota;\npub use rate::Rate;\n"),
        ("engine/rate.rs", "use super::{\n    quota::{self, Quota as Q},\n};\npub struct Rate;\n"),
        ("engine/quota.rs", "pub struct Quota;\nfn f() -> usize { crate::engine::rate::size() }\n"),
        (
            "policy/mod.rs",
            "// use crate::spec::Model;\n\
             const S: &str = \"crate::spec::Model\";\n\
             const R: &str = r#\"use crate::spec::Model; \"#;\n\
             fn lifetime<'a>(x: &'a str) -> char { '\"' }\n\
             #[cfg(test)]\nmod tests { use crate::spec::Model; }\n\
             #[cfg(test)]\nmod testing;\n",
        ),
        ("policy/testing.rs", "use crate::spec::Model;\n"),
        ("spec/mod.rs", "pub struct Model;\npub(in crate::spec) fn g() { let _ = crate::policy::S; }\n"),
    ]);
    let graph = Graph::read(&files);
    let imports = |from: &str| graph.imports_of(from);
    assert_eq!(imports("engine/rate.rs"), ["engine/quota.rs"]);
    assert_eq!(imports("engine/quota.rs"), ["engine/rate.rs"]);
    assert_eq!(imports("engine/mod.rs"), ["engine/rate.rs"]);
    assert_eq!(imports("policy/mod.rs"), Vec::<String>::new(), "comments, strings and tests import nothing");
    assert_eq!(imports("spec/mod.rs"), ["policy/mod.rs"]);
    assert!(!graph.files.contains_key("policy/testing.rs"), "a module declared under cfg(test) is a test file");

    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0].members, ["engine/quota.rs", "engine/rate.rs"]);
    let described = graph.describe(&circles[0]);
    assert!(described.contains("src/engine/quota.rs -> src/engine/rate.rs -> src/engine/quota.rs"), "{described}");
    assert!(described.contains("src/engine/rate.rs:1 names super::quota"), "{described}");
}

/// Relative paths: a child module named without `self::`, a name brought in by `use` and then
/// used as a path, `super::super::`, and an inline module's own `super`.
#[test]
fn the_checker_resolves_relative_paths_and_aliases() {
    let files = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a/mod.rs", "mod deep;\nmod c;\nfn f() { c::go(); }\nmod inner { fn g() { super::c::go(); } }\n"),
        ("a/c.rs", "pub fn go() {}\n"),
        ("a/deep/mod.rs", "mod x;\n"),
        ("a/deep/x.rs", "use crate::b as other;\nfn h() { super::super::c::go(); other::thing(); }\n"),
        ("b.rs", "pub fn thing() {}\nfn t() { std::mem::drop(1); tokio::spawn(); }\n"),
    ]);
    let graph = Graph::read(&files);
    assert_eq!(graph.imports_of("a/mod.rs"), ["a/c.rs"]);
    assert_eq!(graph.imports_of("a/deep/x.rs"), ["a/c.rs", "b.rs"]);
    assert_eq!(graph.imports_of("b.rs"), Vec::<String>::new(), "other crates are not files of ours");
    assert!(graph.circles().is_empty());
}

/// Re-exports: naming an item through a `mod.rs` that re-exports it imports the file that
/// defines it, so re-exporting children makes no circle; a child taking an item `mod.rs` defines
/// itself, while `mod.rs` re-exports that child, does.
#[test]
fn the_checker_follows_re_exports_to_where_an_item_is_defined() {
    let files = crate_of(&[
        ("lib.rs", "pub mod engine;\npub mod store;\n"),
        ("engine/mod.rs", "mod rate;\nmod table;\npub use rate::Rate;\npub use table::Table;\npub struct Shared;\n"),
        ("engine/rate.rs", "pub struct Rate;\n"),
        ("engine/table.rs", "use super::{Rate, Shared};\npub struct Table(Rate, Shared);\n"),
        ("store/mod.rs", "use crate::engine::{self, Table};\nfn f(_: Table) -> engine::Rate { todo!() }\n"),
    ]);
    let graph = Graph::read(&files);
    assert_eq!(graph.imports_of("store/mod.rs"), ["engine/rate.rs", "engine/table.rs"]);
    assert_eq!(graph.imports_of("engine/table.rs"), ["engine/mod.rs", "engine/rate.rs"]);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0].members, ["engine/mod.rs", "engine/table.rs"]);
}

fn crate_of(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
}

fn same_files(known: &[&str], found: &[String]) -> bool {
    let mut known: Vec<&str> = known.to_vec();
    known.sort_unstable();
    known.len() == found.len() && known.iter().zip(found).all(|(k, f)| *k == f)
}

/// Every `.rs` file under `src/`, by its path relative to `src/` with `/` between parts.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).unwrap();
                let name = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
                out.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    assert!(out.contains_key("lib.rs"), "no src/lib.rs under {}", root.display());
    out
}

/// The first directory or file under `src/`: `engine` for `engine/table/mod.rs`, `latency` for
/// `latency.rs`, empty for `lib.rs`.
fn top_module(file: &str) -> &str {
    match file.split_once('/') {
        Some((first, _)) => first,
        None if file == "lib.rs" || file == "main.rs" => "",
        None => file.trim_end_matches(".rs"),
    }
}

/// The module path of a file: `engine/table/mod.rs` and `engine/table.rs` are `[engine, table]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The test files: those named `*tests*.rs`, those a parent declares under `#[cfg(test)]`, and
/// everything below them.
fn test_files(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    for (path, text) in files {
        let (_, declared) = strip_test_code(&lex(text));
        for name in declared {
            let mut module = module_of(path);
            module.push(name);
            test_modules.insert(module);
        }
    }
    files
        .keys()
        .filter(|path| {
            let module = module_of(path);
            path.rsplit('/').next().unwrap().contains("tests")
                || (1..=module.len()).any(|n| test_modules.contains(&module[..n]))
        })
        .cloned()
        .collect()
}

/// Where a file names another: the line and the path as written.
#[derive(Clone, Debug)]
struct Site {
    line: usize,
    path: String,
}

/// A strongly connected component of more than one file.
#[derive(Debug)]
struct Circle {
    /// Its files, sorted.
    members: Vec<String>,
}

/// The file-level import graph of the crate's non-test files (`main.rs`, a crate of its own, is
/// left out).
struct Graph {
    /// Each file's imports: the file imported and the first place it is named.
    files: BTreeMap<String, BTreeMap<String, Site>>,
}

impl Graph {
    fn read(sources: &BTreeMap<String, String>) -> Graph {
        let tests = test_files(sources);
        let mut scans = BTreeMap::new();
        for (path, text) in sources {
            if path != "main.rs" && !tests.contains(path) {
                scans.insert(path.clone(), scan(text, module_of(path)));
            }
        }
        let mut crate_ = Crate::default();
        for (path, scanned) in &scans {
            crate_.modules.insert(module_of(path), path.clone());
            for inline in &scanned.inline_modules {
                crate_.modules.insert(inline.clone(), path.clone());
            }
            crate_.defined.extend(scanned.defined.iter().cloned());
        }
        // Each `use` made absolute, with what a module's own `use`s (at its top level, where its
        // children and users can name them) bring in.
        let mut resolved: BTreeMap<&String, Vec<(Vec<String>, &Use)>> = BTreeMap::new();
        for (path, scanned) in &scans {
            let mut aliases = Names::new();
            let mut uses = Vec::new();
            for used in &scanned.uses {
                let Some(target) = absolute(&used.module, &used.segments, &crate_.modules, &aliases) else { continue };
                match &used.name {
                    Some(name) => {
                        aliases.insert((used.module.clone(), name.clone()), target.clone());
                        if used.top_level {
                            crate_.exports.insert((used.module.clone(), name.clone()), target.clone());
                        }
                    }
                    None if used.top_level => crate_.globs.entry(used.module.clone()).or_default().push(target.clone()),
                    None => {}
                }
                uses.push((target, used));
            }
            resolved.insert(path, uses);
            crate_.aliases.insert(path.clone(), aliases);
        }
        let mut files = BTreeMap::new();
        for (path, scanned) in &scans {
            let mut imports: BTreeMap<String, Site> = BTreeMap::new();
            let mut add = |target: &[String], site: &Site| {
                if let Some(file) = crate_.defining_file(target, 0)
                    && file != *path
                {
                    imports.entry(file).or_insert_with(|| site.clone());
                }
            };
            for (target, used) in &resolved[path] {
                // `use crate::engine;` names a module, not an item: the paths through it import.
                if used.name.is_none() || !crate_.modules.contains_key(target) {
                    add(target, &used.site);
                }
            }
            let aliases = &crate_.aliases[path];
            for written in &scanned.paths {
                if let Some(target) = absolute(&written.module, &written.segments, &crate_.modules, aliases) {
                    add(&target, &written.site);
                }
            }
            files.insert(path.clone(), imports);
        }
        Graph { files }
    }

    fn imports_of(&self, file: &str) -> Vec<String> {
        self.files.get(file).map(|i| i.keys().cloned().collect()).unwrap_or_default()
    }

    fn edges(&self) -> impl Iterator<Item = (&str, &str, &Site)> {
        self.files.iter().flat_map(|(from, to)| to.iter().map(move |(t, site)| (from.as_str(), t.as_str(), site)))
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<Circle> {
        struct Walk<'g> {
            graph: &'g Graph,
            index: HashMap<&'g str, usize>,
            low: HashMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            found: Vec<Circle>,
        }
        impl<'g> Walk<'g> {
            fn visit(&mut self, v: &'g str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.files[v].keys().map(String::as_str) {
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        self.low.insert(v, self.low[v].min(self.low[w]));
                    } else if self.on_stack.contains(w) {
                        self.low.insert(v, self.low[v].min(self.index[w]));
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut members = Vec::new();
                    loop {
                        let w = self.stack.pop().unwrap();
                        self.on_stack.remove(w);
                        members.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if members.len() > 1 {
                        members.sort();
                        self.found.push(Circle { members });
                    }
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: HashMap::new(),
            low: HashMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for v in self.files.keys() {
            if !walk.index.contains_key(v.as_str()) {
                walk.visit(v);
            }
        }
        walk.found.sort_by(|a, b| a.members.cmp(&b.members));
        walk.found
    }

    /// A circle as a chain of files (the shortest back to its first file), then every import
    /// within it with where it is named.
    fn describe(&self, circle: &Circle) -> String {
        let inside: BTreeSet<&str> = circle.members.iter().map(String::as_str).collect();
        let start = circle.members[0].as_str();
        let mut came_from: HashMap<&str, &str> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut last = start;
        'search: while let Some(v) = queue.pop_front() {
            for w in self.files[v].keys().map(String::as_str).filter(|w| inside.contains(w)) {
                if w == start {
                    last = v;
                    break 'search;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut chain = vec![start];
        let mut at = last;
        while at != start {
            chain.push(at);
            at = came_from[at];
        }
        chain[1..].reverse();
        chain.push(start);
        let mut out = format!("  {}\n", chain.iter().map(|f| format!("src/{f}")).collect::<Vec<_>>().join(" -> "));
        for (from, to, site) in self.edges().filter(|(f, t, _)| inside.contains(f) && inside.contains(t)) {
            writeln!(out, "    src/{from}:{} names {} (src/{to})", site.line, site.path).unwrap();
        }
        out
    }
}

/// Names brought in by `use`, by the module they are brought into, and the absolute paths they
/// stand for.
type Names = HashMap<(Vec<String>, String), Vec<String>>;

/// What resolving a path needs to know of the whole crate.
#[derive(Default)]
struct Crate {
    /// Every module, written as a file or inline, and its file.
    modules: HashMap<Vec<String>, String>,
    /// The items defined at the top level of each module.
    defined: BTreeSet<(Vec<String>, String)>,
    /// The names a module's top-level `use`s bring in, and the absolute paths they stand for.
    exports: Names,
    /// The modules a module's top-level glob `use`s bring everything in from.
    globs: HashMap<Vec<String>, Vec<Vec<String>>>,
    /// Every name a file's `use`s bring in, by the module it is written in.
    aliases: HashMap<String, Names>,
}

impl Crate {
    /// The file that defines what an absolute path names: the deepest module on the path, or,
    /// when that module only brings the item in with a `use` (a re-export), the file that module
    /// takes it from. `None` for a path outside the crate.
    fn defining_file(&self, path: &[String], hops: usize) -> Option<String> {
        let n = (0..=path.len()).rev().find(|n| self.modules.contains_key(&path[..*n]))?;
        let (module, rest) = path.split_at(n);
        let here = self.modules[module].clone();
        let Some(name) = rest.first() else { return Some(here) };
        if hops > 16 || self.defined.contains(&(module.to_vec(), name.clone())) {
            return Some(here);
        }
        if let Some(target) = self.exports.get(&(module.to_vec(), name.clone())) {
            let mut through = target.clone();
            through.extend(rest[1..].iter().cloned());
            return self.defining_file(&through, hops + 1);
        }
        for glob in self.globs.get(module).into_iter().flatten() {
            if self.defined.contains(&(glob.clone(), name.clone()))
                || self.exports.contains_key(&(glob.clone(), name.clone()))
            {
                let mut through = glob.clone();
                through.extend(rest.iter().cloned());
                return self.defining_file(&through, hops + 1);
            }
        }
        Some(here)
    }
}

/// A path written in `module`, made absolute from the crate root; `None` when it starts in
/// another crate.
fn absolute(
    module: &[String],
    segments: &[String],
    modules: &HashMap<Vec<String>, String>,
    aliases: &Names,
) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut base = module.to_vec();
            base.pop();
            let mut rest = rest;
            while let Some(("super", more)) = rest.split_first().map(|(s, m)| (s.as_str(), m)) {
                base.pop();
                rest = more;
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if modules.contains_key(&child) {
                child
            } else {
                // A name a `use` of this module (or an enclosing one) brought in.
                let found =
                    (0..=module.len()).rev().find_map(|n| aliases.get(&(module[..n].to_vec(), first.clone())))?;
                found.clone()
            }
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// A `use` leaf: the path it names, in the module it is written in, and the name it brings in
/// (none for a glob).
struct Use {
    module: Vec<String>,
    segments: Vec<String>,
    name: Option<String>,
    /// Written at the module's top level, not in a function: what it brings in is the module's.
    top_level: bool,
    site: Site,
}

/// A path written in the code (two segments or more).
struct Written {
    module: Vec<String>,
    segments: Vec<String>,
    site: Site,
}

/// What one file names, before resolving.
#[derive(Default)]
struct Scanned {
    uses: Vec<Use>,
    paths: Vec<Written>,
    inline_modules: Vec<Vec<String>>,
    /// The items defined at a module's top level: functions, types, traits, constants, statics.
    defined: Vec<(Vec<String>, String)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Ident(String),
    /// `::`
    Colons,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    line: usize,
}

impl Token {
    fn is(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }
    fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(s) => Some(s),
            _ => None,
        }
    }
}

/// Identifiers, `::` and punctuation of Rust source, with comments, strings, characters, numbers
/// and lifetimes left out.
fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips a quoted string whose opening quote is at `i`, with `hashes` for a raw one.
    let string = |mut i: usize, hashes: Option<usize>, line: &mut usize| -> usize {
        i += 1;
        while i < c.len() {
            match c[i] {
                '\n' => *line += 1,
                '\\' if hashes.is_none() => {
                    if at(i + 1) == '\n' {
                        *line += 1;
                    }
                    i += 1;
                }
                '"' => {
                    let n = hashes.unwrap_or(0);
                    if (1..=n).all(|k| at(i + k) == '#') {
                        return i + 1 + n;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = string(i, None, &mut line);
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && (at(i) == '"' || at(i) == '#') {
                let mut hashes = 0;
                while at(i + hashes) == '#' {
                    hashes += 1;
                }
                if at(i + hashes) == '"' {
                    i = string(i + hashes, Some(hashes), &mut line);
                    continue;
                }
                if word == "r" && hashes == 1 {
                    // A raw identifier, `r#type`: the word after the hash is the identifier.
                    i += 1;
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = string(i, None, &mut line);
            } else if word == "b" && at(i) == '\'' {
                i += if at(i + 1) == '\\' { 4 } else { 3 };
                while at(i - 1) != '\'' {
                    i += 1;
                }
            } else {
                out.push(Token { kind: Kind::Ident(word), line });
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token { kind: Kind::Colons, line });
            i += 2;
        } else {
            out.push(Token { kind: Kind::Punct(ch), line });
            i += 1;
        }
    }
    out
}

/// The tokens with every `#[cfg(test)]` item left out, and the names of the modules declared
/// under `#[cfg(test)]` in other files (`#[cfg(test)] mod tests;`).
fn strip_test_code(tokens: &[Token]) -> (Vec<Token>, Vec<String>) {
    let is_cfg_test = |i: usize| {
        let words = ["#", "[", "cfg", "(", "test", ")", "]"];
        words.iter().enumerate().all(|(k, w)| {
            tokens.get(i + k).is_some_and(|t| match &t.kind {
                Kind::Ident(s) => s == w,
                Kind::Punct(p) => w.len() == 1 && w.starts_with(*p),
                Kind::Colons => false,
            })
        })
    };
    // The index just past the group opened at `i`.
    let past_group = |mut i: usize| {
        let mut depth = 0usize;
        while i < tokens.len() {
            if tokens[i].is('(') || tokens[i].is('[') || tokens[i].is('{') {
                depth += 1;
            } else if tokens[i].is(')') || tokens[i].is(']') || tokens[i].is('}') {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            i += 1;
        }
        i
    };
    let mut kept = Vec::new();
    let mut declared = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !is_cfg_test(i) {
            kept.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        while i < tokens.len() && tokens[i].is('#') {
            i = past_group(i + 1);
        }
        let item = i;
        let mut depth = 0usize;
        while i < tokens.len() {
            let t = &tokens[i];
            if t.is('(') || t.is('[') {
                depth += 1;
            } else if t.is(')') || t.is(']') {
                depth = depth.saturating_sub(1);
            } else if depth == 0 && t.is(';') {
                i += 1;
                break;
            } else if depth == 0 && t.is('{') {
                i = past_group(i);
                break;
            } else if depth == 0 && t.is('}') {
                break;
            }
            i += 1;
        }
        if let [.., module, name, end] = &tokens[item..i]
            && module.ident() == Some("mod")
            && end.is(';')
        {
            declared.extend(name.ident().map(str::to_string));
        }
    }
    (kept, declared)
}

/// Everything a file's non-test code names, with the module each name is written in.
fn scan(text: &str, file_module: Vec<String>) -> Scanned {
    let (tokens, _) = strip_test_code(&lex(text));
    let mut scanned = Scanned::default();
    // The modules written inline that enclose the position, with the brace depth inside each.
    let mut open: Vec<(Vec<String>, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let module = open.last().map_or(&file_module, |(m, _)| m).clone();
        let top_level = depth == open.last().map_or(0, |(_, d)| *d);
        let t = &tokens[i];
        const ITEMS: [&str; 8] = ["fn", "struct", "enum", "union", "trait", "type", "const", "static"];
        if top_level
            && t.ident().is_some_and(|w| ITEMS.contains(&w))
            && let Some(name) = tokens.get(i + 1).and_then(Token::ident)
        {
            scanned.defined.push((module.clone(), name.to_string()));
        }
        if t.is('{') {
            depth += 1;
        } else if t.is('}') {
            if open.last().is_some_and(|(_, d)| *d == depth) {
                open.pop();
            }
            depth = depth.saturating_sub(1);
        } else if t.ident() == Some("mod")
            && let Some(name) = tokens.get(i + 1).and_then(Token::ident)
            && tokens.get(i + 2).is_some_and(|t| t.is('{'))
        {
            let mut inner = module.clone();
            inner.push(name.to_string());
            scanned.inline_modules.push(inner.clone());
            depth += 1;
            open.push((inner, depth));
            i += 3;
            continue;
        } else if t.ident() == Some("use") {
            let mut leaves = Vec::new();
            i = use_tree(&tokens, i + 1, Vec::new(), &mut leaves);
            for (segments, name) in leaves {
                let site = Site { line: t.line, path: segments.join("::") };
                scanned.uses.push(Use { module: module.clone(), segments, name, top_level, site });
            }
            continue;
        } else if t.ident().is_some()
            && tokens.get(i + 1).is_some_and(|n| n.kind == Kind::Colons)
            && !(i > 0 && tokens[i - 1].kind == Kind::Colons)
            && !restricts_visibility(&tokens, i)
        {
            let mut segments = Vec::new();
            while let Some(word) = tokens.get(i).and_then(Token::ident) {
                segments.push(word.to_string());
                if tokens.get(i + 1).is_some_and(|n| n.kind == Kind::Colons)
                    && tokens.get(i + 2).and_then(Token::ident).is_some()
                {
                    i += 2;
                } else {
                    break;
                }
            }
            let site = Site { line: t.line, path: segments.join("::") };
            scanned.paths.push(Written { module, segments, site });
        }
        i += 1;
    }
    scanned
}

/// Whether the path starting at `i` is the `crate::x` of `pub(in crate::x)`, which names no item.
fn restricts_visibility(tokens: &[Token], i: usize) -> bool {
    i >= 3 && tokens[i - 1].ident() == Some("in") && tokens[i - 2].is('(') && tokens[i - 3].ident() == Some("pub")
}

/// Reads the `use` tree starting at `i` below `prefix` into `leaves` (each a path and the name it
/// brings in; none for a glob), and returns the index past it.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: Vec<String>,
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut path = prefix;
    let leaf = |mut path: Vec<String>, name: Option<String>, leaves: &mut Vec<_>| {
        if path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        let name = name.or_else(|| path.last().cloned());
        if !path.is_empty() {
            leaves.push((path, name));
        }
    };
    while let Some(t) = tokens.get(i) {
        match &t.kind {
            Kind::Colons => i += 1,
            Kind::Ident(word) if word == "as" => {
                let name = tokens.get(i + 1).and_then(Token::ident).map(str::to_string);
                leaf(path, name, leaves);
                return i + 2;
            }
            Kind::Ident(word) => {
                path.push(word.clone());
                i += 1;
            }
            Kind::Punct('{') => {
                i += 1;
                while let Some(t) = tokens.get(i) {
                    if t.is('}') {
                        return i + 1;
                    } else if t.is(',') {
                        i += 1;
                    } else {
                        i = use_tree(tokens, i, path.clone(), leaves);
                    }
                }
                return i;
            }
            Kind::Punct('*') => {
                leaves.push((path, None));
                return i + 1;
            }
            Kind::Punct(_) => {
                leaf(path, None, leaves);
                return i;
            }
        }
    }
    i
}
