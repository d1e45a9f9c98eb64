//! The canonical spelling of a request path: the one form routing and forwarding agree on, so
//! no other spelling of a path can reach an operation without passing its bounds.

use std::borrow::Cow;

/// Why a request path cannot be canonicalized; the request is malformed (400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/` (an absolute URI or `*` form, or garbage).
    #[error("the request path must start with `/`")]
    NotAbsolute,
    /// A `%` not followed by two hex digits; holds the escape and up to two characters after it.
    #[error("the request path has a malformed percent-escape near {0:?}")]
    BadEscape(String),
    /// An escaped slash (`%2F`), an escaped backslash (`%5C`) or a raw backslash, under
    /// `--escaped-slashes reject`; holds it and up to two characters after it.
    #[error(
        "the request path has an escaped slash or a backslash ({0:?}), which upstreams read differently; \
         opbound refuses them (--escaped-slashes reject)"
    )]
    EscapedSlash(String),
}

/// What a `%2F` or `%5C` in a request path gets. Upstreams disagree: Werkzeug decodes `%2F`
/// before routing (so `/a%2Fb` runs the view for `/a/b`), Express and Go route it as part of its
/// segment. A limiter that reads it one way in front of an upstream that reads it the other
/// charges one operation and lets another run. Envoy's `path_with_escaped_slashes_action` is
/// the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// Refuse the request (400): the safe default, whatever the upstream does. A backslash,
    /// escaped or not, is refused too.
    #[default]
    Reject,
    /// `%2F` is a `/`: routed and forwarded as one, so the upstream runs what was charged.
    Unescape,
    /// `%2F` stays an escape inside its segment; right for upstreams that route on the raw path
    /// (Express, Go `net/http`), wrong for those that decode first (Werkzeug).
    Keep,
}

impl std::str::FromStr for EscapedSlashes {
    type Err = crate::choice::NotOneOf;

    fn from_str(s: &str) -> Result<EscapedSlashes, crate::choice::NotOneOf> {
        match s {
            "reject" => Ok(EscapedSlashes::Reject),
            "unescape" => Ok(EscapedSlashes::Unescape),
            "keep" => Ok(EscapedSlashes::Keep),
            _ => Err(crate::choice::NotOneOf::new(s, "reject, unescape or keep")),
        }
    }
}

/// Whether `b` starts an escaped slash or backslash: `%2F`, `%2f`, `%5C`, `%5c`.
fn escaped_slash_at(b: &[u8]) -> bool {
    matches!(b, [b'%', b'2', b'f' | b'F', ..] | [b'%', b'5', b'c' | b'C', ..])
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Characters a path segment may hold unescaped (RFC 3986 `pchar` minus `%`).
fn is_pchar(b: u8) -> bool {
    // A table: every byte of every request path goes through here.
    PCHAR[usize::from(b)]
}

const PCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(c, b'-' | b'.' | b'_' | b'~')
            || matches!(c, b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@');
        b += 1;
    }
    table
};

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Canonicalizes a request path (without its query): unreserved characters percent-decoded, other
/// escapes upper-cased, characters outside `pchar` escaped, dot segments removed, repeated
/// slashes collapsed, a trailing slash kept. `%2F` and `%5C` get what `escaped` says.
pub fn canonical_path(raw: &str, escaped: EscapedSlashes) -> Result<Cow<'_, str>, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_canonical(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    let bytes = raw.as_bytes();
    match escaped {
        EscapedSlashes::Keep => {}
        EscapedSlashes::Reject => {
            if let Some(at) = (0..bytes.len()).find(|&i| bytes[i] == b'\\' || escaped_slash_at(&bytes[i..])) {
                return Err(PathError::EscapedSlash(raw[at..].chars().take(3).collect()));
            }
        }
        EscapedSlashes::Unescape => {
            if (0..bytes.len()).any(|i| matches!(bytes[i..], [b'%', b'2', b'f' | b'F', ..])) {
                let unescaped = raw.replace("%2F", "/").replace("%2f", "/");
                return canonical_path(&unescaped, EscapedSlashes::Keep).map(|p| Cow::Owned(p.into_owned()));
            }
        }
    }
    canonical_segments(raw)
}

