//! Keys and costs read from a request body: a JSON value at a pointer, or a form field. What
//! opbound cannot read exactly as the upstream would is missing, or unclear when the client
//! could choose which reading the upstream sees.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::facts::Facts;
use super::query::query_param;
use super::reading::Unclear;
use crate::policy::JsonPointer;
use crate::policy::source::FORM;

/// Facts with the body the server read for keys: `None` when it was not read (no bound needs
/// it, `opbound decide`) or was longer than `--max-key-body`.
pub struct WithBody<'a, F: ?Sized> {
    /// The rest of the request.
    pub facts: &'a F,
    /// The whole body, when read.
    pub body: Option<&'a [u8]>,
}

impl<F: Facts + ?Sized> Facts for WithBody<'_, F> {
    fn address(&self) -> std::net::IpAddr {
        self.facts.address()
    }

    fn headers(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.facts.headers(name)
    }

    fn named(&self, name: &http::HeaderName) -> impl Iterator<Item = &[u8]> {
        self.facts.named(name)
    }

    fn query_string(&self) -> Option<&str> {
        self.facts.query_string()
    }

    fn body(&self) -> Option<&[u8]> {
        self.body
    }
}

/// A JSON document as written, keeping every member of an object, duplicates included: serde's
/// `Value` keeps the last, as Python, JavaScript and Go do, while other parsers keep the first.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`, `true` or `false`: no key.
    Literal,
    /// A number, as serde_json prints it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object's members in order, duplicates kept.
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Json, E> {
        Ok(Json::Literal)
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Literal)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v).map(Json::Number).ok_or_else(|| E::custom("not a finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, Json>()? {
            members.push(member);
        }
        Ok(Json::Object(members))
    }
}

impl Json {
    /// Parses a body; `None` when it is not one JSON document. The body is read as Python's
    /// `json.loads` reads bytes (what Flask's `get_json` does), which is also what Express's
    /// parser accepts: a UTF-8 byte order mark is dropped, and UTF-16 or UTF-32 (by their mark,
    /// or by where the first bytes are zero, RFC 4627 §3) is decoded. A body an upstream reads
    /// as JSON but opbound did not would have no key here, and a client could choose that.
    ///
    /// A lone surrogate escape (`"ann\ud800"`), which `json.loads` and JavaScript's `JSON.parse`
    /// take into their strings and serde_json refuses, is read as U+FFFD: the body keeps its key,
    /// and spellings that differ only there share it (counted together, never apart).
    pub fn parse(body: &[u8]) -> Option<Json> {
        let text = utf8(body)?;
        match serde_json::from_slice(&text) {
            Ok(doc) => Some(doc),
            Err(_) => serde_json::from_slice(&super::surrogates::replaced(&text)?).ok(),
        }
    }

    /// The value at a pointer. `Err` when an object on the way names the member twice with
    /// different values; an array index is a decimal without leading zeros (RFC 6901).
    pub fn at(&self, pointer: &JsonPointer) -> Result<Option<&Json>, Unclear> {
        let mut here = self;
        for token in pointer.tokens() {
            here = match here {
                Json::Object(members) => {
                    let mut found = members.iter().filter(|(k, _)| k == token).map(|(_, v)| v);
                    let Some(first) = found.next() else { return Ok(None) };
                    if found.any(|v| v != first) {
                        return Err(Unclear::Repeated);
                    }
                    first
                }
                Json::Array(items) => {
                    let index = (token == "0" || !token.starts_with('0'))
                        .then(|| token.parse::<usize>().ok())
                        .flatten()
                        .filter(|_| token.bytes().all(|b| b.is_ascii_digit()));
                    match index.and_then(|i| items.get(i)) {
                        Some(v) => v,
                        None => return Ok(None),
                    }
                }
                _ => return Ok(None),
            };
        }
        Ok(Some(here))
    }
}

