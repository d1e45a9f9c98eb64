//! Lone surrogate escapes in JSON text, which Python's `json.loads` and JavaScript's `JSON.parse`
//! keep in their strings and serde_json refuses.

/// JSON text with every lone surrogate escape inside its strings made `\uFFFD`; `None` when
/// there is none. One pass, escapes followed as a JSON reader does (`\\ud800` is a backslash and
/// text, not an escape).
pub(crate) fn replaced(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let (mut replaced, mut in_string, mut i) = (false, false, 0);
    while let Some(&b) = text.get(i) {
        match b {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let end = match surrogate_at(text, i) {
                    // A pair: one character, kept as written.
                    Some(0xD800..=0xDBFF) if matches!(surrogate_at(text, i + 6), Some(0xDC00..=0xDFFF)) => i + 12,
                    Some(_) => {
                        out.extend_from_slice(b"\\uFFFD");
                        replaced = true;
                        i += 6;
                        continue;
                    }
                    None => (i + 2).min(text.len()),
                };
                out.extend_from_slice(&text[i..end]);
                i = end;
                continue;
            }
            _ => {}
        }
        out.push(b);
        i += 1;
    }
    replaced.then_some(out)
}

/// The code unit of the `\uXXXX` escape at `at`, when it is one and a surrogate.
fn surrogate_at(text: &[u8], at: usize) -> Option<u16> {
    let escape = text.get(at..at + 6)?;
    if &escape[..2] != b"\\u" || !escape[2..].iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let unit = u16::from_str_radix(std::str::from_utf8(&escape[2..]).ok()?, 16).ok()?;
    (0xD800..=0xDFFF).contains(&unit).then_some(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lone_surrogates_inside_strings_are_replaced() {
        let text = |t: &[u8]| replaced(t).map(|r| String::from_utf8(r).unwrap());
        assert_eq!(text(br#"{"u":"ann"}"#), None, "nothing to replace: no second parse");
        assert_eq!(text(br#"{"u":"a\ud800b"}"#).as_deref(), Some(r#"{"u":"a\uFFFDb"}"#));
        assert_eq!(text(br#"{"u":"\ud83d\ude00"}"#), None, "a pair");
        assert_eq!(text(br#"{"u":"\\ud800"}"#), None, "an escaped backslash, then text");
        assert_eq!(text(br#"{"\udc00":1}"#).as_deref(), Some(r#"{"\uFFFD":1}"#), "in a member's name too");
    }
}
