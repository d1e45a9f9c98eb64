//! The flags that say who a caller is (`--identity-header`, the JWT flags), shared by the server
//! commands and by `check --serve` / `check --decide`, which checks a spec against them.

use std::path::PathBuf;

use crate::server::facts::identity::{IdentityHeaders, IdentityResolver, JwtSettings, JwtVerifier};

use super::failure::Failure;

/// Where a caller's identity comes from.
#[derive(clap::Args, Clone, Debug, Default)]
pub(super) struct IdentityArgs {
    /// An identity header set by a trusted authenticating layer: user=HEADER, org=HEADER or
    /// roles=HEADER (comma-separated roles). Repeatable.
    #[arg(long = "identity-header", value_name = "FIELD=HEADER")]
    pub identity_headers: Vec<String>,
    /// Verify JWT bearer tokens with this HMAC secret (the file's bytes, trailing newline removed).
    #[arg(long, value_name = "FILE")]
    pub jwt_secret_file: Option<PathBuf>,
    /// Verify JWT bearer tokens with this PEM public key (RSA, EC or Ed25519).
    #[arg(long, value_name = "FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// Accept only tokens from this issuer (`iss`).
    #[arg(long, value_name = "ISS")]
    pub jwt_issuer: Option<String>,
    /// Accept only tokens for this audience (`aud`).
    #[arg(long, value_name = "AUD")]
    pub jwt_audience: Option<String>,
    /// The claim holding the caller's org.
    #[arg(long, default_value = "org", value_name = "CLAIM")]
    pub jwt_org_claim: String,
    /// The claim holding the caller's roles (a list, or a space-separated string).
    #[arg(long, default_value = "roles", value_name = "CLAIM")]
    pub jwt_roles_claim: String,
}

impl IdentityArgs {
    /// Whether any identity source was named (the claims' names alone name none).
    pub(super) fn given(&self) -> bool {
        !self.identity_headers.is_empty()
            || self.jwt_secret_file.is_some()
            || self.jwt_public_key_file.is_some()
            || self.jwt_issuer.is_some()
            || self.jwt_audience.is_some()
    }

    /// The identity headers parsed and the JWT key read: what the server resolves callers with.
    pub(super) fn resolver(&self) -> Result<IdentityResolver, Failure> {
        Ok(IdentityResolver { headers: self.headers()?, jwt: self.jwt()? })
    }

    /// The `--identity-header` flags, parsed.
    pub(super) fn headers(&self) -> Result<IdentityHeaders, Failure> {
        let mut headers = IdentityHeaders::default();
        for spec in &self.identity_headers {
            headers.set(spec).map_err(|e| Failure::unreadable(format!("--identity-header {e}")))?;
        }
        Ok(headers)
    }

    fn jwt(&self) -> Result<Option<JwtVerifier>, Failure> {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|e| Failure::unreadable(format!("cannot read {}: {e}", p.display())))
        };
        let secret = match &self.jwt_secret_file {
            Some(p) => {
                let mut bytes = read(p)?;
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                Some(bytes)
            }
            None => None,
        };
        let public_key_pem = self.jwt_public_key_file.as_ref().map(read).transpose()?;
        if secret.is_none() && public_key_pem.is_none() {
            if self.jwt_issuer.is_some() || self.jwt_audience.is_some() {
                return Err(Failure::unreadable(
                    "--jwt-issuer and --jwt-audience need --jwt-secret-file or --jwt-public-key-file",
                ));
            }
            return Ok(None);
        }
        let settings = JwtSettings {
            secret,
            public_key_pem,
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            org_claim: self.jwt_org_claim.clone(),
            roles_claim: self.jwt_roles_claim.clone(),
        };
        JwtVerifier::new(&settings).map(Some).map_err(|e| Failure::unreadable(e.to_string()))
    }
}
