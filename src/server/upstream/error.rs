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
    /// The CA file, or the system's roots, cannot be trusted as given.
    #[error("{}", .0.about("upstream", "--upstream-ca-file"))]
    Trust(crate::trust::TrustError),
    /// `--upstream-server-name` is not a name or an address.
    #[error("--upstream-server-name {0:?} is not a host name or an address")]
    ServerName(String),
}
