//! YAML straight into the JSON value tree the loader reads, tolerating what real specs contain:
//! integers beyond 64 bits, non-string keys (`200:`), tags, and merge keys (`<<`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deserializes any YAML node as a JSON value.
pub(super) struct Tree;

impl<'de> DeserializeSeed<'de> for Tree {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

fn float(f: f64) -> Value {
    Number::from_f64(f).map(Value::Number).unwrap_or_else(|| Value::String(f.to_string()))
}

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Tree.deserialize(d)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    // Schemas hold integers such as -9223372036854776000 that no 64-bit type holds.
    fn visit_i128<E>(self, n: i128) -> Result<Value, E> {
        Ok(float(n as f64))
    }

    fn visit_u128<E>(self, n: u128) -> Result<Value, E> {
        Ok(float(n as f64))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(float(f))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(Tree)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(Tree)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    /// A tagged node (`!foo value`): the tag means nothing to routing, the value is kept.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        let (_tag, contents): (de::IgnoredAny, _) = data.variant()?;
        contents.newtype_variant_seed(Tree)
    }
}

/// A mapping key as a string: `200:` is a response code, not a number.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        match Tree.deserialize(d)? {
            Value::String(s) => Ok(s),
            Value::Null => Ok("null".to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Array(_) => Err(de::Error::custom("a list cannot be a mapping key here")),
            Value::Object(_) => Err(de::Error::custom("a map cannot be a mapping key here")),
        }
    }
}

/// Applies YAML merge keys: `<<: *base` (or a list of them) fills in keys the map lacks.
pub(super) fn apply_merges(value: &mut Value) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(apply_merges),
        Value::Object(map) => {
            for v in map.values_mut() {
                apply_merges(v);
            }
            if let Some(merge) = map.shift_remove("<<") {
                let sources = match merge {
                    Value::Array(list) => list,
                    other => vec![other],
                };
                // Earlier sources win over later ones, and the map's own keys over all.
                for source in sources {
                    if let Value::Object(source) = source {
                        for (k, v) in source {
                            map.entry(k).or_insert(v);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}
