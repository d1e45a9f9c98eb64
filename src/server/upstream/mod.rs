//! Where and how the upstream is reached: its URL, TLS to an `https://` one, and the pooled
//! client with its idle timeout and idle cap.

pub(crate) mod client_body;
mod error;
pub(crate) mod h1;
pub(crate) mod pool;
pub(crate) mod response;
pub(crate) mod tls;

pub(crate) use error::UpstreamError;
pub(crate) use pool::UpstreamPool;
pub(crate) use tls::UpstreamTls;

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::server::upstream::pool::Pool;

/// Where and how to reach the upstream.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    /// `http://host:port` or `https://host:port`, with an optional path prefix.
    pub base: Uri,
    /// For `https://`: whom to trust and which name to ask for (SNI) and verify.
    pub tls: Option<UpstreamTls>,
    /// How long connecting to the upstream may take.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response's headers.
    pub response_timeout: Duration,
    /// Which idle connections are kept for the next request.
    pub pool: UpstreamPool,
}

impl Upstream {
    /// Checks an upstream URL: `http://` or `https://` with a host. An `https://` upstream
    /// needs [`Upstream::tls`] set before a proxy is built.
    pub(crate) fn parse(
        url: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Upstream, UpstreamError> {
        let base: Uri = url.parse().map_err(|e| UpstreamError::NotAUrl { url: url.to_string(), source: e })?;
        if !matches!(base.scheme_str(), Some("http" | "https")) || base.authority().is_none() {
            return Err(UpstreamError::NotHttp(url.to_string()));
        }
        if base.query().is_some() {
            return Err(UpstreamError::Query(url.to_string()));
        }
        Ok(Upstream { base, tls: None, connect_timeout, response_timeout, pool: UpstreamPool::default() })
    }

    /// Whether the upstream is reached over TLS.
    pub(crate) fn is_https(&self) -> bool {
        self.base.scheme_str() == Some("https")
    }

    /// The request target (origin form) of a canonical `path` and `query` at the upstream: the
    /// base URL's path prefix before it. `as_sent` is the client's own target when it was
    /// canonical already: without a prefix it is forwarded as it is, sharing its bytes.
    pub(super) fn uri(
        &self,
        path: &str,
        query: Option<&str>,
        as_sent: Option<&http::uri::PathAndQuery>,
    ) -> Result<Uri, http::Error> {
        let prefix = self.base.path().trim_end_matches('/');
        if let Some(target) = as_sent
            && prefix.is_empty()
        {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(target.clone());
            return Ok(Uri::from_parts(parts)?);
        }
        let mut target = String::with_capacity(prefix.len() + path.len() + query.map_or(0, |q| q.len() + 1));
        target.push_str(prefix);
        target.push_str(path);
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        Ok(Uri::from_maybe_shared(bytes::Bytes::from(target))?)
    }

    /// A worker's connections to the upstream: its connect timeout, TLS (SNI and the name
    /// verified), and which idle connections are kept.
    pub(super) fn pool(&self) -> Pool {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(self.connect_timeout));
        http.set_nodelay(true);
        // The TLS layer below takes https:// URLs; the TCP connector must let them through.
        http.enforce_http(false);
        let tls = self.tls.clone();
        let config = match &tls {
            Some(t) => (*t.config).clone(),
            // A plain http:// upstream never starts TLS; the config is only a placeholder.
            None => rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth())
                .expect("ring supports the default protocol versions"),
        };
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
        let connector = match tls.and_then(|t| t.server_name) {
            Some(name) => {
                // Checked in UpstreamTls::new; an unreadable name cannot get this far.
                let name = rustls::pki_types::ServerName::try_from(name).expect("checked when the upstream was set up");
                let resolver = hyper_rustls::FixedServerNameResolver::new(name);
                builder.with_server_name_resolver(resolver).enable_http1().wrap_connector(http)
            }
            None => builder.enable_http1().wrap_connector(http),
        };
        Pool::new(connector, self.base.clone(), self.pool)
    }
}