/// The slow path of [`canonical_path`]: segment by segment.
fn canonical_segments(raw: &str) -> Result<Cow<'_, str>, PathError> {
    let bytes = raw.as_bytes();
    let mut segments: Vec<String> = Vec::new();
    let mut trailing = false;
    for segment in raw[1..].split('/') {
        let decoded = canonical_piece_bytes(segment.as_bytes()).map_err(|at| {
            let start = segment.as_ptr() as usize - bytes.as_ptr() as usize + at;
            // The escape and up to two characters after it (which may be several bytes each).
            PathError::BadEscape(raw[start..].chars().take(3).collect())
        })?;
        trailing = false;
        match decoded.as_str() {
            "" => trailing = true,
            "." => trailing = true,
            ".." => {
                segments.pop();
                trailing = true;
            }
            _ => segments.push(decoded),
        }
    }
    let mut out = String::with_capacity(raw.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// Whether a path is already canonical, so the hot path allocates nothing for it.
fn is_canonical(raw: &str) -> bool {
    let b = raw.as_bytes();
    let mut seg_start = 1;
    for i in 1..=b.len() {
        if i == b.len() || b[i] == b'/' {
            let seg = &b[seg_start..i];
            let last = i == b.len();
            if (seg.is_empty() && !last) || seg == b"." || seg == b".." {
                return false;
            }
            seg_start = i + 1;
            continue;
        }
        if !is_pchar(b[i]) {
            return false; // `%`, or a character that must be escaped
        }
    }
    true
}

/// Canonicalizes the characters of a segment or part of one; `Err(offset)` at a bad escape.
fn canonical_piece_bytes(piece: &[u8]) -> Result<String, usize> {
    let mut out = String::with_capacity(piece.len());
    let mut i = 0;
    while i < piece.len() {
        let b = piece[i];
        if b == b'%' {
            let hi = piece.get(i + 1).copied().and_then(crate::spec::pointer::hex).ok_or(i)?;
            let lo = piece.get(i + 2).copied().and_then(crate::spec::pointer::hex).ok_or(i)?;
            let c = hi << 4 | lo;
            if is_unreserved(c) {
                out.push(c as char);
            } else {
                out.extend(['%', HEX[usize::from(hi)] as char, HEX[usize::from(lo)] as char]);
            }
            i += 3;
        } else if is_pchar(b) {
            out.push(b as char);
            i += 1;
        } else {
            out.extend(['%', HEX[usize::from(b >> 4)] as char, HEX[usize::from(b & 15)] as char]);
            i += 1;
        }
    }
    Ok(out)
}

/// Canonicalizes literal text from a path template, where a stray `%` is taken literally.
pub fn canonical_literal(text: &str) -> String {
    match canonical_piece_bytes(text.as_bytes()) {
        Ok(s) => s,
        Err(_) => canonical_piece_bytes(text.replace('%', "%25").as_bytes()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        for (raw, want) in [
            ("/", "/"),
            ("/x", "/x"),
            ("//x", "/x"),
            ("/./x", "/x"),
            ("/%78", "/x"),
            ("/a/../x", "/x"),
            ("/a/%2e%2E/x", "/x"),
            ("/x/", "/x/"),
            ("/x//", "/x/"),
            ("/x/.", "/x/"),
            ("/x/..", "/"),
            ("/../../x", "/x"),
            ("/a%2Fb/c", "/a%2Fb/c"),
            ("/a%2fb", "/a%2Fb"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/a b", "/a%20b"),
            ("/café", "/caf%C3%A9"),
            ("/files/{id}", "/files/%7Bid%7D"),
            ("/v1/{name}:cancel", "/v1/%7Bname%7D:cancel"),
            ("/a;b=c/@d", "/a;b=c/@d"),
        ] {
            assert_eq!(canonical_path(raw, EscapedSlashes::Keep).unwrap(), want, "{raw}");
            let again = canonical_path(want, EscapedSlashes::Keep).unwrap();
            assert_eq!(again, want, "canonical form of {raw} must be a fixed point");
        }
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        assert!(matches!(canonical_path("/v1/pets/42", EscapedSlashes::Reject).unwrap(), Cow::Borrowed(_)));
        assert!(matches!(canonical_path("/v1/pets/", EscapedSlashes::Reject).unwrap(), Cow::Borrowed(_)));
        assert!(matches!(canonical_path("/v1//pets", EscapedSlashes::Reject).unwrap(), Cow::Owned(_)));
    }

    #[test]
    fn malformed_paths() {
        assert_eq!(canonical_path("x", EscapedSlashes::Reject), Err(PathError::NotAbsolute));
        assert_eq!(canonical_path("/a%zzb", EscapedSlashes::Reject), Err(PathError::BadEscape("%zz".into())));
        assert_eq!(canonical_path("/a%4", EscapedSlashes::Reject), Err(PathError::BadEscape("%4".into())));
    }

    /// Found by fuzzing: the message cut a multi-byte character in half and panicked.
    #[test]
    fn a_bad_escape_before_a_multibyte_character_is_reported_not_a_panic() {
        assert_eq!(canonical_path("/2%aѸ/", EscapedSlashes::Reject), Err(PathError::BadEscape("%aѸ".into())));
    }

    /// Issue 9, item 5: `%2F` kept in its segment let `/api%2Flimited` past the bound of
    /// `/api/limited` in front of Werkzeug, which decodes it before routing.
    #[test]
    fn escaped_slashes_follow_the_policy() {
        use EscapedSlashes::*;
        for (raw, reject, unescape, keep) in [
            ("/api%2Flimited", None, Some("/api/limited"), Some("/api%2Flimited")),
            ("/api%2flimited", None, Some("/api/limited"), Some("/api%2Flimited")),
            ("/items/1%2Fparts%2F2", None, Some("/items/1/parts/2"), Some("/items/1%2Fparts%2F2")),
            ("/a%2F..%2F..%2Fb", None, Some("/b"), Some("/a%2F..%2F..%2Fb")),
            ("/api%5Climited", None, Some("/api%5Climited"), Some("/api%5Climited")),
            ("/api\\limited", None, Some("/api%5Climited"), Some("/api%5Climited")),
            ("/api%2Elimited", Some("/api.limited"), Some("/api.limited"), Some("/api.limited")),
            ("/a%252Fb", Some("/a%252Fb"), Some("/a%252Fb"), Some("/a%252Fb")),
        ] {
            let got = |e| canonical_path(raw, e).ok().map(Cow::into_owned);
            assert_eq!(got(Reject).as_deref(), reject, "{raw} with reject");
            assert_eq!(got(Unescape).as_deref(), unescape, "{raw} with unescape");
            assert_eq!(got(Keep).as_deref(), keep, "{raw} with keep");
        }
        assert!(matches!(canonical_path("/a%2fb", Reject), Err(PathError::EscapedSlash(s)) if s == "%2f"));
    }
}
