//! `/counters` on the admin listener: look up one caller's counter on a bound, or reset it, by
//! the key's value (an address, a user id, an API key...), which is hashed as requests are and
//! never kept. Looking up is open to whoever reaches the admin listener; a reset needs the admin
//! token.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::Shared;
use crate::request::query_param;

/// What the admin listener answers: a status and a JSON body.
pub(crate) type Answer = (StatusCode, Value);

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
    if reset {
        match token {
            None => {
                return error(
                    StatusCode::FORBIDDEN,
                    "resetting a counter needs an admin token: start opbound with --admin-token-file",
                );
            }
            Some(token) if !bearer_matches(authorization, token) => {
                return error(StatusCode::UNAUTHORIZED, "send the admin token as Authorization: Bearer TOKEN");
            }
            Some(_) => {}
        }
    }
    let param = |name: &str| query.and_then(|q| query_param(q, name).ok().flatten()).map(|v| v.into_owned());
    let Some(bound_id) = param("bound") else {
        return error(StatusCode::BAD_REQUEST, "say which bound: /counters?bound=ID&key=VALUE");
    };
    let active = shared.active.load_full();
    let limiter = &active.limiter;
    let policy = limiter.policy();
    let Some(bound) = policy.bound_named(&bound_id) else {
        let ids: Vec<&str> = policy.bounds.iter().map(|b| b.id.as_str()).collect();
        let hint = match crate::suggest::closest(&bound_id, &ids) {
            Some(s) => format!("; did you mean {s}?"),
            None => format!("; the bounds are {}", ids.join(", ")),
        };
        return error(StatusCode::NOT_FOUND, &format!("no bound is named {bound_id}{hint}"));
    };
    let key = match limiter.caller_key(bound, &param("key").unwrap_or_default()) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let def = &policy.bounds[bound].def;
    if reset {
        return match shared.store.forget(limiter, bound, key).await {
            Ok(had) => {
                tracing::info!(target: "opbound::admin", bound = %bound_id, key = %format!("{key:016x}"), had, "counter reset");
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

/// Whether `Authorization` carries the token, compared in time that does not depend on where
/// they first differ.
fn bearer_matches(authorization: Option<&[u8]>, token: &str) -> bool {
    let Some(value) = authorization else { return false };
    let Some(given) = value.strip_prefix(b"Bearer ").or_else(|| value.strip_prefix(b"bearer ")) else {
        return false;
    };
    let given = given.trim_ascii();
    let want = token.as_bytes();
    given.len() == want.len() && given.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn error(status: StatusCode, detail: &str) -> Answer {
    (status, json!({"status": status.as_u16(), "detail": detail}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_must_match_exactly() {
        assert!(bearer_matches(Some(b"Bearer s3cret"), "s3cret"));
        assert!(bearer_matches(Some(b"bearer s3cret "), "s3cret"));
        assert!(!bearer_matches(Some(b"Bearer s3cre"), "s3cret"));
        assert!(!bearer_matches(Some(b"Bearer s3cret2"), "s3cret"));
        assert!(!bearer_matches(Some(b"Basic s3cret"), "s3cret"));
        assert!(!bearer_matches(None, "s3cret"));
    }
}
