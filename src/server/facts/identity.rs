//! Who the caller is: identity headers set by a trusted authenticating layer in front, or a
//! verified JWT bearer token. An invalid token makes the caller anonymous; authenticating stays
//! the upstream's job.

use std::net::IpAddr;

use http::HeaderName;

use crate::server::facts::fields::Headers;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::policy::{IdentitySources, Policy};
use crate::request::{Facts, Identity};

/// Where identity headers come from (honoured only from trusted proxies).
#[derive(Clone, Debug, Default)]
pub(crate) struct IdentityHeaders {
    /// The header holding the signed-in user's id.
    pub user: Option<HeaderName>,
    /// The header holding the caller's org.
    pub org: Option<HeaderName>,
    /// Comma-separated role names.
    pub roles: Option<HeaderName>,
}

/// Why an identity source cannot be set up: a header given for it, or the JWT key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdentityError {
    /// Not `field=Header-Name`.
    #[error("{0:?} must look like user=X-User-Id, org=... or roles=...")]
    NotFieldEqualsHeader(String),
    /// Not a header name.
    #[error("{0:?} is not a valid header name")]
    HeaderName(String),
    /// A field other than user, org or roles.
    #[error("identity field {0:?} is not user, org or roles")]
    Field(String),
    /// The HMAC secret cannot be used.
    #[error("the JWT secret cannot be used: {0}")]
    Secret(String),
    /// The public key file holds no key of a kind verified.
    #[error("the JWT public key file holds no RSA, EC or Ed25519 public key in PEM form")]
    PublicKey,
    /// Both a secret and a public key.
    #[error("give either a JWT secret or a JWT public key, not both")]
    BothKeys,
    /// Neither.
    #[error("JWT verification needs a secret or a public key")]
    NoKey,
}

impl IdentityHeaders {
    /// Parses `user=X-User-Id`, `org=X-Org-Id` or `roles=X-Roles`.
    pub(crate) fn set(&mut self, spec: &str) -> Result<(), IdentityError> {
        let (field, header) =
            spec.split_once('=').ok_or_else(|| IdentityError::NotFieldEqualsHeader(spec.to_string()))?;
        let name = HeaderName::from_bytes(header.trim().as_bytes())
            .map_err(|_| IdentityError::HeaderName(header.to_string()))?;
        match field.trim() {
            "user" => self.user = Some(name),
            "org" => self.org = Some(name),
            "roles" => self.roles = Some(name),
            other => return Err(IdentityError::Field(other.to_string())),
        }
        Ok(())
    }

    /// The configured header names.
    pub(crate) fn names(&self) -> impl Iterator<Item = &HeaderName> {
        [&self.user, &self.org, &self.roles].into_iter().flatten()
    }

    fn any(&self) -> bool {
        self.user.is_some() || self.org.is_some() || self.roles.is_some()
    }
}

/// How JWT bearer tokens are checked.
#[derive(Clone, Debug, Default)]
pub(crate) struct JwtSettings {
    /// An HMAC secret (HS256/384/512).
    pub secret: Option<Vec<u8>>,
    /// A PEM public key: RSA (RS*, PS*), EC (ES256/384) or Ed25519 (EdDSA).
    pub public_key_pem: Option<Vec<u8>>,
    /// Accept only tokens with this `iss`.
    pub issuer: Option<String>,
    /// Accept only tokens for this `aud`.
    pub audience: Option<String>,
    /// The claim holding the caller's org.
    pub org_claim: String,
    /// The claim holding the caller's roles: a list, or a space- or comma-separated string.
    pub roles_claim: String,
}

/// Verifies bearer tokens.
pub(crate) struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
    org_claim: String,
    roles_claim: String,
}

