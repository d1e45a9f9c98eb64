//! The tolerant model: only what routing and limiting read from a spec, nothing of its schemas.

use indexmap::IndexMap;
use serde_json::Value;

/// Which generation of the specification the document declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    Swagger2,
    OpenApi30,
    OpenApi31,
    OpenApi32,
}

impl Version {
    pub fn label(self) -> &'static str {
        match self {
            Version::Swagger2 => "Swagger 2.0",
            Version::OpenApi30 => "OpenAPI 3.0",
            Version::OpenApi31 => "OpenAPI 3.1",
            Version::OpenApi32 => "OpenAPI 3.2",
        }
    }
}

/// A value written in the document, with the JSON pointer where it was found.
#[derive(Clone, Debug, PartialEq)]
pub struct Located<T> {
    pub pointer: String,
    pub value: T,
}

/// The parts of a spec that opbound reads.
#[derive(Clone, Debug)]
pub struct Document {
    pub version: Version,
    /// Base paths from the document's `servers` (or Swagger's `basePath`); at least one.
    pub base_paths: Vec<String>,
    pub path_items: Vec<PathItem>,
    /// The document-wide security requirement, if written.
    pub security: Option<Vec<Requirement>>,
    pub security_schemes: IndexMap<String, SecurityScheme>,
    /// The document-level `x-rate-limit`: route bounds.
    pub route_bounds: Option<Located<Value>>,
    /// `x-rate-limit-policies`: named bounds, in the order written.
    pub policies: Vec<(String, Located<Value>)>,
    /// `x-rate-limit` on entries of the top-level `tags`: bounds for every operation with that
    /// tag, by tag name, in the order written.
    pub tag_bounds: Vec<(String, Located<Value>)>,
}

/// One key of `paths`, after following its `$ref`.
#[derive(Clone, Debug)]
pub struct PathItem {
    /// The key as written, including any `?query` or `#fragment` it carries.
    pub key: String,
    /// Pointer to the key in `paths`.
    pub pointer: String,
    /// Base paths from this item's own `servers`, if it has any.
    pub base_paths: Option<Vec<String>>,
    pub operations: Vec<Operation>,
}

/// One operation of a path item.
#[derive(Clone, Debug)]
pub struct Operation {
    /// The HTTP method, upper case (`GET`, `QUERY`, or an `additionalOperations` name as written).
    pub method: String,
    pub operation_id: Option<String>,
    /// Pointer to the operation object (inside the `$ref` target if the path item was a reference).
    pub pointer: String,
    pub base_paths: Option<Vec<String>>,
    pub security: Option<Vec<Requirement>>,
    pub parameters: Vec<Parameter>,
    /// The operation's own `x-rate-limit`.
    pub rate_limit: Option<Located<Value>>,
    /// The operation's `tags`, as written.
    pub tags: Vec<String>,
}

/// A security requirement: all of these schemes together (an empty list allows anonymous calls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement(pub Vec<String>);

/// Where a parameter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParameterIn {
    Path,
    Query,
    Header,
    Cookie,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    pub location: ParameterIn,
}

/// How a caller presents a credential, as far as `per: token` needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecurityScheme {
    /// An API key in a header, query parameter or cookie.
    ApiKey { name: String, location: ParameterIn },
    /// `Authorization: <scheme> <credential>` (bearer, basic, OAuth 2, OpenID Connect).
    Authorization { scheme: String },
    /// A scheme that carries no credential opbound can read (mutual TLS, unknown types).
    Opaque,
}
