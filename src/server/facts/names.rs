//! Header field names read off the wire, kept per thread. Requests and responses carry the same
//! dozen names over and over, and a name that is not one of HTTP's standard ones costs an
//! allocation and a copy every time it is read (`HeaderName::from_bytes`): `X-Api-Key`,
//! `X-Forwarded-For` and the like, several on every request.

use std::cell::RefCell;

use http::HeaderName;

/// Sets of names kept per thread; each name goes to the set its spelling picks, two ways each.
const SETS: usize = 64;
/// Longer names are read afresh each time: the usual ones are short, and a client sending new
/// long ones only evicts.
const LONGEST: usize = 40;

/// A name as it was spelled on the wire, and the name.
struct Kept {
    spelled: [u8; LONGEST],
    len: u8,
    name: HeaderName,
}

impl Kept {
    fn spells(&self, raw: &[u8]) -> bool {
        self.spelled[..usize::from(self.len)] == *raw
    }
}

thread_local!(static NAMES: RefCell<[[Option<Kept>; 2]; SETS]> = const { RefCell::new([const { [None, None] }; SETS]) });

/// The header name spelled `raw`, as `HeaderName::from_bytes` reads it; `None` when it is not a
/// field name. A spelling seen lately on this thread (byte for byte: clients and upstreams
/// spell their names the same way every time) is a clone of the name read then.
pub(crate) fn read(raw: &[u8]) -> Option<HeaderName> {
    if raw.is_empty() || raw.len() > LONGEST {
        return HeaderName::from_bytes(raw).ok();
    }
    let set = set_of(raw);
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        let ways = &mut names[set];
        for kept in ways.iter().flatten() {
            if kept.spells(raw) {
                return Some(kept.name.clone());
            }
        }
        let name = HeaderName::from_bytes(raw).ok()?;
        let mut spelled = [0u8; LONGEST];
        spelled[..raw.len()].copy_from_slice(raw);
        // The newer of the two stays: the older makes room.
        ways.swap(0, 1);
        ways[0] = Some(Kept { spelled, len: raw.len() as u8, name: name.clone() });
        Some(name)
    })
}

/// Which set a spelling goes to: its length and its first and last eight bytes, mixed.
fn set_of(raw: &[u8]) -> usize {
    // Whole words where there are eight bytes (nearly every name): a copy of a length known only
    // at run time into a padded word was a call to `memcpy`, two a name, sixteen a request.
    let (head, tail) = match (raw.first_chunk::<8>(), raw.last_chunk::<8>()) {
        (Some(head), Some(tail)) => (u64::from_le_bytes(*head), u64::from_le_bytes(*tail)),
        _ => {
            let word = raw.iter().rev().fold(0u64, |w, &b| (w << 8) | u64::from(b));
            (word, word)
        }
    };
    let mixed = (head ^ tail.rotate_left(7) ^ raw.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58) as usize % SETS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_names_do_not_evict_each_other() {
        let usual = [
            "host",
            "user-agent",
            "accept",
            "x-api-key",
            "x-forwarded-for",
            "x-original-method",
            "x-original-uri",
            "content-type",
            "content-length",
            "server",
            "date",
            "connection",
            "authorization",
            "cookie",
        ];
        let mut sets = [0usize; SETS];
        for name in usual {
            sets[set_of(name.as_bytes())] += 1;
            let spelled: String =
                name.split('-').map(|w| w[..1].to_uppercase() + &w[1..]).collect::<Vec<_>>().join("-");
            sets[set_of(spelled.as_bytes())] += 1;
        }
        assert!(sets.iter().all(|&n| n <= 2), "at most two in a set: {sets:?}");
    }

    #[test]
    fn a_name_is_read_as_http_reads_it_whatever_was_kept_before() {
        let spellings: [&[u8]; 12] = [
            b"X-Api-Key",
            b"x-api-key",
            b"X-API-KEY",
            b"Content-Length",
            b"content-length",
            b"x-api-kez",
            b"Y-Api-Key",
            b"bad name",
            b"",
            b"x\xffy",
            b"X-A-Header-Name-Longer-Than-Forty-Bytes-Kept-Nowhere",
            b"X-Api-Key",
        ];
        // Twice over, so that every spelling is also read with the others kept.
        for raw in spellings.iter().chain(spellings.iter()) {
            assert_eq!(read(raw), HeaderName::from_bytes(raw).ok(), "{:?}", String::from_utf8_lossy(raw));
        }
    }
}
