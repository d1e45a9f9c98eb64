//! `opbound explain --spec SPEC METHOD TARGET [-H 'Name: value']... [--peer IP] [--json]` (or
//! `opbound explain SPEC METHOD TARGET ...`)

use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::exit;
use super::failure::Failure;
use super::specs::{SpecOptions, load_or_report};
use crate::engine::{Clock, Counter, KeyTable, Rate};
use crate::policy::{Bound, Missing, Per, Policy};

/// Any instant will do for a fresh counter; one well past zero keeps window arithmetic ordinary.
const FRESH_NOW: u64 = 1_000_000_000_000_000_000;
use crate::request::{self, Given, Identity, Key, WithBody};
use crate::router::canonical::{EscapedSlashes, canonical_path};

#[derive(clap::Args)]
#[command(
    override_usage = "opbound explain [OPTIONS] --spec <SPEC> <METHOD> <TARGET>\n       opbound explain [OPTIONS] <SPEC> <METHOD> <TARGET>"
)]
pub(super) struct Args {
    /// The spec file (JSON or YAML). It may also be given without --spec, before METHOD.
    #[arg(long = "spec", value_name = "SPEC", display_order = 0)]
    spec_file: Option<PathBuf>,
    /// The request method, e.g. GET.
    #[arg(value_name = "METHOD")]
    first: String,
    /// The request target: the path as sent, base path included, with an optional query
    /// (/v1/pets?limit=5), or an absolute http(s) URL whose path and query are taken.
    #[arg(value_name = "TARGET")]
    second: String,
    /// Without --spec, the words are SPEC METHOD TARGET and this is the target: clap cannot
    /// make a leading positional optional, so the words are read by position here instead.
    #[arg(hide = true)]
    third: Option<String>,
    /// A request header, as 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The request body, for bounds keyed on it or costed from it (per: json:/model,
    /// cost-from: json:/max_tokens).
    #[arg(long, value_name = "BODY")]
    body: Option<String>,
    /// The client address.
    #[arg(long, default_value = "192.0.2.1", value_name = "IP")]
    peer: IpAddr,
    /// The signed-in user, as the server would resolve it.
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// The caller's org.
    #[arg(long, value_name = "ID")]
    org: Option<String>,
    /// A role the caller holds (repeatable).
    #[arg(long = "role", value_name = "ROLE")]
    roles: Vec<String>,
    /// What a `%2F` or `%5C` in the path gets, as the server would be told: reject, unescape
    /// or keep.
    #[arg(long, default_value = "reject", value_name = "ACTION")]
    escaped_slashes: EscapedSlashes,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    spec: SpecOptions,
}

impl Args {
    /// The spec, the method and the target, from `--spec SPEC METHOD TARGET` or
    /// `SPEC METHOD TARGET`.
    fn words(&self) -> Result<(PathBuf, &str, &str), WordsError> {
        match (&self.spec_file, &self.third) {
            (Some(spec), None) => Ok((spec.clone(), &self.first, &self.second)),
            (None, Some(target)) => Ok((PathBuf::from(&self.first), &self.second, target)),
            (None, None) => Err(WordsError::NoSpec(self.first.clone(), self.second.clone())),
            (Some(_), Some(third)) => {
                Err(WordsError::ThreeWords(self.first.clone(), self.second.clone(), third.clone()))
            }
        }
    }
}

/// Why `explain`'s words name no request.
#[derive(Debug, thiserror::Error)]
enum WordsError {
    /// Two words and no `--spec`.
    #[error("explain needs a spec: opbound explain --spec SPEC {0} {1}")]
    NoSpec(String, String),
    /// `--spec` and three words.
    #[error("with --spec, give only METHOD and TARGET, not three words ({0} {1} {2})")]
    ThreeWords(String, String, String),
}

/// Why a target names no path.
#[derive(Debug, thiserror::Error)]
enum TargetError {
    /// A URL without a host.
    #[error("target {0} has no host; write a URL like https://api.example/v1/pets")]
    NoHost(String),
    /// A URL of another scheme.
    #[error("target {0} is neither a path (/v1/pets) nor an http:// or https:// URL")]
    NotHttp(String),
}

