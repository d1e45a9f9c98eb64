//! `/counters` on the admin listener: look up one caller's counter on a bound, or reset it, by
//! the key's value (an address, a user id, an API key...), which is hashed as requests are and
//! never kept. Looking up is open to whoever reaches the admin listener; a reset needs the admin
//! token.

use http::{Method, StatusCode};
use serde_json::json;

use crate::request::query_param;
use crate::server::admin::operator::{Answer, authorize, error, find_bound, logged_key};
use crate::server::judge::Shared;

/// Handles `GET /counters?bound=ID&key=VALUE` (look up) and `DELETE` of the same (reset, with
/// `Authorization: Bearer TOKEN`).
pub(crate) async fn handle(
    shared: &Shared,
    token: Option<&str>,
    method: &Method,
    query: Option<&str>,
    authorization: Option<&[u8]>,
) -> Answer {
    let reset = match *method {
        Method::GET => false,
        Method::DELETE => true,
        _ => return error(StatusCode::METHOD_NOT_ALLOWED, "use GET to look a counter up, DELETE to reset it"),
    };
    if reset && let Err(refused) = authorize(token, authorization, "resetting a counter") {
        return refused;
    }
    let param = |name: &str| query.and_then(|q| query_param(q, name).ok().flatten()).map(|v| v.into_owned());
    let Some(bound_id) = param("bound") else {
        return error(StatusCode::BAD_REQUEST, "say which bound: /counters?bound=ID&key=VALUE");
    };
    let active = shared.active.load_full();
    let limiter = &active.limiter;
    let policy = limiter.policy();
    let bound = match find_bound(policy, &bound_id) {
        Ok(b) => b,
        Err(answer) => return answer,
    };
    let mut values = query.map(|q| crate::request::query_params(q, "key")).unwrap_or_default();
    if values.is_empty() {
        values.push(String::new());
    }
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let key = match limiter.caller_key_of(bound, &values) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let def = &policy.bounds[bound].def;
    if reset {
        return match shared.store.forget(limiter, bound, key).await {
            Ok(had) => {
                tracing::info!(target: "opbound::admin", bound = %bound_id, key = %logged_key(key), had, "counter reset");
                (
                    StatusCode::OK,
                    json!({"bound": bound_id, "per": def.per.to_string(), "reset": true, "had_counter": had}),
                )
            }
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store could not reset it: {e}")),
        };
    }
    match shared.store.inspect(limiter, bound, key).await {
        Ok(view) => (
            StatusCode::OK,
            json!({
                "bound": bound_id,
                "per": def.per.to_string(),
                "description": def.describe(),
                "tracked": view.tracked,
                "limit": view.limit,
                "remaining": view.remaining,
                "reset": crate::engine::decision::whole_seconds(view.reset),
                "store": shared.store.describe(),
            }),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store could not be read: {e}")),
    }
}