impl JwtVerifier {
    /// A verifier for tokens signed with the settings' secret or public key; `Err` says why the key cannot be used.
    pub(crate) fn new(settings: &JwtSettings) -> Result<JwtVerifier, IdentityError> {
        let (key, algorithms) = match (&settings.secret, &settings.public_key_pem) {
            (Some(secret), None) => {
                let key = DecodingKey::from_secret(secret).map_err(|e| IdentityError::Secret(e.to_string()))?;
                (key, vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512])
            }
            (None, Some(pem)) => {
                if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
                    let rsa = [
                        Algorithm::RS256,
                        Algorithm::RS384,
                        Algorithm::RS512,
                        Algorithm::PS256,
                        Algorithm::PS384,
                        Algorithm::PS512,
                    ];
                    (k, rsa.to_vec())
                } else if let Ok(k) = DecodingKey::from_ec_pem(pem) {
                    (k, vec![Algorithm::ES256, Algorithm::ES384])
                } else if let Ok(k) = DecodingKey::from_ed_pem(pem) {
                    (k, vec![Algorithm::EdDSA])
                } else {
                    return Err(IdentityError::PublicKey);
                }
            }
            (Some(_), Some(_)) => return Err(IdentityError::BothKeys),
            (None, None) => return Err(IdentityError::NoKey),
        };
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        validation.required_spec_claims = ["exp", "sub"].iter().map(|s| s.to_string()).collect();
        if let Some(iss) = &settings.issuer {
            validation.set_issuer(&[iss]);
        }
        match &settings.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        Ok(JwtVerifier {
            key,
            validation,
            org_claim: settings.org_claim.clone(),
            roles_claim: settings.roles_claim.clone(),
        })
    }

    /// The identity in a valid token; `None` for anything invalid, expired or not ours.
    pub(crate) fn verify(&self, token: &str) -> Option<Identity> {
        let data = jsonwebtoken::decode::<Value>(token, &self.key, &self.validation).ok()?;
        let claims = data.claims;
        let user = claims.get("sub").and_then(Value::as_str)?.to_string();
        let org = claims.get(&self.org_claim).and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        let roles = match claims.get(&self.roles_claim) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            Some(Value::String(s)) => s.split([' ', ',']).filter(|r| !r.is_empty()).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        Some(Identity { user: Some(user), org, roles })
    }
}

/// Resolves identities for the server.
#[derive(Default)]
pub(crate) struct IdentityResolver {
    /// Identity headers, believed from trusted proxies only.
    pub headers: IdentityHeaders,
    /// Bearer-token verification, when configured.
    pub jwt: Option<JwtVerifier>,
}

impl IdentityResolver {
    /// Why `policy` cannot be served with these identity sources: the bounds that need a user,
    /// an org or roles nothing here would ever supply (so they would never count anything, and
    /// the team would believe the operation protected), and the flags that would feed them.
    /// `None` when every bound can apply.
    pub(crate) fn unfed(&self, policy: &Policy) -> Option<String> {
        let unfed = policy.unfed(self.sources());
        if unfed.is_empty() {
            return None;
        }
        let named: Vec<String> =
            unfed.iter().map(|u| format!("{} ({}, at {})", u.bound.id, u.what, u.bound.pointer)).collect();
        Some(format!(
            "{} bound(s) need a caller's identity and nothing tells opbound who the caller is, so they would \
             never count: {}. Give {}",
            unfed.len(),
            named.join(", "),
            crate::policy::identity::feeding(&unfed)
        ))
    }

    /// Which parts of an identity these sources can tell: all of it with a JWT verifier.
    pub(crate) fn sources(&self) -> IdentitySources {
        let jwt = self.jwt.is_some();
        IdentitySources {
            user: jwt || self.headers.user.is_some(),
            org: jwt || self.headers.org.is_some(),
            roles: jwt || self.headers.roles.is_some(),
        }
    }

    /// Identity headers from a trusted peer win; otherwise a valid bearer token; otherwise
    /// anonymous.
    pub(crate) fn resolve(&self, headers: Headers<'_>, peer_trusted: bool) -> Identity {
        if peer_trusted && self.headers.any() {
            let text = |name: &Option<HeaderName>| {
                name.as_ref()
                    .and_then(|n| headers.get(n.as_str()))
                    .and_then(crate::server::facts::fields::text)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
            };
            let user = text(&self.headers.user).map(str::to_string);
            let org = text(&self.headers.org).map(str::to_string);
            let roles: Vec<String> = text(&self.headers.roles)
                .map(|r| r.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
                .unwrap_or_default();
            if user.is_some() || org.is_some() || !roles.is_empty() {
                return Identity { user, org, roles };
            }
        }
        if let Some(jwt) = &self.jwt {
            let bearer = headers
                .get(http::header::AUTHORIZATION.as_str())
                .and_then(crate::server::facts::fields::text)
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim());
            if let Some(identity) = bearer.and_then(|t| jwt.verify(t)) {
                return identity;
            }
        }
        Identity::default()
    }
}

