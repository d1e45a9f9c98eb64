//! Counting the repeated fields of a gRPC message in its wire form, before it is decoded: a
//! message of tiny entries decodes into many times its size, so the caps are checked first.

use super::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_HEADERS, Unreadable};

/// `RateLimitRequest.descriptors`, and `RateLimitDescriptor.entries` inside each.
const DESCRIPTORS: u32 = 2;
const ENTRIES: u32 = 1;
/// `CheckRequest.attributes.request.http`: its `headers` map and `header_map.headers`.
const HTTP: [u32; 3] = [1, 4, 2];
const HEADERS: u32 = 3;
const HEADER_MAP: u32 = 13;
const HEADER_MAP_HEADERS: u32 = 1;

/// Why an encoded rate-limit call (the message, without gRPC's frame) is past the caps; `None`
/// when it is within them, or malformed (decoding then says so).
pub fn rate_limit_over_caps(message: &[u8]) -> Option<Unreadable> {
    let descriptors = count(message, &[], DESCRIPTORS).ok()?;
    if descriptors > MAX_DESCRIPTORS {
        return Some(Unreadable::TooManyDescriptors(descriptors));
    }
    // Refund descriptors' entries count too here (decoded, they are left out): a call with a
    // thousand entries is no gateway's either way.
    let entries = count(message, &[DESCRIPTORS], ENTRIES).ok()?;
    (entries > MAX_ENTRIES).then_some(Unreadable::TooManyEntries(entries))
}

/// Why an encoded check is past the caps, as [`rate_limit_over_caps`].
pub fn check_over_caps(message: &[u8]) -> Option<Unreadable> {
    let map = count(message, &HTTP, HEADERS).ok()?;
    let listed = count(message, &[HTTP[0], HTTP[1], HTTP[2], HEADER_MAP], HEADER_MAP_HEADERS).ok()?;
    (map + listed > MAX_HEADERS).then_some(Unreadable::TooManyHeaders(map + listed))
}

/// The message of a gRPC request body that is one whole, uncompressed frame.
pub(crate) fn framed(body: &[u8]) -> Option<&[u8]> {
    let (&[0, a, b, c, d], message) = body.split_first_chunk::<5>()? else { return None };
    (u32::from_be_bytes([a, b, c, d]) as usize == message.len()).then_some(message)
}

/// How many `leaf` fields the messages at `path` (field numbers, each possibly repeated) hold.
/// Linear in the message's length; `Err` when it is not a protobuf message.
fn count(message: &[u8], path: &[u32], leaf: u32) -> Result<usize, ()> {
    let mut n = 0;
    let mut rest = message;
    while !rest.is_empty() {
        let key = varint(&mut rest)?;
        let number = u32::try_from(key >> 3).map_err(|_| ())?;
        let value = match key & 7 {
            0 => {
                varint(&mut rest)?;
                None
            }
            1 => Some(take(&mut rest, 8)?),
            2 => {
                let len = usize::try_from(varint(&mut rest)?).map_err(|_| ())?;
                Some(take(&mut rest, len)?)
            }
            5 => Some(take(&mut rest, 4)?),
            // Groups (3, 4) are in none of these messages.
            _ => return Err(()),
        };
        match path.split_first() {
            None if number == leaf => n += 1,
            Some((&first, deeper)) if number == first && key & 7 == 2 => {
                n += count(value.unwrap_or_default(), deeper, leaf)?;
            }
            _ => {}
        }
    }
    Ok(n)
}

fn varint(rest: &mut &[u8]) -> Result<u64, ()> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, tail) = rest.split_first().ok_or(())?;
        *rest = tail;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(())
}

