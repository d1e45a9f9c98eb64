//! Header fields as they were read: in their order, each name looked up once, each value still a
//! span of the head's bytes. A header map hashes every name and indexes every field as it is
//! filled; the usual proxied message is only passed on (its fields written into the next head
//! one after another) and looked up for a few names, so it is kept as this list.
//!
//! An upstream's response is made a map only where something must look fields up or take them
//! out: hyper's writer (HTTP/2, or an HTTP/1.1 connection hyper serves), a bound settled by a
//! response header, `--strip-header`, and a head with hop-by-hop fields to strip
//! ([`Fields::plain`]). A client's request read by opbound's own HTTP/1.1 server stays a list
//! on its way upstream (`Proxy::forward`); what reads a request's fields reads them through
//! [`Headers`], a list's or a map's alike.

use std::cell::RefCell;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// One field: its name and where its value lies in the head.
type Field = (HeaderName, u32, u32);

/// The most fields the proxy adds to a response head: the legacy RateLimit three, the draft's
/// two and `Retry-After`.
const ADDED_FIELDS: usize = 6;

/// The most lists a thread keeps, and the most fields a kept one has room for.
const KEPT: usize = 8;
const LARGEST: usize = 64;

thread_local!(
    // Boxes, not lists: a spare is handed out as a `Fields` without being boxed again.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<Inner>>> = const { RefCell::new(Vec::new()) }
);

/// A head's fields, in the order they came. Every value was checked as a field value
/// as it was read (httparse's rule is `HeaderValue`'s: no control byte but a tab, no DEL).
/// One pointer: the response it rides in is moved from future to future on its way out.
#[derive(Debug)]
pub struct Fields(Box<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// The head the values are spans of.
    head: Bytes,
    list: Vec<Field>,
    /// No field is hop-by-hop, or an `Upgrade`: the list can be passed on as it is.
    plain: bool,
}

impl Fields {
    /// An empty list over `head`, with room for `capacity` fields (the thread's spare, if any).
    pub(crate) fn new(head: Bytes, capacity: usize) -> Fields {
        let mut inner = SPARE.with(|spare| spare.borrow_mut().pop()).unwrap_or_default();
        inner.head = head;
        inner.plain = true;
        inner.list.reserve(capacity);
        Fields(inner)
    }

    /// Adds `name` with the value at `start..start + len` of the head. The value must be a valid
    /// field value; the head is at most `MAX_HEAD` long, so the span fits.
    pub(crate) fn push(&mut self, name: HeaderName, start: usize, len: usize) {
        debug_assert!(HeaderValue::from_bytes(&self.0.head[start..start + len]).is_ok());
        if is_hop_by_hop(&name) || name == http::header::UPGRADE {
            self.0.plain = false;
        }
        self.0.list.push((name, start as u32, len as u32));
    }

    /// The head the values are spans of.
    pub(crate) fn head(&self) -> &Bytes {
        &self.0.head
    }

    /// The head, the list given up.
    pub(crate) fn into_head(mut self) -> Bytes {
        std::mem::take(&mut self.0.head)
    }

    /// Removes every `name` field.
    pub(crate) fn remove(&mut self, name: &HeaderName) {
        self.0.list.retain(|(n, _, _)| n != name);
    }

    /// Whether the list can be passed on as it is: no field is hop-by-hop (which the proxy
    /// strips), and none is an `Upgrade` (stripped from a response that switches nothing).
    pub(crate) fn plain(&self) -> bool {
        self.0.plain
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.0.list.len()
    }

    /// Whether there are none.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn is_empty(&self) -> bool {
        self.0.list.is_empty()
    }

    /// Every field, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&HeaderName, &[u8])> + Clone {
        self.0.list.iter().map(|(name, start, len)| (name, &self.0.head[*start as usize..(*start + *len) as usize]))
    }

    /// The values of every `name` field, in order.
    pub fn get_all<'a>(&'a self, name: &'a HeaderName) -> impl DoubleEndedIterator<Item = &'a [u8]> + Clone {
        self.iter().filter(move |(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The fields as a header map (a thread's spare), with room for the RateLimit fields.
    pub fn to_map(&self) -> HeaderMap {
        let mut map = crate::server::buffers::take_map(self.0.list.len() + ADDED_FIELDS);
        self.append_to(&mut map);
        map
    }

    /// Appends every field to `map`, each value sharing the head's bytes.
    pub fn append_to(&self, map: &mut HeaderMap) {
        map.reserve(self.0.list.len());
        for (name, start, len) in &self.0.list {
            let value = self.0.head.slice(*start as usize..(*start + *len) as usize);
            // Checked as it was read; were it not a value, it is left out rather than passed on.
            if let Ok(value) = HeaderValue::from_maybe_shared(value) {
                map.append(name.clone(), value);
            }
        }
    }
}

impl Drop for Fields {
    fn drop(&mut self) {
        if self.0.list.capacity() > LARGEST {
            return;
        }
        let mut inner = std::mem::take(&mut self.0);
        inner.list.clear();
        inner.head = Bytes::new();
        crate::server::buffers::keep(&SPARE, inner, KEPT);
    }
}

/// A message's header fields, wherever they are: in a header map (hyper's, or one opbound made)
/// or in a list read here. Every value is a field value; names are lower case.
#[derive(Clone, Copy, Debug)]
pub enum Headers<'a> {
    /// In a header map.
    Map(&'a HeaderMap),
    /// In a list, as they were read.
    List(&'a Fields),
}

impl<'a> From<&'a HeaderMap> for Headers<'a> {
    fn from(map: &'a HeaderMap) -> Headers<'a> {
        Headers::Map(map)
    }
}

impl<'a> Headers<'a> {
    /// The values of every field named `name` (lower case), in order.
    pub fn get_all<'n>(self, name: &'n str) -> Values<'a, 'n> {
        match self {
            Headers::Map(map) => Values(Among::Map(map.get_all(name).iter())),
            Headers::List(fields) => Values(Among::List { list: fields.0.list.iter(), head: &fields.0.head, name }),
        }
    }

    /// The first value of the field named `name`.
    pub fn get(self, name: &str) -> Option<&'a [u8]> {
        self.get_all(name).next()
    }
}

/// The values of one name's fields (see [`Headers::get_all`]).
pub struct Values<'a, 'n>(Among<'a, 'n>);

enum Among<'a, 'n> {
    Map(http::header::ValueIter<'a, HeaderValue>),
    List { list: std::slice::Iter<'a, Field>, head: &'a Bytes, name: &'n str },
}

impl<'a> Iterator for Values<'a, '_> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match &mut self.0 {
            Among::Map(values) => values.next().map(HeaderValue::as_bytes),
            Among::List { list, head, name } => list
                .find(|(n, _, _)| n.as_str() == *name)
                .map(|(_, start, len)| &head[*start as usize..(*start + *len) as usize]),
        }
    }
}

/// A field value as text, by `HeaderValue::to_str`'s rule: visible ASCII and tabs only.
pub(crate) fn text(value: &[u8]) -> Option<&str> {
    if value.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        // ASCII is UTF-8.
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// Names, not strings: a string is parsed into a name on every lookup. `HTTP2-Settings` belongs
/// to an h2c upgrade (RFC 7540 §3.2.1), which is never passed on, whether or not `Connection`
/// names it.
/// `Trailer` is not among them (RFC 9110 §6.6.2 makes it end to end): hyper sends a chunked
/// response's trailer fields only when the header declares them, so a response keeps it. A
/// request loses it (`Proxy::forward`): its trailers could carry what its header section may not.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("http2-settings"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
];

/// Whether `name` is one of [`HOP_BY_HOP`]: by its spelling, one comparison of lengths and bytes
/// instead of eight of names.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    let is = matches!(
        name.as_str(),
        "connection"
            | "http2-settings"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "transfer-encoding"
    );
    debug_assert_eq!(is, HOP_BY_HOP.contains(name));
    is
}

