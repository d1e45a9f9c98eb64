//! What the admin endpoints that act on one caller (`/counters`, `/quota`) share: the admin
//! token, a bound found by its id, and errors as JSON.

use http::StatusCode;
use serde_json::{Value, json};

use crate::policy::{BoundIndex, Policy};

/// What the admin listener answers: a status and a JSON body.
pub(crate) type Answer = (StatusCode, Value);

/// Whether a change may go ahead: `token` is the one `--admin-token-file` gave (none: changes
/// are off), `authorization` the request's header. `what` says what was refused.
pub(crate) fn authorize(token: Option<&str>, authorization: Option<&[u8]>, what: &str) -> Result<(), Answer> {
    match token {
        None => Err(error(
            StatusCode::FORBIDDEN,
            &format!("{what} needs an admin token: start opbound with --admin-token-file"),
        )),
        Some(token) if !bearer_matches(authorization, token) => {
            Err(error(StatusCode::UNAUTHORIZED, "send the admin token as Authorization: Bearer TOKEN"))
        }
        Some(_) => Ok(()),
    }
}

/// The bound named `id`, or a 404 that names it and suggests the closest.
pub(crate) fn find_bound(policy: &Policy, id: &str) -> Result<BoundIndex, Answer> {
    policy.bound_named(id).ok_or_else(|| {
        let ids: Vec<&str> = policy.bounds.iter().map(|b| b.id.as_str()).collect();
        let hint = match crate::suggest::closest(id, &ids) {
            Some(s) => format!("; did you mean {s}?"),
            None => format!("; the bounds are {}", ids.join(", ")),
        };
        error(StatusCode::NOT_FOUND, &format!("no bound is named {id}{hint}"))
    })
}

/// A caller's key as logs show it: the hash, never the value.
pub(crate) fn logged_key(key: u64) -> String {
    format!("{key:016x}")
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

/// An error as the admin endpoints answer it.
pub(crate) fn error(status: StatusCode, detail: &str) -> Answer {
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

    #[test]
    fn changes_are_off_without_a_token_and_refused_with_a_wrong_one() {
        assert_eq!(authorize(None, Some(b"Bearer x"), "it").unwrap_err().0, StatusCode::FORBIDDEN);
        assert_eq!(authorize(Some("y"), Some(b"Bearer x"), "it").unwrap_err().0, StatusCode::UNAUTHORIZED);
        assert!(authorize(Some("x"), Some(b"Bearer x"), "it").is_ok());
    }
}
