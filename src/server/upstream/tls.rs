//! TLS to an `https://` upstream: the roots trusted, and a certificate given in
//! `--upstream-ca-file` trusted as the upstream's own.

use std::sync::Arc;

use super::error::UpstreamError;

/// How an `https://` upstream is reached.
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    pub(super) config: Arc<rustls::ClientConfig>,
    /// The name sent in SNI and checked against the certificate, when not the URL's host (an
    /// upstream reached by address whose certificate names a host).
    pub(super) server_name: Option<String>,
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
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let mut pinned = Vec::new();
        match ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| UpstreamError::CaUnreadable(e.to_string()))?;
                    roots.add(cert.clone()).map_err(UpstreamError::CaRefused)?;
                    pinned.push(cert);
                }
                if roots.is_empty() {
                    return Err(UpstreamError::NoCa);
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(UpstreamError::NoSystemRoots);
                }
            }
        }
        if let Some(name) = &server_name {
            rustls::pki_types::ServerName::try_from(name.as_str())
                .map_err(|_| UpstreamError::ServerName(name.clone()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| UpstreamError::Tls(e.to_string()))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| UpstreamError::Tls(e.to_string()))?
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
pub(crate) fn ca_used_as_server(e: &rustls::Error) -> bool {
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
