//! TLS to an `https://` upstream: whom it trusts ([`crate::trust`]) and the name it asks for.

use std::sync::Arc;

use super::error::UpstreamError;

/// How an `https://` upstream is reached.
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// The name sent in SNI and checked against the certificate, when not the URL's host (an
    /// upstream reached by address whose certificate names a host).
    pub(crate) server_name: Option<String>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// Trusts the CA certificates in `ca_pem`, or the system's roots when `None`; asks for and
    /// verifies `server_name`, or the URL's host.
    pub(crate) fn new(ca_pem: Option<&[u8]>, server_name: Option<String>) -> Result<UpstreamTls, UpstreamError> {
        if let Some(name) = &server_name
            && !crate::trust::is_server_name(name)
        {
            return Err(UpstreamError::ServerName(name.clone()));
        }
        let config = crate::trust::client_config(ca_pem).map_err(UpstreamError::Trust)?;
        Ok(UpstreamTls { config: Arc::new(config), server_name })
    }
}
