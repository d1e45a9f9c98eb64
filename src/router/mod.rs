//! Method and canonical path to operation, with matchit doing the tree search.

pub mod canonical;
mod lenient;
pub mod template;

use std::collections::HashMap;

use template::{Piece, Segment};

/// Routes `(method, canonical path)` to an operation index.
#[derive(Debug)]
pub struct Router {
    tree: matchit::Router<usize>,
    entries: Vec<Entry>,
    /// The same routes with their literals in lower case, for upstreams that route without
    /// regard to case (Express by default, ASP.NET, Spring with its option set).
    folded: Option<Box<Router>>,
}

/// Everything matchit files under one route key.
#[derive(Debug, Default)]
struct Entry {
    /// Most specific first.
    candidates: Vec<Candidate>,
}

/// One shape of path under a route key: the segments matchit cannot check itself, and the
/// operation for each method.
#[derive(Debug)]
struct Candidate {
    matchers: Vec<(usize, Segment)>,
    methods: Vec<(String, usize)>,
}

impl Candidate {
    fn operation(&self, method: &str) -> Option<usize> {
        let find = |m: &str| self.methods.iter().find(|(k, _)| k == m).map(|(_, op)| *op);
        find(method).or_else(|| if method == "HEAD" { find("GET") } else { None })
    }

    fn accepts(&self, path: &str) -> bool {
        if self.matchers.is_empty() {
            return true;
        }
        let mut segments = path[1..].split('/');
        let mut at = 0;
        for (index, pattern) in &self.matchers {
            let Some(segment) = segments.nth(index - at) else {
                return false;
            };
            at = index + 1;
            if !pattern.matches(segment) {
                return false;
            }
        }
        true
    }
}

impl Router {
    /// The operation for a method and a canonical path. `/x/` falls back to `/x`; HEAD falls
    /// back to GET. A path that matches nothing as written is tried as lenient upstreams read it
    /// (see [`Router::lookup_lenient`]), so a spelling one of them would route to an operation is
    /// charged to that operation instead of passing with route bounds only.
    pub fn lookup(&self, method: &str, path: &str) -> Option<usize> {
        self.lookup_strict(method, path).or_else(|| self.lookup_lenient(method, path))
    }

    /// The operation for a path exactly as written (a trailing slash aside).
    pub fn lookup_strict(&self, method: &str, path: &str) -> Option<usize> {
        self.lookup_exact(method, path).or_else(|| {
            let trimmed = path.strip_suffix('/').filter(|t| !t.is_empty())?;
            self.lookup_exact(method, trimmed)
        })
    }

    pub(crate) fn lookup_exact(&self, method: &str, path: &str) -> Option<usize> {
        let found = self.tree.at(path).ok()?;
        let entry = &self.entries[*found.value];
        entry.candidates.iter().filter(|c| c.accepts(path)).find_map(|c| c.operation(method))
    }
}

/// An operation that gets no requests of its own, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unroutable {
    /// The same method on a path of the same shape (`path`, as `kept` wrote it) is taken by `kept`.
    Clash {
        /// The operation that gets no requests, by the index it was added with
        /// (`Policy::operations`).
        dropped: usize,
        /// The operation that gets them instead, by the index it was added with.
        kept: usize,
        /// The full path template as `kept` wrote it.
        path: String,
    },
    /// The template could not be read.
    Malformed {
        /// The operation, by the index it was added with (`Policy::operations`).
        operation: usize,
        /// Why, in words (a `{` without its `}`, say).
        reason: String,
    },
    /// matchit refused the route.
    Conflict {
        /// The operation, by the index it was added with (`Policy::operations`).
        operation: usize,
        /// The route already placed that this one conflicts with, as matchit spells it
        /// (parameters named by position, `{p2}`).
        with: String,
    },
}

/// Collects routes, then builds a router whose result does not depend on the order they came in.
#[derive(Default)]
pub struct RouterBuilder {
    routes: Vec<Route>,
}

#[derive(Clone)]
struct Route {
    path: String,
    method: String,
    operation: usize,
    /// Ties between clashing routes go to the smallest rank.
    rank: String,
}

impl RouterBuilder {
    /// Adds a full path template (base path joined) for a method and operation. `rank` breaks
    /// ties when two operations claim the same method and path shape: the smaller wins.
    pub fn add(&mut self, path: &str, method: &str, operation: usize, rank: String) {
        self.routes.push(Route { path: path.to_string(), method: method.to_string(), operation, rank });
    }

