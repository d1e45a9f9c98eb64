//! Where and how the upstream is reached: its URL, TLS to an `https://` one, and the pooled
//! client with its idle timeout and idle cap.

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;

use super::pool::Pool;

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

/// Idle connections to the upstream kept for reuse. Each holds a descriptor here and a worker or
/// a descriptor at the upstream, so they are capped and closed when unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamPool {
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// The most idle connections kept; a connection freed beyond that is closed.
    pub max_idle: usize,
}

impl UpstreamPool {
    /// One worker's share of the pool, when `workers` each keep their own idle connections: the
    /// cap split evenly, and at least one each (unless the cap is 0, no pooling at all).
    pub(crate) fn per_worker(self, workers: usize) -> UpstreamPool {
        let max_idle = match self.max_idle {
            0 => 0,
            n => (n / workers.max(1)).max(1),
        };
        UpstreamPool { max_idle, ..self }
    }
}

impl Default for UpstreamPool {
    fn default() -> Self {
        UpstreamPool { idle_timeout: Duration::from_secs(30), max_idle: 64 }
    }
}

/// How an `https://` upstream is reached.
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    config: Arc<rustls::ClientConfig>,
    /// The name sent in SNI and checked against the certificate, when not the URL's host (an
    /// upstream reached by address whose certificate names a host).
    server_name: Option<String>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// Trusts the CA certificates in `ca_pem`, or the system's roots when `None`; asks for and
    /// verifies `server_name`, or the URL's host.
    pub(crate) fn new(ca_pem: Option<&[u8]>, server_name: Option<String>) -> Result<UpstreamTls, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let mut pinned = Vec::new();
        match ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert =
                        cert.map_err(|e| format!("the upstream CA file holds a certificate that cannot be read: {e}"))?;
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("the upstream CA file holds a certificate rustls refuses: {e}"))?;
                    pinned.push(cert);
                }
                if roots.is_empty() {
                    return Err("the upstream CA file holds no PEM certificate".to_string());
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(
                        "no system root certificates were found to verify the upstream; install ca-certificates or give --upstream-ca-file"
                            .to_string(),
                    );
                }
            }
        }
        if let Some(name) = &server_name {
            rustls::pki_types::ServerName::try_from(name.as_str())
                .map_err(|_| format!("--upstream-server-name {name:?} is not a host name or an address"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("cannot set up TLS to the upstream: {e}"))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS to the upstream: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinning { webpki, pinned }))
            .with_no_client_auth();
        Ok(UpstreamTls { config: Arc::new(config), server_name })
    }
}

/// The Web PKI's verification, and one thing more that curl, nginx and Python allow: a
/// certificate given itself in `--upstream-ca-file` is trusted as the upstream's own, although
/// it says `CA:TRUE` (what `openssl req -x509` makes by default), which the Web PKI refuses as a
/// server certificate. It must still name the server, and be in its validity period (checked
/// before the CA flag, so the refusal for that flag says the dates held).
#[derive(Debug)]
struct Pinning {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    /// The certificates of `--upstream-ca-file`, byte for byte.
    pinned: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// Whether the Web PKI refused a certificate only for being a CA's.
pub(super) fn ca_used_as_server(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
        }
        _ => false,
    }
}

impl rustls::client::danger::ServerCertVerifier for Pinning {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(e) if ca_used_as_server(&e) && self.pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) => {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            verified => verified,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

impl Upstream {
    /// Checks an upstream URL: `http://` or `https://` with a host. An `https://` upstream
    /// needs [`Upstream::tls`] set before a proxy is built.
    pub(crate) fn parse(url: &str, connect_timeout: Duration, response_timeout: Duration) -> Result<Upstream, String> {
        let base: Uri = url.parse().map_err(|e| format!("upstream {url:?} is not a URL: {e}"))?;
        if !matches!(base.scheme_str(), Some("http" | "https")) || base.authority().is_none() {
            return Err(format!(
                "upstream {url:?} must be an http:// or https:// URL with a host, like http://127.0.0.1:3000"
            ));
        }
        if base.query().is_some() {
            return Err(format!("upstream {url:?} cannot have a query"));
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
