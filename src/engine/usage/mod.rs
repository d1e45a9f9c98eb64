//! What a response reports it used, read from its body as the body passes to the client: the
//! integers at a `settle: json:...` bound's pointers, in a JSON body or in every event of a
//! `text/event-stream`, summed with their factors when the body ends. The body is never held
//! back or copied; reading stops after a cap, and what was found by then stands.

pub mod ask;
pub mod json;
pub mod sse;

use std::sync::atomic::{AtomicU64, Ordering};

use json::{Pointers, Scan};
use sse::Events;

use super::Reservations;
use crate::policy::Settle;

/// How much of a body is read for its usage, and of one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a body read for its usage (`--settle-max-bytes`); past them, what was found
    /// stands.
    pub max_bytes: u64,
    /// Bytes of one event's data; a larger event is left unread.
    pub max_event: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bytes: 64 << 20, max_event: 1 << 20 }
    }
}

/// Responses whose usage a body-settled bound could not read (a body that is not JSON or is
/// compressed, the pointers found nowhere, a stream cut before its usage): the bound's `max-cost`,
/// the estimate, or what was reported so far, was charged instead.
static UNREAD: AtomicU64 = AtomicU64::new(0);

/// How many responses' usage could not be read since the process started.
pub fn unread_total() -> u64 {
    UNREAD.load(Ordering::Relaxed)
}

enum Reader {
    /// A JSON body, one document.
    Json(Scan),
    /// A `text/event-stream`.
    Events(Events),
    /// A body that cannot be read for its usage (compressed).
    Unreadable,
}

/// Reads a response body for what the bounds that settle from it wait for, and settles them
/// when it ends; dropped before its end (the client went away), it settles them as cut short.
pub struct Meter {
    reservations: Option<Reservations>,
    status: u16,
    /// What the header-settled bounds read at the head, by settle.
    headers: Vec<(Settle, Option<u64>)>,
    /// The body-settled bounds, and for each term the index of its pointer.
    sums: Vec<(Settle, Vec<(u64, usize)>)>,
    reader: Reader,
    read: u64,
    limits: Limits,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").field("status", &self.status).field("read", &self.read).finish_non_exhaustive()
    }
}

/// How a response body is written, as its head says.
#[derive(Clone, Copy, Debug, Default)]
pub struct BodyKind<'a> {
    /// `Content-Type`.
    pub content_type: Option<&'a str>,
    /// `Content-Encoding`.
    pub content_encoding: Option<&'a str>,
}

impl Meter {
    /// A meter for `reservations` when a bound among them settles from the body of a response
    /// with this status; otherwise the reservations back, to settle at the head.
    /// `header(name)`: the response header's value when it is a non-negative integer.
    pub fn new(
        reservations: Reservations,
        status: u16,
        kind: BodyKind<'_>,
        header: impl Fn(&str) -> Option<u64>,
        limits: Limits,
    ) -> Result<Meter, Reservations> {
        let settles = reservations.settles(status);
        if !settles.iter().any(|s| matches!(s, Settle::Body(_))) {
            return Err(reservations);
        }
        let mut pointers: Vec<&str> = Vec::new();
        let mut headers = Vec::new();
        let mut sums = Vec::new();
        for settle in settles {
            match settle {
                Settle::Header(name) => headers.push((settle.clone(), header(name))),
                Settle::Body(terms) => {
                    let mut indices = Vec::new();
                    for t in terms {
                        let i = pointers.iter().position(|p| *p == t.pointer).unwrap_or_else(|| {
                            pointers.push(&t.pointer);
                            pointers.len() - 1
                        });
                        indices.push((t.factor, i));
                    }
                    sums.push((settle.clone(), indices));
                }
            }
        }
        // More pointers than a scan follows cannot be read; their terms count as found nowhere.
        sums.iter_mut().for_each(|(_, t)| t.retain(|&(_, i)| i < json::MAX_POINTERS));
        let pointers = Pointers::new(pointers);
        let identity = kind.content_encoding.is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        let media = kind.content_type.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        let reader = if !identity {
            Reader::Unreadable
        } else if media == "text/event-stream" {
            Reader::Events(Events::new(pointers, limits.max_event))
        } else {
            Reader::Json(Scan::new(pointers))
        };
        Ok(Meter { reservations: Some(reservations), status, headers, sums, reader, read: 0, limits })
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, bytes: &[u8]) {
        let room = self.limits.max_bytes.saturating_sub(self.read);
        let bytes = &bytes[..bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        self.read += bytes.len() as u64;
        match &mut self.reader {
            Reader::Json(scan) => scan.feed(bytes),
            Reader::Events(events) => events.feed(bytes),
            Reader::Unreadable => {}
        }
    }

    /// The body ended whole: settles with what it reported.
    pub fn end(mut self) {
        self.settle(false);
    }

    fn settle(&mut self, cut_short: bool) {
        let Some(reservations) = self.reservations.take() else { return };
        let found: &[Option<u64>] = match &mut self.reader {
            Reader::Json(scan) => {
                scan.finish();
                scan.found()
            }
            Reader::Events(events) => events.found(),
            Reader::Unreadable => &[],
        };
        let sums: Vec<(&Settle, Option<u64>)> = self
            .sums
            .iter()
            .map(|(settle, terms)| {
                let mut any = false;
                let mut sum = 0u64;
                for &(factor, i) in terms {
                    if let Some(Some(n)) = found.get(i) {
                        any = true;
                        sum = sum.saturating_add(n.saturating_mul(factor));
                    }
                }
                (settle, any.then_some(sum))
            })
            .collect();
        if cut_short || sums.iter().any(|(_, sum)| sum.is_none()) {
            UNREAD.fetch_add(1, Ordering::Relaxed);
        }
        let reported = |settle: &Settle| {
            let header = self.headers.iter().find(|(s, _)| s == settle).and_then(|(_, v)| *v);
            header.or_else(|| sums.iter().find(|(s, _)| *s == settle).and_then(|(_, v)| *v))
        };
        reservations.settle(self.status, reported, cut_short);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // Not ended: the body was cut short.
        self.settle(true);
    }
}

#[cfg(test)]
mod tests;
