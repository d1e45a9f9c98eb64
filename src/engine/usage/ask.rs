//! Usage asked for on a client's behalf. OpenAI's chat and legacy completions report a
//! stream's usage only when the request says `stream_options: {include_usage: true}`; a client
//! that did not say so would have its reservation stand, whatever it used. Where the operation
//! declares `stream_options`, opbound adds it to the JSON it forwards ([`ask`]), and takes out of
//! the stream what the client did not ask for ([`Unasked`]): the usage-only chunk before
//! `data: [DONE]`, and the `"usage": null` every other chunk then carries. The meter reads the
//! stream before that, so the usage is charged.

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use serde_json::value::RawValue;

/// The largest event [`Unasked`] holds while it looks at it; past it, the rest of the stream
/// passes as it comes.
const MAX_EVENT: usize = 1 << 20;

/// The request body with `stream_options.include_usage` set, when it is a JSON object that may
/// ask for a stream ([`may_stream`]) without asking for usage; `None` otherwise (sent as it is).
/// Every other member keeps its bytes; the object is written compactly.
pub fn ask(body: &[u8]) -> Option<Vec<u8>> {
    let mut members: IndexMap<String, Box<RawValue>> = serde_json::from_slice(body).ok()?;
    if !members.get("stream").is_some_and(|v| may_stream(v)) {
        return None;
    }
    let mut options: IndexMap<String, Box<RawValue>> = match members.get("stream_options") {
        None => IndexMap::new(),
        Some(raw) if raw.get() == "null" => IndexMap::new(),
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
    };
    if options.get("include_usage").is_some_and(|v| v.get() == "true") {
        return None;
    }
    options.insert("include_usage".to_string(), RawValue::from_string("true".to_string()).ok()?);
    let options = RawValue::from_string(write(&options)).ok()?;
    members.insert("stream_options".to_string(), options);
    Some(write(&members).into_bytes())
}

/// Whether an upstream may read `stream` as asking for a stream: any value Python takes as true
/// (all but `false`, `null`, a zero, `""`, `[]` and `{}`). pydantic, which vLLM and other
/// FastAPI servers read requests with, streams on `true`, `1`, `1.0` and the strings `"1"`,
/// `"t"`, `"true"`, `"y"`, `"yes"`, `"on"` in any case, all of them in this set: read as the
/// literal `true` only, they streamed without usage and paid the client's estimate. A value
/// pydantic reads as false (`"no"`, `"0"`) but Python as true is asked for too, since a server
/// that tests the raw value (`if body.get("stream")`) streams on it; vLLM then answers JSON,
/// which reports usage anyway. The falsy values are left alone: vLLM refuses `stream_options`
/// beside a `stream` Python reads as false, and no server streams on them.
pub fn may_stream(stream: &RawValue) -> bool {
    match serde_json::from_str::<serde_json::Value>(stream.get()) {
        Ok(serde_json::Value::Bool(b)) => b,
        Ok(serde_json::Value::Null) => false,
        Ok(serde_json::Value::Number(n)) => n.as_f64().is_none_or(|f| f != 0.0),
        Ok(serde_json::Value::String(s)) => !s.is_empty(),
        Ok(serde_json::Value::Array(a)) => !a.is_empty(),
        Ok(serde_json::Value::Object(o)) => !o.is_empty(),
        // A value this parser cannot hold (a number past f64) is not zero.
        Err(_) => true,
    }
}

/// An object from its members, compactly, each value as it was written.
fn write(members: &IndexMap<String, Box<RawValue>>) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    out
}

/// Takes out of an OpenAI event stream what asking for usage added: the chunk whose `choices`
/// is empty and whose `usage` is not null is dropped, and a top-level `"usage":null` is removed
/// from the others. Events are held until whole (at most [`MAX_EVENT`]); anything else passes
/// unchanged.
#[derive(Debug, Default)]
pub struct Unasked {
    held: BytesMut,
    /// An event too large to hold was met: the rest passes as it comes.
    passing: bool,
}

impl Unasked {
    /// What of `data` the client gets now: the whole events in it, as they would have been.
    pub fn filter(&mut self, data: &Bytes) -> Bytes {
        if self.passing {
            return data.clone();
        }
        self.held.extend_from_slice(data);
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.held) {
            let event = self.held.split_to(end);
            if let Some(kept) = unasked(&event) {
                out.extend_from_slice(&kept);
            }
        }
        if self.held.len() > MAX_EVENT {
            self.passing = true;
            out.extend_from_slice(&self.held.split());
        }
        out.freeze()
    }

    /// What is left when the stream ends: an unfinished event, as it came.
    pub fn finish(&mut self) -> Bytes {
        self.held.split().freeze()
    }
}

/// Where the first whole event in `bytes` ends (after its blank line).
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' || b == b'\r' {
            let next = if b == b'\r' && bytes.get(i + 1) == Some(&b'\n') { i + 2 } else { i + 1 };
            if i == line_start {
                return Some(next);
            }
            if b == b'\r' && i + 1 == bytes.len() {
                // A `\r` at the end may be half of `\r\n`: wait for the next byte.
                return None;
            }
            line_start = next;
            i = next;
            continue;
        }
        i += 1;
    }
    None
}