/// A request's facts over its header fields.
pub struct HeaderFacts<'a> {
    /// The client address the server resolved.
    pub address: IpAddr,
    /// The request's headers, as the client sent them.
    pub headers: Headers<'a>,
    /// The raw query string, without `?`.
    pub query: Option<&'a str>,
}

impl Facts for HeaderFacts<'_> {
    fn address(&self) -> IpAddr {
        self.address
    }

    fn headers(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.headers.get_all(name)
    }

    fn query_string(&self) -> Option<&str> {
        self.query
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    fn settings() -> JwtSettings {
        JwtSettings {
            secret: Some(b"sekrit".to_vec()),
            issuer: Some("https://auth.example".into()),
            org_claim: "org".into(),
            roles_claim: "roles".into(),
            ..JwtSettings::default()
        }
    }

    fn token(claims: Value, secret: &[u8]) -> String {
        encode(&Header::default(), &claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
    }

    fn far_future() -> u64 {
        4_000_000_000
    }

    #[test]
    fn jwt_claims_become_the_identity() {
        let v = JwtVerifier::new(&settings()).unwrap();
        let t = token(
            json!({"sub": "u1", "org": "acme", "roles": ["partner"], "exp": far_future(), "iss": "https://auth.example"}),
            b"sekrit",
        );
        assert_eq!(
            v.verify(&t),
            Some(Identity { user: Some("u1".into()), org: Some("acme".into()), roles: vec!["partner".into()] })
        );
        let spaced =
            token(json!({"sub": "u2", "roles": "a b", "exp": far_future(), "iss": "https://auth.example"}), b"sekrit");
        assert_eq!(v.verify(&spaced).unwrap().roles, ["a", "b"]);
    }

    #[test]
    fn bad_tokens_make_the_caller_anonymous() {
        let v = JwtVerifier::new(&settings()).unwrap();
        let claims = json!({"sub": "u1", "exp": far_future(), "iss": "https://auth.example"});
        assert!(v.verify(&token(claims.clone(), b"wrong")).is_none(), "bad signature");
        assert!(
            v.verify(&token(json!({"sub": "u1", "exp": 1000, "iss": "https://auth.example"}), b"sekrit")).is_none(),
            "expired"
        );
        assert!(
            v.verify(&token(json!({"sub": "u1", "exp": far_future(), "iss": "evil"}), b"sekrit")).is_none(),
            "issuer"
        );
        assert!(
            v.verify(&token(json!({"exp": far_future(), "iss": "https://auth.example"}), b"sekrit")).is_none(),
            "no sub"
        );
        assert!(v.verify("not.a.token").is_none());
        let resolver = IdentityResolver { headers: IdentityHeaders::default(), jwt: Some(v) };
        let mut h = HeaderMap::new();
        h.insert("authorization", format!("Bearer {}", token(claims, b"wrong")).parse().unwrap());
        assert_eq!(resolver.resolve((&h).into(), false), Identity::default());
    }

    #[test]
    fn identity_headers_only_from_trusted_peers() {
        let mut ih = IdentityHeaders::default();
        ih.set("user=X-User-Id").unwrap();
        ih.set("roles=X-Roles").unwrap();
        assert!(ih.set("team=X").is_err());
        let resolver = IdentityResolver { headers: ih, jwt: None };
        let mut h = HeaderMap::new();
        h.insert("x-user-id", "u9".parse().unwrap());
        h.insert("x-roles", "trial, beta".parse().unwrap());
        assert_eq!(
            resolver.resolve((&h).into(), true),
            Identity { user: Some("u9".into()), org: None, roles: vec!["trial".into(), "beta".into()] }
        );
        assert_eq!(resolver.resolve((&h).into(), false), Identity::default());
    }
}
