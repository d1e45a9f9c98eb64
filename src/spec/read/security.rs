//! Security: the requirements an operation or the document lists, and the schemes they name
//! (where an API key or an `Authorization` credential is sent).

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::reader::Reader;
use crate::spec::model::*;
use crate::spec::pointer::push;

impl Reader<'_> {
    pub(super) fn security(&mut self, value: Option<&Value>, at: &str) -> Option<Vec<Requirement>> {
        let list = value?.as_array().or_else(|| {
            self.warning(at, "`security` should be a list of requirements; ignored");
            None
        })?;
        Some(
            list.iter()
                .map(|req| Requirement(req.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()))
                .collect(),
        )
    }

    pub(super) fn security_schemes(
        &mut self,
        root: &Map<String, Value>,
        version: Version,
    ) -> IndexMap<String, SecurityScheme> {
        let (map, at) = if version == Version::Swagger2 {
            (root.get("securityDefinitions"), "/securityDefinitions".to_string())
        } else {
            (root.get("components").and_then(|c| c.get("securitySchemes")), "/components/securitySchemes".to_string())
        };
        let mut out = IndexMap::new();
        let Some(map) = map.and_then(Value::as_object) else {
            return out;
        };
        for (name, value) in map {
            let here = push(&at, name);
            let Some(value) = self.follow(value, &here) else {
                continue;
            };
            out.insert(name.clone(), security_scheme(value));
        }
        out
    }
}

fn security_scheme(value: &Value) -> SecurityScheme {
    let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("");
    match text("type") {
        "apiKey" => {
            let location = match text("in") {
                "header" => ParameterIn::Header,
                "query" => ParameterIn::Query,
                "cookie" => ParameterIn::Cookie,
                _ => ParameterIn::Other,
            };
            if location == ParameterIn::Other || text("name").is_empty() {
                SecurityScheme::Opaque
            } else {
                SecurityScheme::ApiKey { name: text("name").to_string(), location }
            }
        }
        "http" => SecurityScheme::Authorization { scheme: text("scheme").to_ascii_lowercase() },
        "basic" => SecurityScheme::Authorization { scheme: "basic".to_string() },
        "oauth2" | "openIdConnect" => SecurityScheme::Authorization { scheme: "bearer".to_string() },
        _ => SecurityScheme::Opaque,
    }
}
