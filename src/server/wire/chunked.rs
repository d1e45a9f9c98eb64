//! A chunked body decoded as it arrives, chunk line by chunk line.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::framing::{MAX_CHUNK_LINE, MAX_HEAD, MAX_HEADERS, control};

/// What a chunked body decoder found in its buffer.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// Some of a chunk's data.
    Data(Bytes),
    /// The trailer section, after the last chunk.
    Trailers(HeaderMap),
    /// The body's end (after the trailers, if any).
    End,
    /// More bytes are needed.
    More,
}

/// Why a chunked body cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ChunkError {}

/// A decoder of the chunked transfer coding (RFC 9112 §7.1), strict: sizes of at most 16 hex
/// digits, every line ended by CRLF, no control character in an extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct Chunked {
    state: ChunkState,
}

#[derive(Clone, Copy, Debug, Default)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

impl Chunked {
    /// Decodes what it can from the start of `buf`, removing what it used.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkError> {
        loop {
            match self.state {
                ChunkState::Size => {
                    let Some(newline) = buf.iter().take(MAX_CHUNK_LINE).position(|&b| b == b'\n') else {
                        if buf.len() >= MAX_CHUNK_LINE {
                            return Err(ChunkError("a chunk-size line is too long"));
                        }
                        return Ok(Decoded::More);
                    };
                    let line = buf[..newline].strip_suffix(b"\r").ok_or(ChunkError("a bare LF"))?;
                    let size = chunk_size(line)?;
                    buf.advance(newline + 1);
                    self.state = if size == 0 { ChunkState::Trailers } else { ChunkState::Data(size) };
                }
                ChunkState::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let n = left.min(buf.len() as u64);
                    let data = buf.split_to(n as usize).freeze();
                    self.state = if n == left { ChunkState::DataEnd } else { ChunkState::Data(left - n) };
                    return Ok(Decoded::Data(data));
                }
                ChunkState::DataEnd => match buf.get(..2) {
                    None if buf.first().is_none_or(|&b| b == b'\r') => return Ok(Decoded::More),
                    Some([b'\r', b'\n']) => {
                        buf.advance(2);
                        self.state = ChunkState::Size;
                    }
                    _ => return Err(ChunkError("a chunk's data is not followed by CRLF")),
                },
                ChunkState::Trailers => {
                    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let (len, found) = match httparse::parse_headers(buf, &mut fields) {
                        Ok(httparse::Status::Complete(found)) => found,
                        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                            return Err(ChunkError("the trailer section is too long"));
                        }
                        Ok(httparse::Status::Partial) => return Ok(Decoded::More),
                        Err(_) => return Err(ChunkError("the trailer section is malformed")),
                    };
                    let mut trailers = HeaderMap::with_capacity(found.len());
                    for field in found {
                        let name = HeaderName::from_bytes(field.name.as_bytes())
                            .map_err(|_| ChunkError("a trailer name is not a token"))?;
                        let value = HeaderValue::from_bytes(field.value)
                            .map_err(|_| ChunkError("a trailer value holds a control character"))?;
                        trailers.append(name, value);
                    }
                    buf.advance(len);
                    self.state = ChunkState::Done;
                    if !trailers.is_empty() {
                        return Ok(Decoded::Trailers(trailers));
                    }
                }
                ChunkState::Done => return Ok(Decoded::End),
            }
        }
    }
}

/// A chunk-size line without its CRLF: 1 to 16 hex digits, then optionally whitespace and
/// extensions (ignored) with no control characters.
pub(crate) fn chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(ChunkError("a chunk size is not 1 to 16 hex digits"));
    }
    let hex = std::str::from_utf8(&line[..digits]).expect("hex digits are ASCII");
    let size = u64::from_str_radix(hex, 16).expect("16 hex digits fit in 64 bits");
    let rest = line[digits..].trim_ascii_start();
    if !rest.is_empty() && (rest[0] != b';' || rest.iter().any(control)) {
        return Err(ChunkError("a chunk size is followed by something other than an extension"));
    }
    Ok(size)
}
