//! A spec fetched from the running service (`--spec http://127.0.0.1:8000/openapi.json`): a GET
//! within a timeout, the body capped, and `If-None-Match` / `If-Modified-Since` from the last
//! answer, so a document that did not change costs a `304` and is not read again.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;

/// The largest document fetched: larger is refused (a real spec of a thousand operations is a
/// few MB).
pub const MAX_BYTES: usize = 32 << 20;

/// How long one fetch, answer and body included, may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How a spec URL is reached: whom `https://` trusts (`--spec-ca-file`, or the system's roots)
/// and the name it asks for (`--spec-server-name`, or the URL's host).
#[derive(Clone, Default)]
pub struct Fetch {
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    server_name: Option<rustls::pki_types::ServerName<'static>>,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch").field("ca_file", &self.tls.is_some()).field("server_name", &self.server_name).finish()
    }
}

impl Fetch {
    /// Trusts the CA certificates in `ca_pem` (a certificate given itself is trusted as the
    /// server's own), or the system's roots when `None`; asks for `server_name`, or the URL's
    /// host.
    pub(crate) fn new(ca_pem: Option<&[u8]>, server_name: Option<&str>) -> Result<Fetch, FetchError> {
        let server_name = match server_name {
            Some(name) => Some(
                rustls::pki_types::ServerName::try_from(name.to_string())
                    .map_err(|_| FetchError::ServerName(name.to_string()))?,
            ),
            None => None,
        };
        let tls = match ca_pem {
            Some(pem) => Some(std::sync::Arc::new(crate::trust::client_config(Some(pem)).map_err(FetchError::Trust)?)),
            None => None,
        };
        Ok(Fetch { tls, server_name })
    }

    /// Reaches the spec as another client already set up reaches its server: `serve` fetches a
    /// spec its upstream serves with the upstream's TLS flags.
    pub(crate) fn with_config(config: std::sync::Arc<rustls::ClientConfig>, server_name: Option<&str>) -> Fetch {
        let server_name = server_name.and_then(|n| rustls::pki_types::ServerName::try_from(n.to_string()).ok());
        Fetch { tls: Some(config), server_name }
    }

    /// Whether this is the default: the system's roots and the URL's host.
    pub(crate) fn is_default(&self) -> bool {
        self.tls.is_none() && self.server_name.is_none()
    }
}

/// Why the flags for reaching a spec URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The CA file cannot be trusted as given.
    #[error("{}", .0.about("spec", "--spec-ca-file"))]
    Trust(crate::trust::TrustError),
    /// `--spec-server-name` is not a name or an address.
    #[error("--spec-server-name {0:?} is not a host name or an address")]
    ServerName(String),
}

/// Whether a spec is named by an `http://` or `https://` URL rather than a file.
pub fn is_url(spec: &Path) -> bool {
    spec.to_str().is_some_and(|s| {
        let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
        lower.starts_with("http://") || lower.starts_with("https://")
    })
}

/// The last answer for a URL, whose validators the next fetch sends.
struct Cached {
    etag: Option<String>,
    last_modified: Option<String>,
    text: String,
}

fn cache() -> &'static Mutex<HashMap<String, Cached>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Cached>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Fetches a spec's text, or says why not (for a message that names the URL). Blocks: the fetch
/// runs on a thread of its own, so it may be called from anywhere, a runtime's thread included.
pub fn fetch(url: &str, how: &Fetch) -> Result<String, String> {
    let (url, how) = (url.to_string(), how.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a fetch: {e}"))?;
        runtime
            .block_on(async { tokio::time::timeout(TIMEOUT, get(&url, &how)).await })
            .unwrap_or_else(|_| Err(format!("no whole answer within {}s", TIMEOUT.as_secs())))
    })
    .join()
    .unwrap_or_else(|_| Err("the fetch failed".to_string()))
}

async fn get(url: &str, how: &Fetch) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    let config = match &how.tls {
        Some(config) => (**config).clone(),
        None => crate::trust::client_config(None).map_err(|e| e.about("spec", "--spec-ca-file"))?,
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
    let connector = match &how.server_name {
        Some(name) => builder
            .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name.clone()))
            .enable_http1()
            .build(),
        None => builder.enable_http1().build(),
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let mut request = http::Request::get(uri).header(http::header::ACCEPT, "application/json, application/yaml, */*");
    let validators = {
        let cache = cache().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(url).map(|c| (c.etag.clone(), c.last_modified.clone()))
    };
    if let Some((etag, modified)) = &validators {
        if let Some(etag) = etag {
            request = request.header(http::header::IF_NONE_MATCH, etag);
        }
        if let Some(modified) = modified {
            request = request.header(http::header::IF_MODIFIED_SINCE, modified);
        }
    }
    let request = request.body(http_body_util::Empty::new()).map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| describe(&e))?;
    let status = response.status();
    if status == http::StatusCode::NOT_MODIFIED {
        let cache = cache().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        return cache.get(url).map(|c| c.text.clone()).ok_or_else(|| "answered 304 to a first fetch".to_string());
    }
    if !status.is_success() {
        return Err(format!("answered {status}"));
    }
    let header =
        |name: http::header::HeaderName| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (etag, last_modified) = (header(http::header::ETAG), header(http::header::LAST_MODIFIED));
    if header(http::header::CONTENT_TYPE).is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html")) {
        return Err("answered an HTML page (text/html), not an OpenAPI document".to_string());
    }
    let limited = http_body_util::Limited::new(response.into_body(), MAX_BYTES);
    let body = limited.collect().await.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            format!("the document is over {} MB", MAX_BYTES >> 20)
        } else {
            format!("the answer broke off: {e}")
        }
    })?;
    let text = String::from_utf8(body.to_bytes().to_vec()).map_err(|_| "the document is not UTF-8 text".to_string())?;
    let mut cache = cache().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    cache.insert(url.to_string(), Cached { etag, last_modified, text: text.clone() });
    Ok(text)
}

/// A client error with its cause (connection refused, TLS), not only "client error (Connect)".
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message = format!("{message}: {s}");
        source = s.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_files() {
        assert!(is_url(Path::new("http://127.0.0.1:8000/openapi.json")));
        assert!(is_url(Path::new("HTTPS://api.example/v3/api-docs")));
        assert!(!is_url(Path::new("api.yaml")));
        assert!(!is_url(Path::new("./http/openapi.json")));
    }
}