fn take<'a>(rest: &mut &'a [u8], len: usize) -> Result<&'a [u8], ()> {
    if rest.len() < len {
        return Err(());
    }
    let (value, tail) = rest.split_at(len);
    *rest = tail;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
    use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, attribute_context};
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use prost::Message;

    use super::*;

    fn call(descriptors: usize, entries_each: usize) -> Vec<u8> {
        let entry = |i: usize| rate_limit_descriptor::Entry { key: format!("k{i}"), value: "v".into() };
        let descriptor = RateLimitDescriptor { entries: (0..entries_each).map(entry).collect(), ..Default::default() };
        RateLimitRequest { domain: "d".into(), descriptors: vec![descriptor; descriptors], hits_addend: 3 }
            .encode_to_vec()
    }

    fn check(map: usize, listed: usize) -> Vec<u8> {
        use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
        let http = attribute_context::HttpRequest {
            method: "GET".into(),
            path: "/".into(),
            headers: (0..map).map(|i| (format!("h{i}"), "v".into())).collect(),
            header_map: Some(HeaderMap {
                headers: (0..listed).map(|i| HeaderValue { key: format!("l{i}"), ..Default::default() }).collect(),
            }),
            ..Default::default()
        };
        let request = attribute_context::Request { http: Some(http), ..Default::default() };
        let attributes = AttributeContext { request: Some(request), ..Default::default() };
        CheckRequest { attributes: Some(attributes) }.encode_to_vec()
    }

    #[test]
    fn the_counts_are_those_decoding_gives() {
        // The reference is prost's own decoding of the same bytes.
        for (descriptors, each) in [(0, 0), (1, 3), (7, 2), (MAX_DESCRIPTORS, 4), (MAX_DESCRIPTORS + 1, 0), (300, 4)] {
            let bytes = call(descriptors, each);
            let decoded = RateLimitRequest::decode(&bytes[..]).unwrap();
            assert_eq!(count(&bytes, &[], DESCRIPTORS), Ok(decoded.descriptors.len()));
            let entries: usize = decoded.descriptors.iter().map(|d| d.entries.len()).sum();
            assert_eq!(count(&bytes, &[DESCRIPTORS], ENTRIES), Ok(entries));
        }
        for (map, listed) in [(0, 0), (3, 0), (0, 5), (200, 100)] {
            let bytes = check(map, listed);
            let decoded = CheckRequest::decode(&bytes[..]).unwrap();
            let http = decoded.attributes.unwrap().request.unwrap().http.unwrap();
            assert_eq!(count(&bytes, &HTTP, HEADERS), Ok(http.headers.len()));
            assert_eq!(
                count(&bytes, &[1, 4, 2, HEADER_MAP], HEADER_MAP_HEADERS),
                Ok(http.header_map.unwrap().headers.len())
            );
        }
    }

    #[test]
    fn calls_past_the_caps_are_refused_before_decoding_with_the_same_reasons() {
        assert_eq!(rate_limit_over_caps(&call(4, 2)), None);
        assert_eq!(
            rate_limit_over_caps(&call(MAX_DESCRIPTORS + 1, 0)),
            Some(Unreadable::TooManyDescriptors(MAX_DESCRIPTORS + 1))
        );
        assert_eq!(rate_limit_over_caps(&call(200, 6)), Some(Unreadable::TooManyEntries(1200)));
        assert_eq!(check_over_caps(&check(100, 100)), None);
        assert_eq!(check_over_caps(&check(200, 100)), Some(Unreadable::TooManyHeaders(300)));
        // Not a message: left to decoding, which refuses it.
        assert_eq!(rate_limit_over_caps(&[0x12, 0x05, 1]), None);
        assert_eq!(rate_limit_over_caps(&[0x0b]), None, "a group");
    }

    #[test]
    fn one_whole_uncompressed_frame_is_a_message() {
        assert_eq!(framed(&[0, 0, 0, 0, 2, 8, 1]), Some(&[8, 1][..]));
        assert_eq!(framed(&[1, 0, 0, 0, 2, 8, 1]), None, "compressed");
        assert_eq!(framed(&[0, 0, 0, 0, 3, 8, 1]), None, "cut short");
        assert_eq!(framed(&[0, 0, 0]), None);
    }
}