/// One whole event as the client would have had it: `None` for the usage-only chunk.
fn unasked(event: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok();
    let Some(text) = text else { return Some(event.to_vec()) };
    // One `data:` line, as OpenAI writes its chunks; any other shape passes unchanged.
    let mut data_lines = text.lines().filter(|l| l.starts_with("data:"));
    let (Some(line), None) = (data_lines.next(), data_lines.next()) else { return Some(event.to_vec()) };
    let data = line["data:".len()..].strip_prefix(' ').unwrap_or(&line["data:".len()..]);
    let Ok(mut members) = serde_json::from_str::<IndexMap<String, Box<RawValue>>>(data) else {
        return Some(event.to_vec());
    };
    let usage = members.get("usage").map(|v| v.get().trim().to_string());
    match usage.as_deref() {
        None => Some(event.to_vec()),
        Some("null") => {
            members.shift_remove("usage");
            Some(text.replacen(data, &write(&members), 1).into_bytes())
        }
        Some(_) if members.get("choices").is_some_and(|c| c.get().trim() == "[]") => None,
        Some(_) => Some(event.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asking_adds_include_usage_and_keeps_every_other_byte() {
        let asked = ask(br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"h\u00e9"}],"t":0.10}"#);
        assert_eq!(
            String::from_utf8(asked.unwrap()).unwrap(),
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"h\u00e9"}],"t":0.10,"stream_options":{"include_usage":true}}"#
        );
        let merged = ask(br#"{"stream": true, "stream_options": {"foo": 1, "include_usage": false}}"#);
        assert_eq!(
            String::from_utf8(merged.unwrap()).unwrap(),
            r#"{"stream":true,"stream_options":{"foo":1,"include_usage":true}}"#
        );
        assert_eq!(ask(br#"{"stream": false}"#), None, "not a stream");
        assert_eq!(ask(br#"{"model":"m"}"#), None, "not a stream");
        assert_eq!(ask(br#"{"stream":true,"stream_options":{"include_usage":true}}"#), None, "asked already");
        assert_eq!(ask(b"not json"), None);
        assert_eq!(ask(br#"[1,2]"#), None);
    }

    /// Issue 63: `"stream": "yes"` streamed from a pydantic server with no usage, and the
    /// request paid its estimate (1 for 10,034 tokens). Every spelling pydantic v2 reads as true
    /// is asked for; what Python reads as false is left as it came.
    #[test]
    fn every_spelling_a_server_may_stream_on_is_asked_for() {
        let truthy = [
            "true",
            "1",
            "1.0",
            "2",
            "-1",
            "1e0",
            "\"1\"",
            "\"t\"",
            "\"T\"",
            "\"true\"",
            "\"True\"",
            "\"TRUE\"",
            "\"y\"",
            "\"yes\"",
            "\"YES\"",
            "\"on\"",
            "\"On\"",
            "\"no\"",
            "\"0\"",
            "\"false\"",
            "\" \"",
            "[0]",
            "{\"a\":1}",
            "123456789012345678901234567890",
        ];
        for stream in truthy {
            let body = format!(r#"{{"model":"m","stream":{stream}}}"#);
            let asked = ask(body.as_bytes()).map(String::from_utf8);
            let expected = format!(r#"{{"model":"m","stream":{stream},"stream_options":{{"include_usage":true}}}}"#);
            assert_eq!(asked, Some(Ok(expected)), "stream: {stream}");
        }
        for stream in ["false", "null", "0", "-0", "0.0", "0e9", "\"\"", "[]", "{}"] {
            let body = format!(r#"{{"model":"m","stream":{stream}}}"#);
            assert_eq!(ask(body.as_bytes()), None, "stream: {stream}");
        }
    }

    #[test]
    fn the_stream_loses_only_what_asking_added_in_any_pieces() {
        let asked = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
            data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
            data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"total_tokens\":21}}\n\n\
            data: [DONE]\n\n";
        let unasked_stream = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
            data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
            data: [DONE]\n\n";
        for piece in [1, 2, 7, 1000] {
            let mut filter = Unasked::default();
            let mut out = Vec::new();
            for chunk in asked.as_bytes().chunks(piece) {
                out.extend_from_slice(&filter.filter(&Bytes::copy_from_slice(chunk)));
            }
            out.extend_from_slice(&filter.finish());
            assert_eq!(String::from_utf8(out).unwrap(), unasked_stream, "pieces of {piece}");
        }
    }

    #[test]
    fn other_events_and_an_unfinished_one_pass_unchanged() {
        let mut filter = Unasked::default();
        let stream =
            "event: ping\r\ndata: {\"usage\":{\"n\":1},\"choices\":[1]}\r\n\r\n: comment\n\ndata: {\"usage\":nul";
        let mut out = filter.filter(&Bytes::from(stream)).to_vec();
        out.extend_from_slice(&filter.finish());
        assert_eq!(String::from_utf8(out).unwrap(), stream);
    }
}
