//! A word that is none of those a setting accepts (`--gateway apache`, `--escaped-slashes
//! maybe`). A leaf: only `std` and `thiserror`.

/// `value` is none of `choices` (written for the message: `nginx, caddy, traefik or envoy`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not {choices}")]
pub struct NotOneOf {
    /// The word given.
    pub value: String,
    /// The words accepted, as the message lists them.
    pub choices: &'static str,
}

impl NotOneOf {
    /// `value` is none of `choices`.
    pub fn new(value: &str, choices: &'static str) -> NotOneOf {
        NotOneOf { value: value.to_string(), choices }
    }
}
