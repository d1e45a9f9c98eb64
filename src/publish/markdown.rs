//! A limits page for a developer portal: the route bounds, a table per operation, what a refusal
//! looks like, and how to read the headers.

use std::fmt::Write;

use super::example::refusal_example;
use super::refusals::refusals;
use super::words;
use crate::engine::headers::HeaderStyle;
use crate::policy::{BoundDef, Policy};

/// The page, in Markdown. `title` is the API's name (`info.title`), when it has one.
pub fn markdown(policy: &Policy, title: Option<&str>, style: HeaderStyle) -> String {
    let mut page = String::new();
    let name = title.unwrap_or("this API");
    let _ = writeln!(page, "# Rate limits of {name}\n");
    if policy.route_bounds.is_empty() {
        page.push_str("No API-wide limits: each operation has its own, below.\n\n");
    } else {
        page.push_str(
            "## Every request\n\nEvery request, whatever its operation, counts towards these limits (each is \
             one count that all operations share):\n\n",
        );
        for &b in &policy.route_bounds {
            let _ = writeln!(page, "- {} (`{}`)", words::bound(&policy.bounds[b].def), policy.bounds[b].id);
        }
        page.push_str("\nEach operation's own limits, below, apply on top of these.\n\n");
    }
    page.push_str("## Each operation\n\n");
    page.push_str(
        "A limit shared by several operations is one count for all of them, as its row says.\n\n\
         | method | path | operation | limit | tiers | cost | bound |\n|---|---|---|---|---|---|---|\n",
    );
    for op in &policy.operations {
        let path = op.paths.first().unwrap_or(&op.template);
        let cells = |limit: &str, tiers: &str, cost: &str, bound: &str| {
            format!(
                "| {} | `{}` | `{}` | {limit} | {tiers} | {cost} | {bound} |\n",
                op.method,
                cell(path),
                cell(&op.id)
            )
        };
        if op.bounds.is_empty() {
            let limit = if policy.route_bounds.is_empty() { "none" } else { "the API-wide limits only" };
            page.push_str(&cells(limit, "everybody", "1", ""));
            continue;
        }
        for &b in &op.bounds {
            let def = &policy.bounds[b].def;
            let tiers = words::audience(def).unwrap_or_else(|| "everybody".to_string());
            let mut limit = words::rule_without_cost(def);
            if let Some(shared) = words::shared(policy, b) {
                limit = format!("{limit} ({shared})");
            }
            let id = format!("`{}`", cell(&policy.bounds[b].id));
            page.push_str(&cells(&cell(&limit), &cell(&tiers), &cost(def), &id));
        }
    }
    page.push('\n');
    refused(&mut page, policy);
    headers(&mut page, style);
    page
}

/// A table cell: no line breaks, and `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// What one request costs under a bound.
fn cost(def: &BoundDef) -> String {
    match &def.cost_from {
        Some(c) => format!("stated by the request, at most {}", words::number(u64::from(c.max.get()))),
        None => words::number(u64::from(def.cost.get())),
    }
}

/// What a refusal looks like, with an example body from one of the spec's own bounds.
fn refused(page: &mut String, policy: &Policy) {
    page.push_str("## When a limit is reached\n\n");
    // The first operation's first bound that can refuse, else a route bound.
    let example = policy
        .operations
        .iter()
        .enumerate()
        .find_map(|(i, op)| op.bounds.first().map(|&b| (Some(i), b)))
        .or_else(|| policy.route_bounds.first().map(|&b| (None, b)));
    let Some((operation, bound)) = example else {
        page.push_str("This API declares no limits.\n\n");
        return;
    };
    let body = refusal_example(policy, operation, bound);
    let status = body["status"].as_u64().unwrap_or(429);
    let retry = body["retry_after"].as_u64().unwrap_or(1);
    let _ = write!(
        page,
        "The request is refused with `{status}` and an `application/problem+json` body (RFC 9457) that \
         names the limit in words. A refused request counts towards no limit. For example:\n\n\
         ```http\nHTTP/1.1 {status} {}\nContent-Type: application/problem+json\nRetry-After: {retry}\n\n{}\n```\n\n",
        body["title"].as_str().unwrap_or(""),
        serde_json::to_string_pretty(&body).expect("json values serialize"),
    );
    page.push_str(
        "`bound` names the limit by its id, as the table's last column does; `retry_after` repeats the \
         `Retry-After` header; a quota adds `quota_period` and `quota_resets_at`, the instant it \
         comes back.\n\n",
    );
    let any = |f: fn(&super::Refusals) -> bool| (0..policy.operations.len()).any(|i| f(&refusals(policy, i)));
    if any(|r| r.bad_request) {
        page.push_str(
            "Some operations answer `400` (`tag:opbound.dev,2026:missing-key`, `unclear-key` or \
             `bad-cost`) when a request lacks the key a limit counts by, gives it twice with \
             different values, or states a cost that is not a count: fix the request, do not retry it as is.\n\n",
        );
    }
    if any(|r| r.too_large) {
        page.push_str(
            "Operations whose requests state their cost answer `413` \
             (`tag:opbound.dev,2026:cost-too-high`, with `max_cost`) above the most one request may \
             state: split the request.\n\n",
        );
    }
}

/// How to read the RateLimit headers, and when to retry.
fn headers(page: &mut String, style: HeaderStyle) {
    page.push_str("## Reading the headers\n\nEvery response of a limited operation, refused or not, says how much is left of the limit with the least left:\n\n");
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        page.push_str(
            "- `RateLimit-Limit`: the limit, per its window.\n\
             - `RateLimit-Remaining`: what is left of it now.\n\
             - `RateLimit-Reset`: whole seconds until its window ends (`0` for a limit on requests in flight).\n",
        );
    }
    if matches!(style, HeaderStyle::Draft | HeaderStyle::Both) {
        page.push_str(
            "- `RateLimit-Policy: \"NAME\";q=LIMIT;w=SECONDS`: the limit and its window, by name.\n\
             - `RateLimit: \"NAME\";r=REMAINING;t=SECONDS`: what is left, and seconds until its window ends.\n",
        );
    }
    page.push_str(
        "\n## When to retry\n\n\
         - After a refusal, wait at least `Retry-After` seconds before sending the same request: it is \
         the time until that request could pass, never 0. Retrying sooner is refused again.\n\
         - Budget comes back gradually within a sliding window, so `Retry-After` can be later than \
         `RateLimit-Reset`; trust `Retry-After`.\n\
         - When `RateLimit-Remaining` nears 0, slow down instead of waiting for a refusal.\n\
         - A limit on requests in flight frees up as your other requests finish, not with time.\n",
    );
}
