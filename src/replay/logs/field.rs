//! What a line's fields give a record: the `--field` mappings ([`Mapping`], checked into
//! [`Field`]s and applied by [`apply`]), and the readings every format shares (a client
//! address, cookies, the arrival time).

use std::net::{IpAddr, SocketAddr};

pub use super::problems::MappingError;
use super::problems::{LineError, LogError};
use crate::engine::clock::Nanos;
use crate::replay::Record;

/// Which log field feeds which fact, beyond what a format names itself (`--field user=uid`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// `(fact, field)`: fact is `user`, `org`, `roles`, `token`, `address`, `header:NAME` or
    /// `cookie:NAME`; field a JSON key (dotted for nested objects) or a `name=value` field.
    pub fields: Vec<(String, String)>,
}

impl Mapping {
    /// Reads a `--field fact=field` value into `(fact, field)`, the fact checked and header
    /// names lower-cased.
    pub fn parse(text: &str) -> Result<(String, String), MappingError> {
        let Some((fact, field)) = text.split_once('=') else {
            return Err(MappingError::NoEquals(text.to_string()));
        };
        let (fact, field) = (fact.trim(), field.trim());
        if field.is_empty() {
            return Err(MappingError::NoField(text.to_string()));
        }
        let fact = Fact::parse(fact)?;
        Ok((fact.to_string(), field.to_owned()))
    }

    pub(super) fn compile(&self) -> Result<Vec<Field>, LogError> {
        let mut fields = Vec::with_capacity(self.fields.len());
        for (fact, path) in &self.fields {
            let fact = Fact::parse(fact).map_err(LogError::Mapping)?;
            if path.is_empty() {
                return Err(LogError::Mapping(MappingError::MappedToNothing(fact.to_string())));
            }
            fields.push(Field { fact, path: path.clone() });
        }
        Ok(fields)
    }
}

/// A fact a mapped field can supply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fact {
    User,
    Org,
    Roles,
    Token,
    Address,
    Header(String),
    Cookie(String),
}

impl Fact {
    fn parse(text: &str) -> Result<Fact, MappingError> {
        let named = |prefix: &str| text.strip_prefix(prefix).filter(|name| !name.is_empty());
        Ok(match text {
            "user" => Fact::User,
            "org" => Fact::Org,
            "roles" => Fact::Roles,
            "token" => Fact::Token,
            "address" => Fact::Address,
            _ => {
                if let Some(name) = named("header:") {
                    Fact::Header(name.to_ascii_lowercase())
                } else if let Some(name) = named("cookie:") {
                    Fact::Cookie(name.to_owned())
                } else {
                    return Err(MappingError::UnknownFact(text.to_string()));
                }
            }
        })
    }

    /// The entry of [`Format::lacks`] this fact fills.
    pub(super) fn lack(&self) -> Option<&'static str> {
        match self {
            Fact::User => Some("user"),
            Fact::Org => Some("org"),
            Fact::Roles => Some("roles"),
            Fact::Token => Some("token"),
            Fact::Address | Fact::Header(_) | Fact::Cookie(_) => None,
        }
    }
}

impl std::fmt::Display for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fact::User => f.write_str("user"),
            Fact::Org => f.write_str("org"),
            Fact::Roles => f.write_str("roles"),
            Fact::Token => f.write_str("token"),
            Fact::Address => f.write_str("address"),
            Fact::Header(name) => write!(f, "header:{name}"),
            Fact::Cookie(name) => write!(f, "cookie:{name}"),
        }
    }
}

/// One checked `--field` mapping.
#[derive(Clone, Debug)]
pub(super) struct Field {
    pub(super) fact: Fact,
    pub(super) path: String,
}

/// A mapped field's value on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Value {
    Text(String),
    List(Vec<String>),
}

impl Value {
    /// The single value: a list gives its first entry (Caddy logs each header as an array).
    pub(super) fn first(self) -> Option<String> {
        match self {
            Value::Text(text) => Some(text),
            Value::List(list) => list.into_iter().next(),
        }
    }
}

/// Sets every mapped fact from the line's fields, overriding what the format read itself; a field
/// the line does not have leaves its fact empty.
pub(super) fn apply(
    fields: &[Field],
    record: &mut Record,
    lookup: impl Fn(&str) -> Option<Value>,
) -> Result<(), LineError> {
    for field in fields {
        let value = lookup(&field.path);
        match &field.fact {
            Fact::User => record.user = value.and_then(Value::first),
            Fact::Org => record.org = value.and_then(Value::first),
            Fact::Token => record.token = value.and_then(Value::first),
            Fact::Roles => {
                record.roles = match value {
                    None => Vec::new(),
                    Some(Value::List(list)) => list,
                    // A JSON array written into a text field (`roles="[\"a\",\"b\"]"`).
                    Some(Value::Text(text)) if text.starts_with('[') => serde_json::from_str(&text)
                        .map_err(|_| LineError::unreadable(&field.path, &text, "a JSON array of strings"))?,
                    Some(Value::Text(text)) => {
                        text.split(',').map(str::trim).filter(|role| !role.is_empty()).map(str::to_owned).collect()
                    }
                }
            }
            Fact::Address => {
                record.client = match value.and_then(Value::first) {
                    None => None,
                    Some(text) => {
                        Some(address(&text).ok_or_else(|| LineError::unreadable(&field.path, &text, "an IP address"))?)
                    }
                }
            }
            Fact::Header(name) => {
                record.headers.retain(|(header, _)| header != name);
                if let Some(value) = value.and_then(Value::first) {
                    record.headers.push((name.clone(), value));
                }
            }
            Fact::Cookie(name) => {
                record.cookies.retain(|(cookie, _)| cookie != name);
                if let Some(value) = value.and_then(Value::first) {
                    record.cookies.push((name.clone(), value));
                }
            }
        }
    }
    Ok(())
}

/// A client address as logs write it: an IP, `ip:port`, `[v6]:port`, or an `X-Forwarded-For`
/// list, whose last entry is the one the nearest proxy saw.
pub(super) fn address(text: &str) -> Option<IpAddr> {
    let last = text.rsplit(',').next()?.trim();
    last.parse::<IpAddr>()
        .ok()
        .or_else(|| last.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
        .or_else(|| last.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// `Cookie` header values split into `(name, value)` pairs.
pub(super) fn cookies(header: &str) -> impl Iterator<Item = (String, String)> + '_ {
    header.split(';').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let name = name.trim();
        (!name.is_empty()).then(|| (name.to_owned(), value.trim().to_owned()))
    })
}

/// Arrival time from a logged end time and duration.
pub(super) fn arrival(end: Nanos, duration: Option<Nanos>) -> Nanos {
    end.saturating_sub(duration.unwrap_or(0))
}
