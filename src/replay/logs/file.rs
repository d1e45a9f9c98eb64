//! One log file read line by line into records in the order written: gzip or not by its magic
//! bytes, its format detected from its first readable line, lines too long passed over.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::field::Field;
use super::format::Format;
use super::order::Records;
use super::problems::{LineError, LogError, Problems};
use super::{caddy, combined, envoy, json, opbound};
use crate::replay::{Record, Source};

/// The longest line kept, in bytes: longer ones are malformed (no access log writes them; a
/// binary file given by mistake would).
pub(super) const LONGEST_LINE: u64 = 1 << 20;

impl Format {
    /// The record a line in this format holds, or why it holds none.
    fn parse(self, line: &str, fields: &[Field], problems: &mut Problems) -> Result<Record, LineError> {
        match self {
            Format::Combined => combined::parse(line, fields),
            Format::NginxJson => json::parse_nginx(line, fields),
            Format::Caddy => caddy::parse(line, fields, problems),
            Format::Envoy => envoy::parse(line, fields),
            Format::Opbound => opbound::parse(line, fields),
            Format::Auto => Err(LineError::Undetected),
        }
    }

    /// The format a line is written in, if it is readable at all.
    fn detect(line: &str) -> Option<Format> {
        if line.starts_with('{') {
            let object = json::object(line).ok()?;
            let has = |key: &str| object.get(key).is_some_and(|value| !value.is_null());
            return if object.get("request").is_some_and(|request| request.is_object()) && has("ts") {
                Some(Format::Caddy)
            } else if has("start_time") || has("response_code") {
                Some(Format::Envoy)
            } else if has("time") && has("target") && has("method") {
                Some(Format::Opbound)
            } else if ["remote_addr", "msec", "time_iso8601", "request"].into_iter().any(has) {
                Some(Format::NginxJson)
            } else {
                None
            };
        }
        combined::parse(line, &[]).ok().map(|_| Format::Combined)
    }
}

/// One log, read line by line into records in the order written.
pub(super) struct LogFile {
    index: usize,
    path: PathBuf,
    lines: Box<dyn BufRead + Send>,
    /// `Auto` until a readable line has shown the format.
    format: Format,
    fields: std::sync::Arc<[Field]>,
    line: u64,
    buffer: Vec<u8>,
    /// Whether what the format lacks has been noted in the problems.
    noted: bool,
    done: bool,
}

impl LogFile {
    pub(super) fn open(
        index: usize,
        path: &Path,
        format: Format,
        fields: std::sync::Arc<[Field]>,
    ) -> Result<LogFile, LogError> {
        let io = |source| LogError::Io { path: path.to_owned(), source };
        let mut raw = BufReader::new(File::open(path).map_err(io)?);
        // Rotated logs are compressed or not whatever their names say: the magic bytes tell.
        let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let lines: Box<dyn BufRead + Send> =
            if gzip { Box::new(BufReader::new(MultiGzDecoder::new(raw))) } else { Box::new(raw) };
        Ok(LogFile::new(index, path, lines, format, fields))
    }

    pub(super) fn new(
        index: usize,
        path: &Path,
        lines: Box<dyn BufRead + Send>,
        format: Format,
        fields: std::sync::Arc<[Field]>,
    ) -> LogFile {
        LogFile {
            index,
            path: path.to_owned(),
            lines,
            format,
            fields,
            line: 0,
            buffer: Vec::new(),
            noted: false,
            done: false,
        }
    }

    /// Reads the next line into the buffer: `None` at the end, `Some(false)` for a line too long
    /// to keep, which is passed over so that memory stays bounded whatever the file holds.
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        let read = (&mut self.lines).take(LONGEST_LINE).read_until(b'\n', &mut self.buffer)?;
        if read == 0 {
            return Ok(None);
        }
        if read < LONGEST_LINE as usize || self.buffer.ends_with(b"\n") {
            return Ok(Some(true));
        }
        loop {
            let available = self.lines.fill_buf()?;
            if available.is_empty() {
                return Ok(Some(false));
            }
            match available.iter().position(|&byte| byte == b'\n') {
                Some(end) => {
                    self.lines.consume(end + 1);
                    return Ok(Some(false));
                }
                None => {
                    let all = available.len();
                    self.lines.consume(all);
                }
            }
        }
    }

    /// Notes what this file's format lacks, once it is known.
    fn note_lacks(&mut self, first: &Record, problems: &mut Problems) {
        self.noted = true;
        if let Some(entry) = problems.formats.get_mut(self.index) {
            entry.1 = self.format;
        }
        for &lack in self.format.lacks() {
            let mapped = self.fields.iter().any(|field| field.fact.lack() == Some(lack));
            let logged = lack == "duration" && first.duration.is_some();
            if !mapped && !logged {
                problems.lack(lack);
            }
        }
    }
}

impl Records for LogFile {
    fn pull(&mut self, problems: &mut Problems) -> Option<Result<Record, LogError>> {
        while !self.done {
            self.buffer.clear();
            let read = match self.read_line() {
                Ok(read) => read,
                Err(source) => {
                    self.done = true;
                    return Some(Err(LogError::Io { path: self.path.clone(), source }));
                }
            };
            let Some(whole) = read else {
                self.done = true;
                break;
            };
            self.line += 1;
            let source = Source { file: self.index, line: self.line };
            if !whole {
                problems.malformed(source, LineError::TooLong(LONGEST_LINE));
                continue;
            }
            let text = String::from_utf8_lossy(&self.buffer);
            // A byte-order mark would hide the first line's `{`.
            let text = text.trim_start_matches('\u{feff}').trim();
            if text.is_empty() {
                continue;
            }
            if self.format == Format::Auto {
                match Format::detect(text) {
                    Some(format) => self.format = format,
                    None => {
                        problems.malformed(source, LineError::UnknownFormat);
                        continue;
                    }
                }
            }
            match self.format.parse(text, &self.fields, problems) {
                Ok(mut record) => {
                    record.source = source;
                    if !self.noted {
                        self.note_lacks(&record, problems);
                    }
                    return Some(Ok(record));
                }
                Err(why) => problems.malformed(source, why),
            }
        }
        None
    }
}