/// A JSON text as UTF-8, whatever Unicode encoding it came in; `None` when it does not decode.
fn utf8(body: &[u8]) -> Option<Cow<'_, [u8]>> {
    enum Encoding {
        Utf8,
        Utf16 { big: bool },
        Utf32 { big: bool },
    }
    let (encoding, skip) = match body {
        [0, 0, 0xFE, 0xFF, ..] => (Encoding::Utf32 { big: true }, 4),
        [0xFF, 0xFE, 0, 0, ..] => (Encoding::Utf32 { big: false }, 4),
        [0xFE, 0xFF, ..] => (Encoding::Utf16 { big: true }, 2),
        [0xFF, 0xFE, ..] => (Encoding::Utf16 { big: false }, 2),
        [0xEF, 0xBB, 0xBF, ..] => (Encoding::Utf8, 3),
        [0, b1, _, _, ..] => (if *b1 != 0 { Encoding::Utf16 { big: true } } else { Encoding::Utf32 { big: true } }, 0),
        [_, 0, b2, b3, ..] => {
            (if *b2 != 0 || *b3 != 0 { Encoding::Utf16 { big: false } } else { Encoding::Utf32 { big: false } }, 0)
        }
        [0, _] => (Encoding::Utf16 { big: true }, 0),
        [_, 0] => (Encoding::Utf16 { big: false }, 0),
        _ => (Encoding::Utf8, 0),
    };
    let rest = &body[skip..];
    let text: String = match encoding {
        Encoding::Utf8 => return Some(Cow::Borrowed(rest)),
        Encoding::Utf16 { big } => {
            if !rest.len().is_multiple_of(2) {
                return None;
            }
            let units = rest
                .chunks_exact(2)
                .map(|c| if big { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_le_bytes([c[0], c[1]]) });
            char::decode_utf16(units).collect::<Result<String, _>>().ok()?
        }
        Encoding::Utf32 { big } => {
            if !rest.len().is_multiple_of(4) {
                return None;
            }
            rest.chunks_exact(4)
                .map(|c| {
                    let n = if big {
                        u32::from_be_bytes([c[0], c[1], c[2], c[3]])
                    } else {
                        u32::from_le_bytes([c[0], c[1], c[2], c[3]])
                    };
                    char::from_u32(n)
                })
                .collect::<Option<String>>()?
        }
    };
    Some(Cow::Owned(text.into_bytes()))
}

/// Whether the body is compressed (`Content-Encoding` other than `identity`), which opbound
/// does not undo: its fields cannot be read.
fn encoded<F: Facts + ?Sized>(facts: &F) -> bool {
    match facts.header("content-encoding") {
        Ok(None) => false,
        Ok(Some(e)) => !e.eq_ignore_ascii_case(b"identity"),
        Err(_) => true,
    }
}

/// Whether a body was read and is compressed. Its fields are then unclear, not missing: the
/// upstream may well inflate it (Express does), so a client could otherwise pick to go
/// uncounted by compressing. A body not read at all (over `--max-key-body`) is missing.
pub(super) fn compressed<F: Facts + ?Sized>(facts: &F) -> bool {
    encoded(facts) && facts.body().is_some_and(|b| !b.is_empty())
}

