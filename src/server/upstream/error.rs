//! Why the upstream cannot be reached as given: its URL, or what TLS to it needs.

/// Why the upstream cannot be reached as given: its URL, or what TLS to it needs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// Not a URL at all.
    #[error("upstream {url:?} is not a URL: {source}")]
    NotAUrl {
        /// The URL as given.
        url: String,
        /// Why the `http` crate refused it.
        source: http::uri::InvalidUri,
    },
    /// Not `http://` or `https://`, or no host.
    #[error("upstream {0:?} must be an http:// or https:// URL with a host, like http://127.0.0.1:3000")]
    NotHttp(String),
    /// A query, which no request could keep.
    #[error("upstream {0:?} cannot have a query")]
    Query(String),
    /// A certificate in the CA file is not PEM that can be read.
    #[error("the upstream CA file holds a certificate that cannot be read: {0}")]
    CaUnreadable(String),
    /// rustls refuses a certificate in the CA file.
    #[error("the upstream CA file holds a certificate rustls refuses: {0}")]
    CaRefused(rustls::Error),
    /// The CA file holds no certificate.
    #[error("the upstream CA file holds no PEM certificate")]
    NoCa,
    /// The system has no root certificates.
    #[error(
        "no system root certificates were found to verify the upstream; install ca-certificates or give --upstream-ca-file"
    )]
    NoSystemRoots,
    /// `--upstream-server-name` is not a name or an address.
    #[error("--upstream-server-name {0:?} is not a host name or an address")]
    ServerName(String),
    /// rustls could not be set up.
    #[error("cannot set up TLS to the upstream: {0}")]
    Tls(String),
}