/// The path and query a target stands for: as written (`/v1/pets?limit=5`), or taken from an
/// absolute http(s) URL as a client sending it would (the fragment is never sent).
fn path_and_query(target: &str) -> Result<(&str, Option<&str>), TargetError> {
    let scheme_end = target.find("://").filter(|&i| {
        let scheme = &target[..i];
        scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
    });
    let rest = match scheme_end {
        Some(i) => {
            let after = &target[i + 3..];
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            if end == 0 {
                return Err(TargetError::NoHost(target.to_string()));
            }
            let rest = &after[end..];
            let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
            // `https://api.example` and `https://api.example?x=1` ask for `/`.
            if rest.is_empty() || rest.starts_with('?') {
                return Ok(("/", rest.strip_prefix('?')));
            }
            rest
        }
        None if target.contains("://") => {
            return Err(TargetError::NotHttp(target.to_string()));
        }
        None => target,
    };
    Ok(match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    })
}

/// The methods some operation answers at `path`, in the usual order of HTTP methods, then any
/// others by name.
fn methods_at(policy: &Policy, path: &str) -> Vec<String> {
    const ORDER: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY"];
    let mut methods: Vec<&str> = Vec::new();
    for op in &policy.operations {
        if !methods.contains(&op.method.as_str()) && policy.route(&op.method, path).is_some() {
            methods.push(&op.method);
        }
    }
    methods.sort_by_key(|m| (ORDER.iter().position(|o| o == m).unwrap_or(ORDER.len()), *m));
    methods.into_iter().map(str::to_string).collect()
}

pub(super) fn run(args: Args) -> Result<u8, Failure> {
    let (spec_file, method, target) = args.words().map_err(|e| Failure::usage(e.to_string()))?;
    let mut headers = Vec::new();
    for h in &args.headers {
        let Some((name, value)) = h.split_once(':') else {
            return Err(Failure::usage(format!("header {h:?} must be written as 'Name: value'")));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().as_bytes().to_vec()));
    }
    let (raw_path, query) = path_and_query(target).map_err(|e| Failure::invalid(e.to_string()))?;
    let query = query.map(str::to_string);
    let loaded = load_or_report(&spec_file, &args.spec.options(false)?)?;
    let policy = &loaded.policy;
    let method = method.to_ascii_uppercase();
    let path =
        canonical_path(raw_path, args.escaped_slashes).map_err(|e| Failure::invalid(e.to_string()))?.into_owned();
    let given = Given { address: args.peer, headers, query };
    let facts = WithBody { facts: &given, body: args.body.as_deref().map(str::as_bytes) };
    let identity = Identity { user: args.user.clone(), org: args.org.clone(), roles: args.roles.clone() };
    let operation = policy.route(&method, &path);
    let credentials = operation
        .map(|op| policy.operations[op].credentials.as_slice())
        .unwrap_or(&[crate::policy::Credential::Authorization]);

    let applying: Vec<_> = policy.bounds_for(operation).collect();
    let written = loaded.written_at(&applying.iter().map(|&b| policy.bounds[b].pointer.as_str()).collect::<Vec<_>>());
    let bounds: Vec<Value> = applying
        .iter()
        .zip(written)
        .map(|(&b, written)| {
            let mut out = explain_bound(&policy.bounds[b], &facts, &identity, credentials);
            if let Some(at) = written {
                out["written_by"] = json!(at);
            }
            out
        })
        .collect();
    let op = operation.map(|o| &policy.operations[o]);
    let methods = methods_at(policy, &path);
    if args.json {
        let out = json!({
            "method": method,
            "path": path,
            "operation": op.map(|o| o.id.clone()),
            "template": op.map(|o| o.template.clone()),
            "methods": methods,
            "bounds": bounds,
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("json values serialize"));
        return Ok(exit::OK);
    }
    outln!("request:   {method} {target}");
    outln!("path:      {path}");
    match op {
        Some(o) => outln!("operation: {} ({} {})", o.id, o.method, o.template),
        None if !methods.is_empty() => outln!(
            "operation: none (no {method} operation at this path, which has {}; route bounds still apply)",
            methods.join(", ")
        ),
        None => outln!("operation: none (no operation matches; route bounds still apply)"),
    }
    if bounds.is_empty() {
        outln!("bounds:    none");
    } else {
        outln!("bounds:");
        let text = |b: &Value, k: &str| b[k].as_str().unwrap_or("").to_string();
        let rows: Vec<[String; 3]> = bounds
            .iter()
            .map(|b| {
                let mut what = text(b, "description");
                if let Some(a) = b["audience"].as_str() {
                    what = format!("{what}, for {a}");
                }
                if let Some(action) = b["written_by"].as_str() {
                    what = format!("{what} (from {action})");
                }
                let detail = match text(b, "status").as_str() {
                    "counts" if b["this_period"].is_object() => format!(
                        "counts {}; fresh: admits, {} of {} left; this period {} to {}",
                        text(b, "key"),
                        b["fresh"]["remaining"],
                        b["fresh"]["limit"],
                        b["this_period"]["start"].as_str().unwrap_or(""),
                        b["this_period"]["end"].as_str().unwrap_or(""),
                    ),
                    "counts" => format!(
                        "counts {}; fresh: admits, {} of {} left",
                        text(b, "key"),
                        b["fresh"]["remaining"],
                        b["fresh"]["limit"]
                    ),
                    status => format!("{status}: {}", text(b, "reason")),
                };
                [text(b, "id"), what, detail]
            })
            .collect();
        let w0 = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
        let w1 = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0);
        for [id, what, detail] in rows {
            outln!("  {id:w0$}  {what:w1$}  {detail}");
        }
    }
    Ok(exit::OK)
}

