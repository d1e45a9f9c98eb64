//! [`Key`], the value a bound counts a request under before hashing: present, missing, or
//! unclear.

use std::borrow::Cow;

use super::reading::Unclear;

/// The value a bound counts a request under, before hashing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key<'a> {
    /// The bytes to hash.
    Present(Cow<'a, [u8]>),
    /// The request lacks it ([`missing`](super::missing) says what, when it must be said).
    Missing,
    /// The request carries it in a way upstreams read differently: refused with a 400.
    Unclear(Unclear),
}

impl Key<'_> {
    /// The same key, owning its bytes.
    pub fn into_owned<'b>(self) -> Key<'b> {
        match self {
            Key::Present(bytes) => Key::Present(Cow::Owned(bytes.into_owned())),
            Key::Missing => Key::Missing,
            Key::Unclear(u) => Key::Unclear(u),
        }
    }
}

impl<'a> From<Result<Option<Cow<'a, [u8]>>, Unclear>> for Key<'a> {
    fn from(r: Result<Option<Cow<'a, [u8]>>, Unclear>) -> Key<'a> {
        match r {
            Ok(Some(v)) => Key::Present(v),
            Ok(None) => Key::Missing,
            Err(u) => Key::Unclear(u),
        }
    }
}

/// A string's bytes, borrowed or owned as the string was.
pub(super) fn cow_bytes(s: Cow<'_, str>) -> Cow<'_, [u8]> {
    match s {
        Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
        Cow::Owned(s) => Cow::Owned(s.into_bytes()),
    }
}
