//! Paths that match nothing as written, read the way lenient upstreams read them: a spelling one
//! of them routes to an operation is charged to that operation, not left to route bounds only.

use super::Router;

impl Router {
    /// The operation a path reaches on some common upstream, though not as written: with
    /// `;parameters` cut from its segments (servlet containers), trailing dots and escaped
    /// whitespace trimmed from them (`/a.`, `/a%20`), then with a `.format` suffix cut from the
    /// last one (Rails, Spring's suffix match), and each of these without regard to case
    /// (Express). Runs only for paths that matched nothing, so it costs nothing on the hot path.
    pub fn lookup_lenient(&self, method: &str, path: &str) -> Option<usize> {
        let loose = loosened(path, false);
        let looser = loosened(loose.as_deref().unwrap_or(path), true);
        let forms: [Option<&str>; 3] = [loose.as_deref(), looser.as_deref(), Some(path)];
        if let Some(op) = forms[..2].iter().flatten().find_map(|p| self.lookup_strict(method, p)) {
            return Some(op);
        }
        let folded = self.folded.as_deref()?;
        forms.iter().flatten().find_map(|p| folded.lookup_strict(method, &p.to_ascii_lowercase()))
    }
}

/// A canonical path as lenient upstreams read it: each segment's `;parameters` cut, then dot
/// segments resolved, then trailing dots and escaped whitespace trimmed; with `strip_format`,
/// a `.suffix` cut from the last segment. `None` when that changes nothing.
fn loosened(path: &str, strip_format: bool) -> Option<String> {
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing = false;
    for segment in path.get(1..)?.split('/') {
        let segment = segment.split(';').next().unwrap_or(segment);
        trailing = false;
        match segment {
            "" | "." => trailing = true,
            ".." => {
                segments.pop();
                trailing = true;
            }
            s => {
                let trimmed = trim_loose_end(s);
                if trimmed.is_empty() {
                    trailing = true;
                } else {
                    segments.push(trimmed);
                }
            }
        }
    }
    if strip_format
        && !trailing
        && let Some(last) = segments.last_mut()
        && let Some(dot) = last.rfind('.').filter(|&d| d > 0)
    {
        *last = &last[..dot];
    }
    let mut out = String::with_capacity(path.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    (out != path).then_some(out)
}

/// A segment without the dots and escaped whitespace (`%20`, `%09`, `%0A`..`%0D`) it ends with.
fn trim_loose_end(mut s: &str) -> &str {
    loop {
        if let Some(rest) = s.strip_suffix('.') {
            s = rest;
        } else if s.len() >= 3
            && s.as_bytes()[s.len() - 3] == b'%'
            && matches!(&s[s.len() - 2..], "20" | "09" | "0A" | "0B" | "0C" | "0D")
        {
            s = &s[..s.len() - 3];
        } else {
            return s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::RouterBuilder;

    fn router(routes: &[(&str, &str, usize)]) -> Router {
        let mut b = RouterBuilder::default();
        for (method, path, op) in routes {
            b.add(path, method, *op, format!("{op:04}"));
        }
        b.build().0
    }

    /// Issue 9, item 8: spellings that some upstream routes to an operation reached only route
    /// bounds. Each is now charged to the operation the lenient upstream would run.
    #[test]
    fn lenient_spellings_reach_the_operation_a_lenient_upstream_runs() {
        let r = router(&[
            ("GET", "/api/limited", 0),
            ("GET", "/api/items/{id}", 1),
            ("GET", "/files/{name}.json", 2),
            ("GET", "/Mixed/Case", 3),
        ]);
        for (path, want) in [
            ("/api/limited;x=y", Some(0)),
            ("/api;x=y/limited", Some(0)),
            ("/api/..;/api/limited", Some(0)),
            ("/API/LIMITED", Some(0)),
            ("/Api/Limited/", Some(0)),
            ("/api/limited.", Some(0)),
            ("/api/limited%20", Some(0)),
            ("/api/limited%09", Some(0)),
            ("/api/limited.json", Some(0)),
            ("/API/LIMITED.JSON", Some(0)),
            ("/api/items/7;v=1", Some(1)),
            ("/api/items/7", Some(1)),
            ("/files/a.json", Some(2)),
            ("/mixed/case", Some(3)),
            ("/api/other", None),
            ("/api/limitedx", None),
            ("/", None),
        ] {
            assert_eq!(r.lookup("GET", path), want, "GET {path}");
        }
        assert_eq!(loosened("/api/limited", true), None, "nothing to loosen");
    }
}
