//! The canonical spelling of a request path: the one form routing and forwarding agree on, so
//! no other spelling of a path can reach an operation without passing its bounds.

use std::borrow::Cow;

/// Why a request path cannot be canonicalized; the request is malformed (400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the request path must start with `/`")]
    NotAbsolute,
    #[error("the request path has a malformed percent-escape near {0:?}")]
    BadEscape(String),
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Characters a path segment may hold unescaped (RFC 3986 `pchar` minus `%`).
fn is_pchar(b: u8) -> bool {
    is_unreserved(b)
        || matches!(b, b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@')
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Canonicalizes a request path (without its query): unreserved characters percent-decoded, other
/// escapes upper-cased, characters outside `pchar` escaped, dot segments removed, repeated
/// slashes collapsed. `%2F` stays an escape inside its segment. A trailing slash is kept.
pub fn canonical_path(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_canonical(raw) {
        return Ok(Cow::Borrowed(raw));
    }
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
            assert_eq!(canonical_path(raw).unwrap(), want, "{raw}");
            assert_eq!(canonical_path(want).unwrap(), want, "canonical form of {raw} must be a fixed point");
        }
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        assert!(matches!(canonical_path("/v1/pets/42").unwrap(), Cow::Borrowed(_)));
        assert!(matches!(canonical_path("/v1/pets/").unwrap(), Cow::Borrowed(_)));
        assert!(matches!(canonical_path("/v1//pets").unwrap(), Cow::Owned(_)));
    }

    #[test]
    fn malformed_paths() {
        assert_eq!(canonical_path("x"), Err(PathError::NotAbsolute));
        assert_eq!(canonical_path("/a%zzb"), Err(PathError::BadEscape("%zz".into())));
        assert_eq!(canonical_path("/a%4"), Err(PathError::BadEscape("%4".into())));
    }

    /// Found by fuzzing: the message cut a multi-byte character in half and panicked.
    #[test]
    fn a_bad_escape_before_a_multibyte_character_is_reported_not_a_panic() {
        assert_eq!(canonical_path("/2%aѸ/"), Err(PathError::BadEscape("%aѸ".into())));
    }
}
