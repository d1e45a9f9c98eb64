//! Credentials: where an operation's callers present the credential a `per: token` bound counts,
//! from its security requirements and the schemes they name.

use indexmap::IndexMap;

use crate::policy::Credential;
use crate::spec::model::{ParameterIn, SecurityScheme};

pub(super) fn credentials(
    security: Option<&Vec<crate::spec::model::Requirement>>,
    schemes: &IndexMap<String, SecurityScheme>,
) -> Vec<Credential> {
    let mut out = Vec::new();
    for requirement in security.into_iter().flatten() {
        for name in &requirement.0 {
            let credential = match schemes.get(name) {
                Some(SecurityScheme::ApiKey { name, location }) => match location {
                    ParameterIn::Header => Credential::Header(name.to_ascii_lowercase()),
                    ParameterIn::Query => Credential::Query(name.clone()),
                    ParameterIn::Cookie => Credential::Cookie(name.clone()),
                    _ => continue,
                },
                Some(SecurityScheme::Authorization { .. }) => Credential::Authorization,
                _ => continue,
            };
            if !out.contains(&credential) {
                out.push(credential);
            }
        }
    }
    if out.is_empty() {
        out.push(Credential::Authorization);
    }
    out
}
