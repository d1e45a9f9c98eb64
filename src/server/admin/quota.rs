//! `/quota` on the admin listener: one caller's consumption of a quota in the current period,
//! and an operator's change to it ("support grants 500 more this month"). The key's value is
//! hashed as requests are and never kept or logged.

use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::Limiter;
use crate::engine::quota::{Adjustment, Standing};
use crate::policy::BoundIndex;
use crate::request::query_param;
use crate::server::admin::operator::{Answer, authorize, error, find_bound, logged_key};
use crate::server::judge::Shared;

/// The most a change's JSON body may hold.
pub(crate) const MAX_BODY: usize = 4096;

/// `POST /quota`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Change {
    bound: String,
    #[serde(default)]
    key: String,
    set: Option<i64>,
    add: Option<i64>,
}

/// Handles `GET /quota?bound=ID&key=VALUE` (look up) and `POST /quota` with a JSON body
/// `{"bound", "key", "set" | "add"}` (change, with `Authorization: Bearer TOKEN`).
pub(crate) async fn handle(
    shared: &Shared,
    token: Option<&str>,
    method: &Method,
    query: Option<&str>,
    authorization: Option<&[u8]>,
    body: &[u8],
) -> Answer {
    match *method {
        Method::GET => {
            let param = |name: &str| query.and_then(|q| query_param(q, name).ok().flatten()).map(|v| v.into_owned());
            let Some(bound) = param("bound") else {
                return error(StatusCode::BAD_REQUEST, "say which bound: /quota?bound=ID&key=VALUE");
            };
            look_up(shared, &bound, &param("key").unwrap_or_default()).await
        }
        Method::POST => {
            if let Err(refused) = authorize(token, authorization, "adjusting a quota") {
                return refused;
            }
            match serde_json::from_slice::<Change>(body) {
                Ok(change) => adjust(shared, change).await,
                Err(e) => error(
                    StatusCode::BAD_REQUEST,
                    &format!("{e}; send {{\"bound\": ID, \"key\": VALUE, \"set\": N}} or {{..., \"add\": N}}"),
                ),
            }
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "use GET to look a quota up, POST to adjust it"),
    }
}

/// The quota bound named `id` and the caller's hashed key, or why not.
fn caller(limiter: &Limiter, id: &str, value: &str) -> Result<(BoundIndex, u64), Answer> {
    let policy = limiter.policy();
    let bound = find_bound(policy, id)?;
    let def = &policy.bounds[bound].def;
    if def.algorithm.periods().is_none() {
        let detail =
            format!("{id} is not a quota (its algorithm is {}); /counters looks up every bound", def.algorithm.name());
        return Err(error(StatusCode::BAD_REQUEST, &detail));
    }
    let key = limiter.caller_key(bound, value).map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))?;
    Ok((bound, key))
}

async fn look_up(shared: &Shared, id: &str, value: &str) -> Answer {
    let limiter = shared.active.load().limiter.clone();
    let (bound, key) = match caller(&limiter, id, value) {
        Ok(c) => c,
        Err(answer) => return answer,
    };
    match shared.store.standing(&limiter, bound, key).await {
        Ok(Some(standing)) => (StatusCode::OK, standing_json(&limiter, bound, &standing)),
        Ok(None) => error(StatusCode::BAD_REQUEST, &format!("{id} is not a quota")),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store could not be read: {e}")),
    }
}

async fn adjust(shared: &Shared, change: Change) -> Answer {
    let adjustment = match (change.set, change.add) {
        (Some(n), None) => Adjustment::Set(n.clamp(0, i64::from(u32::MAX)) as u32),
        (None, Some(n)) => Adjustment::Add(n),
        _ => return error(StatusCode::BAD_REQUEST, "give one of set (consumed this period) or add (more or less)"),
    };
    let limiter = shared.active.load().limiter.clone();
    let (bound, key) = match caller(&limiter, &change.bound, &change.key) {
        Ok(c) => c,
        Err(answer) => return answer,
    };
    let (before, after) = match shared.store.adjust(&limiter, bound, key, adjustment).await {
        Ok(Some(changed)) => changed,
        Ok(None) => {
            let detail = format!(
                "{} tracks as many callers as its max-keys allows and this one is not among them; raise max-keys or try again once idle callers are swept",
                change.bound
            );
            return error(StatusCode::CONFLICT, &detail);
        }
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store could not adjust it: {e}")),
    };
    tracing::info!(target: "opbound::admin", bound = %change.bound, key = %logged_key(key), before, after, "quota adjusted");
    let mut body = match shared.store.standing(&limiter, bound, key).await {
        Ok(Some(standing)) => standing_json(&limiter, bound, &standing),
        _ => json!({"bound": change.bound}),
    };
    body["before"] = json!(before);
    body["after"] = json!(after);
    (StatusCode::OK, body)
}

fn standing_json(limiter: &Limiter, bound: BoundIndex, s: &Standing) -> Value {
    let b = &limiter.policy().bounds[bound];
    let periods = b.def.algorithm.periods();
    let zone = periods.map(|p| p.zone());
    let at = |t: u64| zone.map(|z| z.rfc3339(t));
    json!({
        "bound": b.id,
        "per": b.def.per.to_string(),
        "tracked": s.tracked,
        // The name this field had before `/counters` and `/quota` agreed on `tracked`; kept for
        // one release so that scripts reading it have time to change (issue 47, item 12).
        "key_tracked": s.tracked,
        "consumed": s.consumed,
        "limit": s.limit,
        "remaining": s.limit.saturating_sub(s.consumed),
        "period": periods.map(|p| p.period().to_string()),
        "reset": periods.map(|p| p.reset()),
        "timezone": zone.map(|z| z.name()),
        "period_start": at(s.window.start),
        "period_end": at(s.window.end),
        "period_start_unix": s.window.start / 1_000_000_000,
        "period_end_unix": s.window.end / 1_000_000_000,
    })
}