    /// Builds the router, and lists the operations that get no requests of their own.
    pub fn build(self) -> (Router, Vec<Unroutable>) {
        let folded: Vec<Route> =
            self.routes.iter().map(|r| Route { path: r.path.to_ascii_lowercase(), ..r.clone() }).collect();
        let (mut router, problems) = self.build_tree();
        // Templates that differ only in case clash when folded; the folded tree is a fallback for
        // misses, so its own clashes are nobody's concern.
        let (folded, _) = RouterBuilder { routes: folded }.build_tree();
        router.folded = Some(Box::new(folded));
        (router, problems)
    }

    fn build_tree(mut self) -> (Router, Vec<Unroutable>) {
        let mut problems = Vec::new();
        // Shape: the segments with parameter names erased. Same shape + same method = a clash.
        // Each shape with the routes (indices) that claim it, one per method.
        let mut shapes: Vec<(Vec<Segment>, Vec<usize>)> = Vec::new();
        let mut shape_index: HashMap<Vec<Segment>, usize> = HashMap::new();
        self.routes.sort_by(|a, b| (&a.path, &a.method, &a.rank).cmp(&(&b.path, &b.method, &b.rank)));
        for (r, route) in self.routes.iter().enumerate() {
            let segments = match template::parse(&route.path) {
                Ok(s) => s,
                Err(e) => {
                    problems.push(Unroutable::Malformed { operation: route.operation, reason: e.to_string() });
                    continue;
                }
            };
            let i = *shape_index.entry(segments.clone()).or_insert_with(|| {
                shapes.push((segments, Vec::new()));
                shapes.len() - 1
            });
            let claims = &mut shapes[i].1;
            match claims.iter_mut().find(|c| self.routes[**c].method == route.method) {
                None => claims.push(r),
                Some(slot) if self.routes[*slot].operation == route.operation => {}
                Some(slot) => {
                    let held = &self.routes[*slot];
                    let (kept, dropped) = if route.rank < held.rank {
                        *slot = r;
                        (route, held)
                    } else {
                        (held, route)
                    };
                    problems.push(Unroutable::Clash {
                        dropped: dropped.operation,
                        kept: kept.operation,
                        path: kept.path.clone(),
                    });
                }
            }
        }

        // Insert shapes in a fixed order so that which one matchit prefers never depends on the
        // spec's key order.
        shapes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut tree = matchit::Router::new();
        let mut entries: Vec<Entry> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        for (segments, methods) in shapes {
            let methods: Vec<(String, usize)> =
                methods.into_iter().map(|r| (self.routes[r].method.clone(), self.routes[r].operation)).collect();
            let (key, matchers) = route_key(&segments, false);
            let placed = place(&mut tree, &mut entries, &mut by_key, key, matchers).or_else(|_| {
                let (key, matchers) = route_key(&segments, true);
                place(&mut tree, &mut entries, &mut by_key, key, matchers)
            });
            match placed {
                Ok((entry, matchers)) => entries[entry].candidates.push(Candidate { matchers, methods }),
                Err(Conflict { with }) => {
                    for (_, op) in methods {
                        problems.push(Unroutable::Conflict { operation: op, with: with.clone() });
                    }
                }
            }
        }
        for entry in &mut entries {
            // Candidates checked by segment patterns go before the plain one; more literal text
            // first.
            entry.candidates.sort_by_key(|c| {
                let literal: usize = c.matchers.iter().map(|(_, s)| s.literal_len()).sum();
                (c.matchers.is_empty(), std::cmp::Reverse(literal))
            });
        }
        problems.sort_by_key(|p| match p {
            Unroutable::Clash { dropped, .. } => *dropped,
            Unroutable::Malformed { operation, .. } | Unroutable::Conflict { operation, .. } => *operation,
        });
        (Router { tree, entries, folded: None }, problems)
    }
}

/// A route that cannot share the tree with one already in it.
struct Conflict {
    /// The route matchit says it conflicts with (or why matchit refused it).
    with: String,
}

/// Finds or makes the entry for a key; `Err` carries the route matchit says it conflicts with.
fn place(
    tree: &mut matchit::Router<usize>,
    entries: &mut Vec<Entry>,
    by_key: &mut HashMap<String, usize>,
    key: String,
    matchers: Vec<(usize, Segment)>,
) -> Result<(usize, Vec<(usize, Segment)>), Conflict> {
    if let Some(&entry) = by_key.get(&key) {
        return Ok((entry, matchers));
    }
    match tree.insert(key.clone(), entries.len()) {
        Ok(()) => {
            entries.push(Entry::default());
            by_key.insert(key, entries.len() - 1);
            Ok((entries.len() - 1, matchers))
        }
        Err(matchit::InsertError::Conflict { with }) => Err(Conflict { with: unescape_key(&with) }),
        Err(e) => Err(Conflict { with: e.to_string() }),
    }
}