/// What a bound does with this request: counts it under a key, skips it, or rejects it.
fn explain_bound(
    bound: &Bound,
    facts: &WithBody<'_, Given>,
    identity: &Identity,
    credentials: &[crate::policy::Credential],
) -> Value {
    let def = &bound.def;
    let base = json!({
        "id": bound.id,
        "per": def.per.to_string(),
        "limit": def.limit.get(),
        "window": def.algorithm.window().map(|w| w.to_string()),
        "algorithm": def.algorithm.name(),
        "description": def.describe(),
        "audience": def.audience(),
    });
    let mut out = base;
    if let Some(periods) = def.algorithm.periods() {
        out["period"] = json!(periods.period().to_string());
    }
    let set = |out: &mut Value, status: &str, key: Option<String>, reason: Option<String>| {
        out["status"] = json!(status);
        out["key"] = json!(key);
        out["reason"] = json!(reason);
    };
    if !def.applies_to.admits(identity.authenticated(), &identity.roles) {
        set(&mut out, "skipped", None, Some("its applies-to does not match this caller".to_string()));
        return out;
    }
    let what = request::missing(&def.per);
    match request::key(&def.per, facts, Some(identity), credentials) {
        Key::Present(value) => {
            let shown = match &def.per {
                Per::Route => "route (one counter for everybody)".to_string(),
                Per::Address => address_label(facts.facts.address),
                Per::Parts(parts) => {
                    let each: Vec<String> = parts
                        .iter()
                        .zip(request::parts_of(&value))
                        .map(|(per, value)| match per {
                            Per::Address => address_label(facts.facts.address),
                            per => format!("{per} = {}", String::from_utf8_lossy(value)),
                        })
                        .collect();
                    each.join(", ")
                }
                per => format!("{per} = {}", String::from_utf8_lossy(&value)),
            };
            set(&mut out, "counts", Some(shown), None);
            // What the bound answers on a fresh counter: the first request's verdict. A quota's
            // period depends on the date, so it is explained for now.
            let now = match def.algorithm.periods() {
                Some(_) => crate::engine::SystemClock::new().now(),
                None => FRESH_NOW,
            };
            let rate = KeyTable::of(def).rate_at(Counter::default(), now);
            let v = rate.evaluate(Counter::default(), now, def.cost.get());
            out["fresh"] = json!({"admitted": v.admitted, "remaining": v.remaining, "limit": rate.capacity()});
            if let (Some(periods), Rate::Quota { window, .. }) = (def.algorithm.periods(), rate) {
                let zone = periods.zone();
                out["this_period"] = json!({"start": zone.rfc3339(window.start), "end": zone.rfc3339(window.end)});
            }
        }
        Key::Missing => match def.missing {
            Missing::Pass => set(&mut out, "skipped", None, Some(format!("the request lacks {what} (missing: pass)"))),
            Missing::Reject => set(
                &mut out,
                "rejects",
                None,
                Some(format!("the request lacks {what} (missing: reject refuses it with 400)")),
            ),
        },
        Key::Unclear(unclear) => {
            let why = request::unclear(&def.per, unclear);
            set(&mut out, "rejects", None, Some(format!("the request gives {why} (refused with 400)")));
        }
    }
    out
}

