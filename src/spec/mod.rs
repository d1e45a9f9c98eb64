//! Loading an OpenAPI document (Swagger 2.0, OpenAPI 3.0 to 3.2; JSON or YAML) into the
//! tolerant model of what routing and limiting read.

pub mod fetch;
pub mod model;
pub mod overlay;
pub mod pointer;
pub mod read;
mod source;

pub use model::{Document, Version};
pub use source::{Format, MAX_NESTING, ReadError, Source};
