//! A request body read from the connection and fed to the handler piece by piece, as it asks
//! for them: by its declared length or by the chunked coding (one decoder, `server::wire`).

use bytes::BytesMut;
use hyper::body::Frame;
use tokio::net::TcpStream;

use super::socket::{fill, write_all};
use crate::server::net::request_body::{Feed, Piece};
use crate::server::wire::{Chunked, Decoded, Framing};

/// What `Expect: 100-continue` is answered with once the body is wanted.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// How a body that is being read ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Read to its end: what follows in the connection is the next request.
    Whole,
    /// The handler let go of it before its end: the rest is still in the connection.
    Dropped,
    /// The client's bytes were not a body, or the client left before its end.
    Broken,
}

/// The reading of one request's body.
pub(super) struct Pump {
    feed: Feed,
    reading: Reading,
    ended: Option<Ended>,
}

enum Reading {
    Length(u64),
    Chunked(Chunked),
}

impl Pump {
    /// Reads a body framed by `framing` (a length or chunked) into `feed`.
    pub(super) fn new(framing: Framing, feed: Feed) -> Pump {
        let reading = match framing {
            Framing::Length(n) => Reading::Length(n),
            _ => Reading::Chunked(Chunked::default()),
        };
        Pump { feed, reading, ended: None }
    }

    /// How the body ended, once it has.
    pub(super) fn ended(&self) -> Option<Ended> {
        self.ended
    }

    /// Whether the client still waits to be told to send its body: then it may never send it, and
    /// the connection cannot be read further.
    pub(super) fn awaits_continue(&self) -> bool {
        self.feed.wanted.is_some()
    }

    /// Reads and drops the rest of a body its handler let go of, at most `limit` bytes of it:
    /// whether its end was reached, so that the connection can read the next request.
    pub(super) async fn drain(&mut self, stream: &mut TcpStream, buf: &mut BytesMut, limit: u64) -> bool {
        let mut dropped = 0u64;
        loop {
            match &mut self.reading {
                Reading::Length(0) => return true,
                Reading::Length(left) if !buf.is_empty() => {
                    let n = (*left).min(buf.len() as u64);
                    *left -= n;
                    dropped += n;
                    let _ = buf.split_to(n as usize);
                    continue;
                }
                Reading::Length(_) => {}
                Reading::Chunked(decoder) => match decoder.decode(buf) {
                    Ok(Decoded::End) => return true,
                    Ok(Decoded::Data(data)) => {
                        dropped += data.len() as u64;
                        continue;
                    }
                    Ok(Decoded::Trailers(_)) => continue,
                    Ok(Decoded::More) => {}
                    Err(_) => return false,
                },
            }
            if dropped > limit || !matches!(fill(stream, buf).await, Ok(n) if n > 0) {
                return false;
            }
        }
    }

    /// Reads the body from `buf` and `stream` as the handler takes it, until its end or until the
    /// handler lets it go. May be dropped between pieces and called again: nothing is lost.
    pub(super) async fn run(&mut self, stream: &mut TcpStream, buf: &mut BytesMut) -> Ended {
        if let Some(wanted) = &mut self.feed.wanted {
            if wanted.await.is_err() {
                return self.end(Ended::Dropped);
            }
            self.feed.wanted = None;
            // Written before anything of the response (which comes only after this is done), to a
            // client that waits for it and so has taken everything before.
            if write_all(stream, CONTINUE).await.is_err() {
                return self.end(Ended::Broken);
            }
        }
        loop {
            let Ok(permit) = self.feed.pieces.reserve().await else {
                // Let go of: after its last byte (a reader that knows the length, or one that
                // stops at the trailers, need not wait for the end), or before.
                let ended = if self.at_end(buf) { Ended::Whole } else { Ended::Dropped };
                return self.end(ended);
            };
            let piece = loop {
                let piece = match &mut self.reading {
                    Reading::Length(0) => Some(Piece::End),
                    Reading::Length(left) if !buf.is_empty() => {
                        let n = (*left).min(buf.len() as u64);
                        *left -= n;
                        Some(Piece::Frame(Frame::data(buf.split_to(n as usize).freeze())))
                    }
                    Reading::Length(_) => None,
                    Reading::Chunked(decoder) => match decoder.decode(buf) {
                        Ok(Decoded::Data(data)) => Some(Piece::Frame(Frame::data(data))),
                        Ok(Decoded::Trailers(trailers)) => Some(Piece::Frame(Frame::trailers(trailers))),
                        Ok(Decoded::End) => Some(Piece::End),
                        Ok(Decoded::More) => None,
                        Err(e) => {
                            permit.send(Piece::Failed(format!("the chunked body is malformed: {e}")));
                            return self.end(Ended::Broken);
                        }
                    },
                };
                if let Some(piece) = piece {
                    break piece;
                }
                match fill(stream, buf).await {
                    Ok(n) if n > 0 => {}
                    _ => {
                        permit.send(Piece::Failed("the client closed the connection before the body's end".into()));
                        return self.end(Ended::Broken);
                    }
                }
            };
            let end = matches!(piece, Piece::End);
            permit.send(piece);
            if end {
                return self.end(Ended::Whole);
            }
        }
    }

    /// Whether all of the body has been taken out of the connection's bytes (its end read from
    /// `buf` if it is there).
    fn at_end(&mut self, buf: &mut BytesMut) -> bool {
        match &mut self.reading {
            Reading::Length(left) => *left == 0,
            Reading::Chunked(decoder) => matches!(decoder.decode(buf), Ok(Decoded::End)),
        }
    }

    fn end(&mut self, ended: Ended) -> Ended {
        self.ended = Some(ended);
        ended
    }
}
