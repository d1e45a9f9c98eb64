//! One bound's fields, each checked on its own, then together: which fields belong with which
//! algorithm, and whether any request could ever pass.

use std::num::NonZeroU32;

use serde_json::{Map, Value};

use super::applies_to::applies_to;
use super::cost::request_cost;
use super::counting::counting;
use super::per::{PER_HINT, per};
use super::scalars::{choice, positive};
use crate::finding::Finding;
use crate::period::{Calendar, FirstUse, Period, Zone};
use crate::policy::bound::*;
use crate::policy::window::Window;
use crate::spec::pointer::push;
use crate::spec::read::describe;
use crate::suggest;

const ALGORITHMS: [&str; 4] = ["sliding-window", "token-bucket", "concurrency", "quota"];

pub(super) fn bound(fields: &Map<String, Value>, at: &str, findings: &mut Vec<Finding>) -> Option<BoundDef> {
    macro_rules! err {
        ($field:expr, $message:expr) => {
            findings.push(Finding::error(push(at, $field), $message))
        };
    }

    let per = match fields.get("per") {
        None => {
            findings.push(Finding::error(at, format!("bound has no per: say what it is counted per ({PER_HINT})")));
            None
        }
        Some(v) => per(v).map_err(|m| err!("per", m)).ok(),
    };

    let algorithm_name = match fields.get("algorithm") {
        None => Some("sliding-window"),
        Some(Value::String(s)) if ALGORITHMS.contains(&s.as_str()) => Some(s.as_str()),
        Some(v) => {
            let shown = v.as_str().map_or_else(|| describe(v), |s| s.to_string());
            let hint = v
                .as_str()
                .and_then(|s| suggest::closest(s, &ALGORITHMS))
                .map(|s| format!("did you mean {s}? "))
                .unwrap_or_default();
            err!(
                "algorithm",
                format!(
                    "algorithm {shown} is not one opbound knows; {hint}use sliding-window, token-bucket, concurrency or quota"
                )
            );
            None
        }
    };

    let limit = match fields.get("limit") {
        None => {
            findings.push(Finding::error(at, "bound has no limit: say how many requests it admits, e.g. limit: 100"));
            None
        }
        Some(v) => positive(v, "limit").map_err(|m| err!("limit", m)).ok(),
    };

    // A quota's window is reported below as misplaced; its spelling does not matter.
    let window = match fields.get("window") {
        None => None,
        Some(_) if algorithm_name == Some("quota") => None,
        Some(Value::String(s)) => Window::parse(s).map_err(|e| err!("window", e.to_string())).ok(),
        Some(Value::Number(n)) => {
            err!("window", format!("window {n} must be an ISO-8601 duration such as PT{n}S"));
            None
        }
        Some(v) => {
            err!("window", format!("window must be an ISO-8601 duration such as PT1M, found {}", describe(v)));
            None
        }
    };
    let burst = fields.get("burst").and_then(|v| positive(v, "burst").map_err(|m| err!("burst", m)).ok());
    let cost = match fields.get("cost") {
        None => Some(NonZeroU32::MIN),
        Some(v) => positive(v, "cost").map_err(|m| err!("cost", m)).ok(),
    };
    let cost_from = request_cost(fields, at, findings);
    let max_keys = match fields.get("max-keys") {
        None => NonZeroU32::new(DEFAULT_MAX_KEYS),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(MAX_MAX_KEYS)).contains(&n) => NonZeroU32::new(n as u32),
            _ => {
                let message = match v.as_number() {
                    Some(n) => {
                        format!("max-keys {n} is out of range; it must be a whole number from 1 to {MAX_MAX_KEYS}")
                    }
                    None => format!("max-keys must be a whole number from 1 to {MAX_MAX_KEYS}, found {}", describe(v)),
                };
                err!("max-keys", message);
                None
            }
        },
    };
    let missing =
        choice(fields.get("missing"), "missing", &[("pass", Missing::Pass), ("reject", Missing::Reject)], at, findings);
    let on_store_error = choice(
        fields.get("on-store-error"),
        "on-store-error",
        &[("open", OnStoreError::Open), ("closed", OnStoreError::Closed), ("local", OnStoreError::Local)],
        at,
        findings,
    );
    let mode =
        choice(fields.get("mode"), "mode", &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)], at, findings);
    let name = match fields.get("name") {
        None => None,
        Some(Value::String(s))
            if !s.trim().is_empty() && !s.contains(['"', '\\']) && !s.chars().any(char::is_control) =>
        {
            Some(s.clone())
        }
        Some(v) => {
            err!(
                "name",
                format!("name must be a non-empty label without quotes or backslashes, found {}", describe(v))
            );
            None
        }
    };
    let status = match fields.get("status") {
        None => Some(None),
        Some(v) => match v.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(n) if (400..=599).contains(&n) => Some(Some(n)),
            _ => {
                err!(
                    "status",
                    format!(
                        "status must be an HTTP error status from 400 to 599 (429 unless given), found {}",
                        describe(v)
                    )
                );
                None
            }
        },
    };
    let message = match fields.get("message") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() && !s.chars().any(char::is_control) => Some(s.clone()),
        Some(v) => {
            err!("message", format!("message must be one line of text for the refusal's body, found {}", describe(v)));
            None
        }
    };
    let applies_to = fields
        .get("applies-to")
        .map_or(Some(AppliesTo::default()), |v| applies_to(v, &push(at, "applies-to"), findings));

    // Combinations: which fields belong with which algorithm, and whether a request can pass.
    let algorithm_name = algorithm_name?;
    if algorithm_name != "quota" {
        for field in ["period", "reset", "timezone"] {
            if fields.contains_key(field) {
                let hint = if field == "period" && algorithm_name != "concurrency" {
                    "; a window is written as window (at most P1D), and a budget per day, month or year is a quota \
                     (algorithm: quota)"
                } else {
                    "; it belongs to quotas (algorithm: quota)"
                };
                err!(field, format!("{field} does not apply to a {algorithm_name} bound{hint}"));
            }
        }
    }
    let algorithm = match algorithm_name {
        "quota" => {
            if let Some(w) = fields.get("window") {
                let shown = w.as_str().unwrap_or("");
                err!(
                    "window",
                    format!(
                        "window {shown} does not apply to a quota, which counts per business period; write it as period (e.g. period: P1M)"
                    )
                );
            }
            if fields.contains_key("burst") {
                err!("burst", "burst applies only to token-bucket bounds; this bound is a quota".to_string());
            }
            if fields.contains_key("window") && !fields.contains_key("period") {
                return None;
            }
            Algorithm::Quota { periods: periods(fields, at, findings)? }
        }
        "concurrency" => {
            if let Some(w) = fields.get("window") {
                let shown = w.as_str().unwrap_or("");
                err!(
                    "window",
                    format!(
                        "window {shown} does not apply to a concurrency bound, which limits requests in flight at once; remove it"
                    )
                );
            }
            if fields.contains_key("burst") {
                err!("burst", "burst applies only to token-bucket bounds; this bound uses concurrency".to_string());
            }
            Algorithm::Concurrency
        }
        name => {
            if !fields.contains_key("window") {
                findings.push(Finding::error(
                    at,
                    format!("bound has no window: a {name} bound needs one, e.g. window: PT1M"),
                ));
                return None;
            }
            let window = window?;
            if name == "token-bucket" {
                Algorithm::TokenBucket { window, burst: burst.or(limit)? }
            } else {
                if fields.contains_key("burst") {
                    err!(
                        "burst",
                        "burst applies only to token-bucket bounds; this bound uses sliding-window".to_string()
                    );
                }
                Algorithm::SlidingWindow { window }
            }
        }
    };
    if per.as_ref() == Some(&Per::Address) && algorithm_name == "quota" {
        findings.push(Finding::warning(
            push(at, "per"),
            "a quota per address is one a caller renews by changing address (IPv6 gives everybody millions); \
             count it per user, token, org or a header your gateway sets",
        ));
    }
    let counting = counting(fields, algorithm_name, at, findings);
    let def = BoundDef {
        per: per?,
        algorithm,
        limit: limit?,
        cost: cost?,
        cost_from: cost_from?,
        applies_to: applies_to?,
        max_keys: max_keys?,
        missing: missing?,
        on_store_error: on_store_error?,
        mode: mode?,
        name,
        status: status?,
        message,
        counting: counting?,
    };
    if def.cost.get() > def.capacity() {
        let message = match def.algorithm {
            Algorithm::TokenBucket { burst, .. } if fields.contains_key("burst") => format!(
                "burst {burst} is below the cost {}, so no request could ever pass; raise burst to at least {}",
                def.cost, def.cost
            ),
            Algorithm::TokenBucket { burst, .. } => format!(
                "cost {} is above the burst {burst} (which defaults to the limit), so no request could ever pass; set burst to at least {}",
                def.cost, def.cost
            ),
            _ => format!("cost {} is above the limit {}, so no request could ever pass", def.cost, def.limit),
        };
        let field = if matches!(def.algorithm, Algorithm::TokenBucket { .. }) && fields.contains_key("burst") {
            "burst"
        } else {
            "cost"
        };
        findings.push(Finding::error(push(at, field), message));
        return None;
    }
    // The same rule as cost: a stated cost the bound could never admit is refused by max-cost.
    if let Some(c) = def.cost_from.as_ref().filter(|c| c.max.get() > def.capacity()) {
        let what = match def.algorithm {
            Algorithm::TokenBucket { burst, .. } => format!("the burst {burst}"),
            _ => format!("the limit {}", def.limit),
        };
        findings.push(Finding::error(
            push(at, "max-cost"),
            format!(
                "max-cost {} is above {what}, so a request stating it could never pass; lower max-cost to at most {}",
                c.max,
                def.capacity()
            ),
        ));
        return None;
    }
    // A concurrency request holds a lease per unit of cost in a shared store, each written by
    // the decision's one script call: a cost of millions blocked Redis for seconds.
    let stated = def.cost_from.as_ref().map_or(def.cost.get(), |c| c.max.get());
    if def.algorithm == Algorithm::Concurrency && stated > MAX_CONCURRENCY_COST {
        let field = if def.cost_from.is_some() { "max-cost" } else { "cost" };
        findings.push(Finding::error(
            push(at, field),
            format!(
                "{field} {stated} is above {MAX_CONCURRENCY_COST}, the most one request may hold of a concurrency \
                 bound (each unit is a lease in the store); lower {field}, or count the weight with a token bucket"
            ),
        ));
        return None;
    }
    Some(def)
}

