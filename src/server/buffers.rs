//! Buffers kept per thread: each request writes its upstream head and its response head into
//! one, its head is read into another, and its header fields and its upstream's go into header
//! maps (hyper keeps a map from one request to the next for the same reason). Taking a used one
//! back is cheaper than the allocator's generic path that blocks of this size take, for the
//! allocation and again for the free.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::thread::LocalKey;

use bytes::BytesMut;
use http::HeaderMap;

/// The most buffers a thread keeps.
const KEPT: usize = 8;
/// A buffer grown larger than this (a large body copied in) is not kept.
const LARGEST: usize = 32 * 1024;

thread_local!(static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) });
thread_local!(static READ: RefCell<Option<BytesMut>> = const { RefCell::new(None) });
thread_local!(static MAPS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) });

/// The most header maps a thread keeps, and the most fields a kept one has room for.
const KEPT_MAPS: usize = 4;
const LARGEST_MAP: usize = 64;

/// An empty header map with room for `capacity` fields.
pub(crate) fn take_map(capacity: usize) -> HeaderMap {
    match MAPS.with(|maps| maps.borrow_mut().pop()) {
        Some(mut map) => {
            map.reserve(capacity);
            map
        }
        None => HeaderMap::with_capacity(capacity),
    }
}

/// Keeps a header map done with (emptied here) for the next [`take_map`] on this thread.
pub(crate) fn give_map(mut map: HeaderMap) {
    if map.capacity() == 0 || map.capacity() > LARGEST_MAP {
        return;
    }
    map.clear();
    keep(&MAPS, map, KEPT_MAPS);
}

/// An empty read buffer with room for `capacity` bytes: the one given back last, if any.
pub(crate) fn take_read(capacity: usize) -> BytesMut {
    let mut buf = READ.with(|read| read.borrow_mut().take()).unwrap_or_default();
    // The views of the request read into it last (its head's fields) are gone by now: the
    // whole block is this buffer's again, and taken back rather than allocated anew.
    buf.reserve(capacity);
    buf
}

/// Keeps an emptied read buffer for the next [`take_read`] on this thread.
pub(crate) fn give_read(buf: BytesMut) {
    if !buf.is_empty() || buf.capacity() > LARGEST {
        return;
    }
    let _ = READ.try_with(|read| *read.borrow_mut() = Some(buf));
}

/// An empty buffer of at least `capacity` bytes, back to its thread's spares when dropped.
pub(crate) fn take(capacity: usize) -> Buffer {
    let mut spare = SPARE.with(|spare| spare.borrow_mut().pop()).unwrap_or_default();
    spare.reserve(capacity);
    Buffer(spare)
}

/// A write buffer from [`take`].
pub(crate) struct Buffer(Vec<u8>);

impl Deref for Buffer {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.0);
        if buffer.capacity() == 0 || buffer.capacity() > LARGEST {
            return;
        }
        buffer.clear();
        keep(&SPARE, buffer, KEPT);
    }
}

/// Keeps `spare` (emptied by the caller) in this thread's `spares`, unless it holds `most`
/// already. A thread that is going away keeps nothing.
pub(crate) fn keep<T>(spares: &'static LocalKey<RefCell<Vec<T>>>, spare: T, most: usize) {
    let _ = spares.try_with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.len() < most {
            spares.push(spare);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_map_given_back_is_empty_when_taken_again() {
        let mut map = take_map(8);
        map.insert(http::header::HOST, http::HeaderValue::from_static("t"));
        give_map(map);
        let again = take_map(8);
        assert!(again.is_empty() && again.capacity() >= 8);
    }

    #[test]
    fn a_read_buffer_given_back_is_taken_back_once_its_views_are_gone() {
        let mut buf = take_read(4096);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let head = buf.split().freeze();
        give_read(buf);
        drop(head);
        let again = take_read(4096);
        assert!(again.is_empty() && again.capacity() >= 4096);
    }

    #[test]
    fn a_buffer_comes_back_empty_and_large_ones_are_not_kept() {
        let mut first = take(100);
        first.extend_from_slice(b"written");
        let at = first.as_ptr();
        drop(first);
        let again = take(10);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), at, "the same block, taken back");
        drop(again);

        let mut large = take(LARGEST + 1);
        large.push(1);
        drop(large);
        let next = take(1);
        assert!(next.capacity() <= LARGEST, "the large one was let go");
    }
}
