//! Cookies, read as user agents write them and frameworks read them (RFC 6265).

use std::borrow::Cow;

use super::reading::trim;

/// A cookie's value from a `Cookie` header, read as user agents write it and frameworks read it
/// (RFC 6265, Werkzeug, the `cookie` package of Express): pairs split at `;`, whitespace around
/// names and values ignored, the first pair of a name wins, a quoted value unquoted (with
/// backslash escapes, as Python reads them), then percent-decoded (as Express does; for an
/// upstream that does not, two spellings of one value only share a budget).
pub fn cookie_value<'a>(header: &'a [u8], name: &str) -> Option<Cow<'a, [u8]>> {
    header.split(|b| *b == b';').find_map(|pair| {
        let eq = pair.iter().position(|b| *b == b'=')?;
        (trim(&pair[..eq]) == name.as_bytes()).then(|| cookie_text(trim(&pair[eq + 1..])))
    })
}

/// A cookie value without its quotes and escapes.
fn cookie_text(v: &[u8]) -> Cow<'_, [u8]> {
    let unquoted: Cow<'_, [u8]> = match v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")) {
        Some(inner) if inner.contains(&b'\\') => Cow::Owned(unslash(inner)),
        Some(inner) => Cow::Borrowed(inner),
        None => Cow::Borrowed(v),
    };
    if !unquoted.contains(&b'%') {
        return unquoted;
    }
    match std::str::from_utf8(&unquoted).ok().and_then(crate::spec::pointer::percent_decode) {
        Some(decoded) => Cow::Owned(decoded.into_bytes()),
        None => unquoted,
    }
}

/// `\"` is `"`, `\\` is `\`, `\054` is `,` (octal), as Python's cookie parser reads them.
fn unslash(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'\\' && i + 1 < v.len() {
            let octal = v.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
            match octal {
                Some(d) => {
                    let n = d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0'));
                    out.push(u8::try_from(n).unwrap_or(b'?'));
                    i += 4;
                }
                None => {
                    out.push(v[i + 1]);
                    i += 2;
                }
            }
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    out
}
