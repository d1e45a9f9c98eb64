//! Publishing the limits: the spec's bounds made visible to the people and tools that read specs,
//! as an OpenAPI document (`opbound document`) or a limits page in Markdown.

mod example;
mod markdown;
mod openapi;
mod refusals;
pub mod words;

pub use example::refusal_example;
pub use markdown::markdown;
pub use openapi::{document, render};
pub use refusals::{Refusals, refusals};