/// The body's media type, when the body may be read as it: its one `Content-Type` without
/// parameters, lower case; `None` when it is absent, sent twice, or the body is encoded
/// (`Content-Encoding: gzip`), which opbound does not undo.
fn media_type<F: Facts + ?Sized>(facts: &F) -> Option<String> {
    match facts.header("content-encoding") {
        Ok(None) => {}
        Ok(Some(e)) if e.eq_ignore_ascii_case(b"identity") => {}
        _ => return None,
    }
    let value = facts.header("content-type").ok()??;
    let value = std::str::from_utf8(value).ok()?;
    Some(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

/// The JSON body, when the request has one opbound can read. Whatever `Content-Type` says:
/// many applications parse the body as JSON without looking (Flask's `get_json(force=True)`,
/// `json.loads(request.data)`), so a client that labels its JSON `text/plain` must not lose
/// its key by it.
pub(super) fn json_value<F: Facts + ?Sized>(facts: &F) -> Option<Json> {
    if encoded(facts) {
        return None;
    }
    Json::parse(facts.body()?)
}

/// The key at a pointer of a JSON body: a string's text or a number as written by serde_json.
/// Objects, arrays, `null`, booleans, no such member, no readable JSON body: missing.
pub fn json_key<F: Facts + ?Sized>(facts: &F, pointer: &JsonPointer) -> Result<Option<Cow<'static, [u8]>>, Unclear> {
    if compressed(facts) {
        return Err(Unclear::Encoded);
    }
    let Some(doc) = json_value(facts) else { return Ok(None) };
    Ok(match doc.at(pointer)? {
        Some(Json::String(s)) => Some(Cow::Owned(s.clone().into_bytes())),
        Some(Json::Number(n)) => Some(Cow::Owned(n.to_string().into_bytes())),
        _ => None,
    })
}

/// A field of a form-urlencoded body, read as query parameters are (see [`query_param`]).
pub fn form_key<'a, F: Facts + ?Sized>(facts: &'a F, name: &str) -> Result<Option<Cow<'a, str>>, Unclear> {
    if compressed(facts) {
        return Err(Unclear::Encoded);
    }
    if media_type(facts).as_deref() != Some(FORM) {
        return Ok(None);
    }
    match facts.body().map(std::str::from_utf8) {
        Some(Ok(text)) => query_param(text, name),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Given;

    fn head(content_type: &str) -> Given {
        Given {
            address: "192.0.2.1".parse().unwrap(),
            headers: vec![("content-type".into(), content_type.as_bytes().to_vec())],
            query: None,
        }
    }

    fn with<'a>(head: &'a Given, body: &'a str) -> WithBody<'a, Given> {
        WithBody { facts: head, body: Some(body.as_bytes()) }
    }

    fn pointer(p: &str) -> JsonPointer {
        JsonPointer::parse(p).unwrap()
    }

    #[test]
    fn json_keys_are_strings_or_numbers_and_the_rest_is_missing() {
        let key = |ct: &str, body: &str, p: &str| {
            json_key(&with(&head(ct), body), &pointer(p)).map(|k| k.map(|k| String::from_utf8(k.into_owned()).unwrap()))
        };
        let some = |s: &str| Ok(Some(s.to_string()));
        assert_eq!(key("application/json", r#"{"username":"ann"}"#, "/username"), some("ann"));
        assert_eq!(key("Application/JSON; charset=utf-8", r#"{"u":{"id":42}}"#, "/u/id"), some("42"));
        assert_eq!(key("application/vnd.api+json", r#"{"a/b":["x","y"]}"#, "/a~1b/1"), some("y"));
        assert_eq!(key("application/json", r#"{"u":"ann","u":"ann"}"#, "/u"), some("ann"));
        for (ct, body, p) in [
            ("application/json", r#"{"u":null}"#, "/u"),
            ("application/json", r#"{"u":true}"#, "/u"),
            ("application/json", r#"{"u":{"a":1}}"#, "/u"),
            ("application/json", r#"{"u":["a"]}"#, "/u"),
            ("application/json", r#"{"u":["a"]}"#, "/u/01"),
            ("application/json", r#"{"v":"ann"}"#, "/u"),
            ("application/json", r#"{"u":"ann""#, "/u"),
        ] {
            assert_eq!(key(ct, body, p), Ok(None), "{body} {p}");
        }
        // Labelled otherwise, or not at all, JSON is still JSON to many applications.
        assert_eq!(key("text/plain", r#"{"u":"ann"}"#, "/u"), some("ann"));
        assert_eq!(key("", r#"{"u":"ann"}"#, "/u"), some("ann"));
        assert_eq!(key("application/json", r#"{"u":"ann","u":"bob"}"#, "/u"), Err(Unclear::Repeated));
        assert_eq!(key("application/json", r#"{"a":{"u":1},"a":{"u":2}}"#, "/a/u"), Err(Unclear::Repeated));
        let mut gz = head("application/json");
        gz.headers.push(("content-encoding".into(), b"gzip".to_vec()));
        assert_eq!(json_key(&with(&gz, r#"{"u":"ann"}"#), &pointer("/u")), Err(Unclear::Encoded));
        assert_eq!(json_key(&WithBody { facts: &gz, body: None }, &pointer("/u")), Ok(None), "not read");
        let mut form = head(FORM);
        form.headers.push(("content-encoding".into(), b"br".to_vec()));
        assert_eq!(form_key(&with(&form, "u=ann"), "u").map(|k| k.map(|k| k.into_owned())), Err(Unclear::Encoded));
        let mut plain = head("application/json");
        plain.headers.push(("content-encoding".into(), b"Identity".to_vec()));
        assert_eq!(json_key(&with(&plain, r#"{"u":"ann"}"#), &pointer("/u")).map(|k| k.is_some()), Ok(true));
        let unread = head("application/json");
        assert_eq!(json_key(&WithBody { facts: &unread, body: None }, &pointer("/u")), Ok(None));
    }

    /// Python's `json.loads(bytes)` (Flask) reads these, and so must opbound, or a client could
    /// send its sign-in in UTF-16 and have no key.
    #[test]
    fn json_in_any_unicode_encoding_is_read() {
        let text = r#"{"username":"ann"}"#;
        let utf16 = |big: bool| -> Vec<u8> {
            text.encode_utf16().flat_map(|u| if big { u.to_be_bytes() } else { u.to_le_bytes() }).collect()
        };
        let utf32 = |big: bool| -> Vec<u8> {
            text.chars().flat_map(|c| if big { (c as u32).to_be_bytes() } else { (c as u32).to_le_bytes() }).collect()
        };
        let bom = |mark: &[u8], body: Vec<u8>| [mark, &body].concat();
        let bodies = [
            bom(&[0xEF, 0xBB, 0xBF], text.as_bytes().to_vec()),
            utf16(true),
            utf16(false),
            bom(&[0xFE, 0xFF], utf16(true)),
            bom(&[0xFF, 0xFE], utf16(false)),
            utf32(true),
            utf32(false),
            bom(&[0, 0, 0xFE, 0xFF], utf32(true)),
            bom(&[0xFF, 0xFE, 0, 0], utf32(false)),
        ];
        for body in bodies {
            let doc = Json::parse(&body).unwrap_or_else(|| panic!("{body:?}"));
            assert_eq!(doc.at(&pointer("/username")), Ok(Some(&Json::String("ann".into()))), "{body:?}");
        }
        assert_eq!(Json::parse(&utf16(false)[1..]), None, "an odd number of UTF-16 bytes");
        assert_eq!(Json::parse(&[0xFF, 0xFE, 0x00, 0xD8]), None, "a lone surrogate");
    }

    #[test]
    fn a_lone_surrogate_escape_keeps_the_key_as_python_and_javascript_read_it() {
        // Regression: serde_json refused the body, the key was missing, and `missing: pass` let
        // a request Flask and Express read whole go uncounted.
        let name = |body: &str| match Json::parse(body.as_bytes()).map(|d| d.at(&pointer("/u")).map(|v| v.cloned())) {
            Some(Ok(Some(Json::String(s)))) => s,
            other => panic!("{body}: {other:?}"),
        };
        for (body, read) in [
            (r#"{"u":"ann\ud800"}"#, "ann\u{FFFD}"),
            (r#"{"u":"\udc00ann"}"#, "\u{FFFD}ann"),
            (r#"{"u":"a\ud83dz", "v": "\ud800"}"#, "a\u{FFFD}z"),
            // A pair is one character; an escaped backslash before `ud800` is text.
            (r#"{"u":"\ud83d\ude00"}"#, "\u{1F600}"),
            (r#"{"u":"a\\ud800"}"#, "a\\ud800"),
            (r#"{"u":"\ud800\ud83d\ude00"}"#, "\u{FFFD}\u{1F600}"),
        ] {
            assert_eq!(name(body), read, "{body}");
        }
        assert_eq!(Json::parse(br#"{"u":"\ud800"#), None, "still one whole document");
    }

    #[test]
    fn form_keys_are_read_as_query_parameters_are() {
        let key = |ct: &str, body: &str| {
            let h = head(ct);
            form_key(&with(&h, body), "user").map(|k| k.map(|k| k.into_owned()))
        };
        assert_eq!(key(FORM, "user=ann+b&pw=x"), Ok(Some("ann b".to_string())));
        assert_eq!(key("application/x-www-form-urlencoded; charset=utf-8", "user=a&user=a"), Ok(Some("a".into())));
        assert_eq!(key(FORM, "user=ann&user=bob"), Err(Unclear::Repeated));
        assert_eq!(key("application/json", "user=ann"), Ok(None));
        assert_eq!(key(FORM, "pw=x"), Ok(None));
    }
}
