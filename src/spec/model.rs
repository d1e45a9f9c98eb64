//! The tolerant model: only what routing and limiting read from a spec, nothing of its schemas.

use indexmap::IndexMap;
use serde_json::Value;

/// Which generation of the specification the document declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// `swagger: "2.0"`: one `host` and `basePath`, parameters may sit `in: body`.
    Swagger2,
    /// `openapi: 3.0.x`: `servers` instead of `basePath`.
    OpenApi30,
    /// `openapi: 3.1.x`.
    OpenApi31,
    /// `openapi: 3.2.x`: adds the `QUERY` method and `additionalOperations`.
    OpenApi32,
}

impl Version {
    /// The version as people write it in prose (`OpenAPI 3.1`), for messages and reports.
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
    /// JSON pointer to the value in the document, so findings about it can say where it is.
    pub pointer: String,
    /// The value as written.
    pub value: T,
}

/// The parts of a spec that opbound reads.
#[derive(Clone, Debug)]
pub struct Document {
    /// The specification version the document declares in `openapi` or `swagger`.
    pub version: Version,
    /// Base paths from the document's `servers` (or Swagger's `basePath`); at least one.
    pub base_paths: Vec<String>,
    /// Every key of `paths`, in the order written.
    pub path_items: Vec<PathItem>,
    /// The document-wide security requirement, if written.
    pub security: Option<Vec<Requirement>>,
    /// Security schemes by name (from `components/securitySchemes`, or Swagger's
    /// `securityDefinitions`), in the order written.
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
    /// The item's operations, one per method written.
    pub operations: Vec<Operation>,
}

/// One operation of a path item.
#[derive(Clone, Debug)]
pub struct Operation {
    /// The HTTP method, upper case (`GET`, `QUERY`, or an `additionalOperations` name as written).
    pub method: String,
    /// `operationId`, when written as a non-empty string.
    pub operation_id: Option<String>,
    /// Pointer to the operation object (inside the `$ref` target if the path item was a reference).
    pub pointer: String,
    /// Base paths from the operation's own `servers`, which override its path item's and the
    /// document's.
    pub base_paths: Option<Vec<String>>,
    /// The operation's own security requirement; `None` means the document-wide one applies.
    pub security: Option<Vec<Requirement>>,
    /// The operation's parameters together with its path item's shared ones; where both declare
    /// the same name and location, the operation's wins.
    pub parameters: Vec<Parameter>,
    /// The operation's own `x-rate-limit`.
    pub rate_limit: Option<Located<Value>>,
    /// The operation's `tags`, as written.
    pub tags: Vec<String>,
    /// The media types its `requestBody` declares (lower case, parameters cut): empty without a
    /// `requestBody`; `None` when unknown (Swagger 2, or a `requestBody` that is no map).
    pub body_media_types: Option<Vec<String>>,
}

/// A security requirement: all of these schemes together (an empty list allows anonymous calls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement(pub Vec<String>);

/// Where a parameter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParameterIn {
    /// A segment of the path template (`/pets/{id}`).
    Path,
    /// A query string parameter.
    Query,
    /// A request header.
    Header,
    /// A cookie.
    Cookie,
    /// Anywhere else (Swagger's `body` and `formData`, or an unknown `in`): nothing opbound can
    /// count by.
    Other,
}

/// A parameter an operation declares, as far as limiting needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    /// The name as written; header names keep their case here.
    pub name: String,
    /// Where the parameter is sent.
    pub location: ParameterIn,
}

/// How a caller presents a credential, as far as `per: token` needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecurityScheme {
    /// An API key in a header, query parameter or cookie.
    ApiKey {
        /// The header, query parameter or cookie name, as written.
        name: String,
        /// Where the key is sent: `Header`, `Query` or `Cookie`, never `Path` or `Other`.
        location: ParameterIn,
    },
    /// `Authorization: <scheme> <credential>` (bearer, basic, OAuth 2, OpenID Connect).
    Authorization {
        /// The HTTP auth scheme, lower case (`bearer`, `basic`); OAuth 2 and OpenID Connect are
        /// `bearer`.
        scheme: String,
    },
    /// A scheme that carries no credential opbound can read (mutual TLS, unknown types).
    Opaque,
}