/// The matchit key for a shape. Parameters are named by position (`p2`), so `/pets/{petId}` and
/// `/pets/{id}/photos` share a prefix. A segment matchit cannot express (several parameters), or
/// any parameter segment when `standalone` is set, becomes a whole-segment parameter checked
/// afterwards by its own pattern.
fn route_key(segments: &[Segment], standalone: bool) -> (String, Vec<(usize, Segment)>) {
    let mut key = String::new();
    let mut matchers = Vec::new();
    if segments.is_empty() {
        key.push('/');
    }
    for (i, segment) in segments.iter().enumerate() {
        key.push('/');
        let params = segment.params();
        if params == 0 {
            for piece in &segment.0 {
                if let Piece::Literal(l) = piece {
                    escape_into(&mut key, l);
                }
            }
        } else if params == 1 && !standalone {
            for piece in &segment.0 {
                match piece {
                    Piece::Literal(l) => escape_into(&mut key, l),
                    Piece::Param => key.push_str(&format!("{{p{i}}}")),
                }
            }
        } else {
            key.push_str(&format!("{{p{i}}}"));
            if segment.0 != [Piece::Param] {
                matchers.push((i, segment.clone()));
            }
        }
    }
    (key, matchers)
}

fn escape_into(key: &mut String, literal: &str) {
    for c in literal.chars() {
        match c {
            '{' => key.push_str("{{"),
            '}' => key.push_str("}}"),
            c => key.push(c),
        }
    }
}

fn unescape_key(key: &str) -> String {
    key.replace("{{", "{").replace("}}", "}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &str, usize)]) -> (Router, Vec<Unroutable>) {
        let mut b = RouterBuilder::default();
        for (method, path, op) in routes {
            b.add(path, method, *op, format!("{op:04}"));
        }
        b.build()
    }

    #[test]
    fn hazards_route_as_expected() {
        let (r, problems) = router(&[
            ("GET", "/pets/{petId}", 0),
            ("GET", "/pets/{id}/photos", 1),
            ("GET", "/pets/mine", 2),
            ("GET", "/files/{name}.json", 3),
            ("GET", "/files/{name}", 4),
            ("POST", "/ops/{name}:cancel", 5),
            ("GET", "/compare/{base}...{head}", 6),
            ("GET", "/compare/{ref}", 7),
            ("GET", "/x", 8),
            ("GET", "/k8s/", 9),
            ("GET", "/k8s", 10),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        for (method, path, want) in [
            ("GET", "/pets/42", Some(0)),
            ("GET", "/pets/42/photos", Some(1)),
            ("GET", "/pets/mine", Some(2)),
            ("HEAD", "/pets/mine", Some(2)),
            ("POST", "/pets/mine", None),
            ("GET", "/files/a.json", Some(3)),
            ("GET", "/files/a.xml", Some(4)),
            ("POST", "/ops/o1:cancel", Some(5)),
            ("POST", "/ops/o1", None),
            ("GET", "/compare/main...dev", Some(6)),
            ("GET", "/compare/main", Some(7)),
            ("GET", "/x/", Some(8)),
            ("GET", "/k8s/", Some(9)),
            ("GET", "/k8s", Some(10)),
            ("GET", "/nothing", None),
        ] {
            assert_eq!(r.lookup(method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn clashes_are_reported_and_resolved_by_rank_not_order() {
        for order in [[0, 1], [1, 0]] {
            let all = [("GET", "/pets/{id}", 0), ("GET", "/pets/{petId}", 1)];
            let (r, problems) = router(&[all[order[0]], all[order[1]]]);
            assert_eq!(r.lookup("GET", "/pets/1"), Some(0));
            assert_eq!(problems, [Unroutable::Clash { dropped: 1, kept: 0, path: "/pets/{id}".into() }]);
        }
    }

    #[test]
    fn prefix_and_suffix_in_one_position_both_route() {
        let (r, problems) = router(&[("GET", "/a/{x}.json", 0), ("GET", "/a/v{y}", 1)]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(r.lookup("GET", "/a/1.json"), Some(0));
        assert_eq!(r.lookup("GET", "/a/v2"), Some(1));
        assert_eq!(r.lookup("GET", "/a/zz"), None);
    }
}