#[cfg(test)]
mod tests {
    use http::header;

    use super::*;

    fn fields(head: &'static [u8], spans: &[(&'static str, usize, usize)]) -> Fields {
        let mut fields = Fields::new(Bytes::from_static(head), spans.len());
        for &(name, start, len) in spans {
            fields.push(HeaderName::from_static(name), start, len);
        }
        fields
    }

    #[test]
    fn fields_keep_their_order_and_are_found_by_name() {
        let f = fields(b"a1b2a3", &[("x-a", 0, 2), ("x-b", 2, 2), ("x-a", 4, 2)]);
        let all: Vec<_> = f.iter().map(|(n, v)| (n.as_str(), v)).collect();
        assert_eq!(all, [("x-a", &b"a1"[..]), ("x-b", b"b2"), ("x-a", b"a3")]);
        let name = HeaderName::from_static("x-a");
        assert_eq!(f.get_all(&name).collect::<Vec<_>>(), [b"a1", b"a3"]);
        assert_eq!(f.get_all(&name).next_back(), Some(&b"a3"[..]));

        let mut map = HeaderMap::new();
        f.append_to(&mut map);
        assert_eq!(map.get_all("x-a").iter().collect::<Vec<_>>(), ["a1", "a3"]);
        assert_eq!(map["x-b"], "b2");
    }

    #[test]
    fn a_list_is_looked_up_as_its_map_is() {
        let f = fields(
            b"k1k2\tcaf\xc3\xa9 x",
            &[("x-api-key", 0, 2), ("host", 2, 0), ("x-api-key", 2, 2), ("x-raw", 4, 6), ("x-text", 10, 2)],
        );
        let map = f.to_map();
        let (list, map) = (Headers::List(&f), Headers::Map(&map));
        assert_eq!((f.len(), f.to_map().len()), (5, 5), "every field is in the map");
        for name in ["x-api-key", "host", "x-raw", "x-text", "x-none"] {
            assert_eq!(list.get_all(name).collect::<Vec<_>>(), map.get_all(name).collect::<Vec<_>>(), "{name}");
            assert_eq!(list.get(name), map.get(name), "{name}");
        }
        assert_eq!(list.get_all("x-api-key").collect::<Vec<_>>(), [b"k1", b"k2"]);
        assert_eq!(list.get("X-Api-Key"), None, "names are looked up in lower case");
        // As `HeaderValue::to_str` reads them: visible ASCII and tabs, nothing else.
        for value in [&b"k1"[..], b"\tcaf\xc3\xa9", b" x", b"", b"a\tb", b"\x80"] {
            let header = HeaderValue::from_bytes(value).unwrap();
            assert_eq!(text(value), header.to_str().ok(), "{value:?}");
        }
    }

    #[test]
    fn a_hop_by_hop_field_or_an_upgrade_makes_a_head_not_plain() {
        assert!(fields(b"12", &[("content-length", 0, 2), ("x-a", 0, 1)]).plain());
        for name in ["keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "connection"] {
            assert!(!fields(b"12", &[("x-a", 0, 1), (name, 0, 2)]).plain(), "{name}");
        }
    }

    #[test]
    fn a_removed_name_is_gone_and_a_list_is_taken_back_empty() {
        let mut f = fields(b"12", &[("content-length", 0, 2), ("x-a", 0, 1)]);
        f.remove(&header::CONTENT_LENGTH);
        assert_eq!(f.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["x-a"]);
        drop(f);
        let again = Fields::new(Bytes::new(), 2);
        assert!(again.is_empty());
    }
}