fn address_label(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => format!("address {v4}"),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("address {v4}"),
            None => {
                let s = v6.segments();
                let prefix = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("address {prefix}/64")
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::path_and_query;

    /// A path and query, or what the refusal says.
    type Expected = Result<(&'static str, Option<&'static str>), &'static str>;

    #[test]
    fn targets_are_paths_or_http_urls() {
        let cases: [(&str, Expected); 11] = [
            ("/v1/pets", Ok(("/v1/pets", None))),
            ("/v1/pets?limit=5", Ok(("/v1/pets", Some("limit=5")))),
            ("https://api.example/v1/x", Ok(("/v1/x", None))),
            ("http://api.example:8080/v1/x?y=1#top", Ok(("/v1/x", Some("y=1")))),
            ("HTTPS://user@api.example/v1/x", Ok(("/v1/x", None))),
            ("https://api.example", Ok(("/", None))),
            ("https://api.example?x=1", Ok(("/", Some("x=1")))),
            ("https://api.example#top", Ok(("/", None))),
            ("https:///v1/x", Err("has no host")),
            ("ftp://api.example/v1/x", Err("neither a path (/v1/pets) nor an http:// or https:// URL")),
            // Not a URL: left for the canonical path to refuse, as before.
            ("v1/pets", Ok(("v1/pets", None))),
        ];
        for (target, expected) in cases {
            match (path_and_query(target), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{target}"),
                (Err(e), Err(says)) => assert!(e.to_string().contains(says), "{target}: {e}"),
                (got, _) => panic!("{target}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_quota_is_explained_with_the_period_of_now() {
        let yaml = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    post:\n      x-rate-limit:\n        - {algorithm: quota, per: org, limit: 5, period: P1D, timezone: Asia/Tokyo, cost: 2}\n";
        let source = crate::spec::Source::from_text(std::path::Path::new("q.yaml"), yaml.to_string());
        let policy = crate::policy::load_source(source, &crate::Options::default()).unwrap().policy;
        let given = super::Given { address: "192.0.2.1".parse().unwrap(), headers: vec![], query: None };
        let facts = super::WithBody { facts: &given, body: None };
        let identity = super::Identity { user: None, org: Some("acme".into()), roles: vec![] };
        let out = super::explain_bound(&policy.bounds[0], &facts, &identity, &[]);
        assert_eq!(out["period"], "P1D");
        assert_eq!(out["fresh"]["remaining"], 3);
        let (start, end) = (out["this_period"]["start"].as_str().unwrap(), out["this_period"]["end"].as_str().unwrap());
        assert!(start.ends_with("T00:00:00+09:00") && end.ends_with("T00:00:00+09:00"), "{out}");
        let (s, e): (jiff::Timestamp, jiff::Timestamp) = (start.parse().unwrap(), end.parse().unwrap());
        let now = jiff::Timestamp::now();
        assert!(s <= now && now < e && e.duration_since(s).as_hours() == 24, "{out}");
    }
}