/// The most one request may hold of a concurrency bound: each unit is a lease the store writes.
pub(crate) const MAX_CONCURRENCY_COST: u32 = 10_000;

/// A quota's `period`, `reset` and `timezone`, read together: whether the period can start on
/// the calendar depends on the period.
fn periods(fields: &Map<String, Value>, at: &str, findings: &mut Vec<Finding>) -> Option<Periods> {
    let mut err = |field: &str, message: String| findings.push(Finding::error(push(at, field), message));
    let period = match fields.get("period") {
        None => {
            err(
                "period",
                "a quota has no period: say what it is counted over, e.g. period: P1M (a month), P1D, PT1H".to_string(),
            );
            None
        }
        Some(Value::String(s)) => Period::parse(s).map_err(|e| err("period", e.to_string())).ok(),
        Some(v) => {
            err("period", format!("period must be an ISO-8601 period such as P1M or P1D, found {}", describe(v)));
            None
        }
    };
    let zone = match fields.get("timezone") {
        None => Some(Zone::utc()),
        Some(Value::String(s)) => Zone::named(s).map_err(|e| err("timezone", e.to_string())).ok(),
        Some(v) => {
            err("timezone", format!("timezone must be an IANA zone name such as Europe/Berlin, found {}", describe(v)));
            None
        }
    };
    let first_use = match fields.get("reset") {
        None => Some(false),
        Some(Value::String(s)) if s == "calendar" => Some(false),
        Some(Value::String(s)) if s == "first-use" => Some(true),
        Some(v) => {
            let shown = v.as_str().map_or_else(|| describe(v), |s| s.to_string());
            err(
                "reset",
                format!(
                    "reset {shown} is not calendar (periods on the calendar, the default) or first-use (from each caller's first request)"
                ),
            );
            None
        }
    };
    let (period, zone) = (period?, zone?);
    if first_use? {
        return Some(Periods::FirstUse(FirstUse::new(period, zone)));
    }
    match Calendar::new(period, zone) {
        Ok(calendar) => Some(Periods::Calendar(calendar)),
        Err(e) => {
            err("period", e.to_string());
            None
        }
    }
}
