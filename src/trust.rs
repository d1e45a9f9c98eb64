//! Whom a TLS client trusts: the system's roots, or the CA certificates in a PEM file, where a
//! certificate given itself is trusted as the server's own. The upstream (`--upstream-ca-file`)
//! and a spec fetched by URL (`--spec-ca-file`) are reached with it.

use std::sync::Arc;

/// Why a client's trust could not be set up; [`TrustError::about`] says it of what is reached.
#[derive(Debug)]
pub(crate) enum TrustError {
    /// A certificate in the CA file is not PEM that can be read.
    CaUnreadable(String),
    /// rustls refuses a certificate in the CA file.
    CaRefused(rustls::Error),
    /// The CA file holds no certificate.
    NoCa,
    /// No CA file, and the system has no roots.
    NoSystemRoots,
    /// rustls could not be set up.
    Tls(String),
}

impl TrustError {
    /// The error said of `what` is reached (`upstream`), whose CA file `flag` names.
    pub(crate) fn about(&self, what: &str, flag: &str) -> String {
        match self {
            TrustError::CaUnreadable(e) => format!("the {what} CA file holds a certificate that cannot be read: {e}"),
            TrustError::CaRefused(e) => format!("the {what} CA file holds a certificate rustls refuses: {e}"),
            TrustError::NoCa => format!("the {what} CA file holds no PEM certificate"),
            TrustError::NoSystemRoots => {
                format!(
                    "no system root certificates were found to verify the {what}; install ca-certificates or give {flag}"
                )
            }
            TrustError::Tls(e) => format!("cannot set up TLS to the {what}: {e}"),
        }
    }
}

/// A client configuration that trusts the CA certificates in `ca_pem`, or the system's roots
/// when `None`.
pub(crate) fn client_config(ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, TrustError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut pinned = Vec::new();
    match ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| TrustError::CaUnreadable(e.to_string()))?;
                roots.add(cert.clone()).map_err(TrustError::CaRefused)?;
                pinned.push(cert);
            }
            if roots.is_empty() {
                return Err(TrustError::NoCa);
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(TrustError::NoSystemRoots);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TrustError::Tls(e.to_string()))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TrustError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinning { webpki, pinned }))
        .with_no_client_auth())
}

/// Whether `name` can be sent in SNI and checked against a certificate: a host name or an
/// address.
pub(crate) fn is_server_name(name: &str) -> bool {
    rustls::pki_types::ServerName::try_from(name).is_ok()
}

/// The Web PKI's verification, and one thing more that curl, nginx and Python allow: a
/// certificate given itself in the CA file is trusted as the server's own, although
/// it says `CA:TRUE` (what `openssl req -x509` makes by default), which the Web PKI refuses as a
/// server certificate. It must still name the server, and be in its validity period (checked
/// before the CA flag, so the refusal for that flag says the dates held).
#[derive(Debug)]
struct Pinning {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    /// The certificates of the CA file, byte for byte.
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
