//! The events of a `text/event-stream` as it passes, each event's `data` scanned for the
//! pointers as one JSON document (its `data:` lines joined by newlines, as the HTML standard
//! joins them). Nothing is held but the scan's few frames: a line is never buffered, and an event
//! larger than the cap is left unread.

use std::sync::Arc;

use super::json::{Pointers, Scan};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// Reading a field's name (its first bytes).
    Field,
    /// After `data:`, before its optional space.
    DataStart,
    /// In a `data` field's value.
    Data,
    /// In a line whose field is not `data` (or a comment): skipped to its end.
    Skip,
}

/// Reads an event stream for the last integer at each pointer.
#[derive(Debug)]
pub struct Events {
    line: Line,
    /// A `\r` ended the last line: a `\n` right after it ends nothing more.
    after_cr: bool,
    field: [u8; 5],
    field_len: usize,
    /// The event being read has data.
    has_data: bool,
    /// Bytes of data in the event being read.
    event_bytes: usize,
    max_event: usize,
    scan: Scan,
    /// The last non-negative integer found at each pointer, over the events so far.
    found: Vec<Option<u64>>,
    /// Events larger than the cap, left unread.
    pub oversized: usize,
}

impl Events {
    /// A reader for `pointers`, at the start of a stream; an event with more than `max_event`
    /// bytes of data is left unread.
    pub fn new(pointers: Arc<Pointers>, max_event: usize) -> Events {
        let n = pointers.len();
        Events {
            line: Line::Start,
            after_cr: false,
            field: [0; 5],
            field_len: 0,
            has_data: false,
            event_bytes: 0,
            max_event,
            scan: Scan::new(pointers),
            found: vec![None; n],
            oversized: 0,
        }
    }

    /// What the complete events so far reported at each pointer.
    pub fn found(&self) -> &[Option<u64>] {
        &self.found
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match self.line {
                Line::Data => {
                    let end = memchr::memchr2(b'\n', b'\r', bytes).unwrap_or(bytes.len());
                    self.data(&bytes[..end]);
                    bytes = &bytes[end..];
                    if let Some(&b) = bytes.first() {
                        // The lines of one event's data are joined by a newline.
                        self.data(b"\n");
                        self.end_line(b);
                        bytes = &bytes[1..];
                    }
                }
                Line::Skip => match memchr::memchr2(b'\n', b'\r', bytes) {
                    None => return,
                    Some(at) => {
                        self.end_line(bytes[at]);
                        bytes = &bytes[at + 1..];
                    }
                },
                Line::Start | Line::Field | Line::DataStart => {
                    let b = bytes[0];
                    bytes = &bytes[1..];
                    self.step(b);
                }
            }
        }
    }

    fn step(&mut self, b: u8) {
        match (self.line, b) {
            (Line::Start, b'\n' | b'\r') => {
                self.dispatch();
                self.after_cr = b == b'\r';
            }
            (Line::Start, b':') => self.line = Line::Skip,
            (Line::Start, _) => {
                self.field_len = 0;
                self.line = Line::Field;
                self.step(b);
            }
            (Line::Field, b':') => {
                self.line = if self.is_data() { Line::DataStart } else { Line::Skip };
                if self.line == Line::DataStart {
                    self.start_data();
                }
            }
            (Line::Field, b'\n' | b'\r') => {
                // A field without a colon has an empty value: `data` alone is an empty line of data.
                if self.is_data() {
                    self.start_data();
                    self.data(b"\n");
                }
                self.end_line(b);
            }
            (Line::Field, _) => {
                if self.field_len < self.field.len() {
                    self.field[self.field_len] = b;
                }
                self.field_len += 1;
            }
            (Line::DataStart, b' ') => self.line = Line::Data,
            (Line::DataStart, b'\n' | b'\r') => {
                self.data(b"\n");
                self.end_line(b);
            }
            (Line::DataStart, _) => {
                self.line = Line::Data;
                self.data(&[b]);
            }
            (Line::Data | Line::Skip, _) => unreachable!("read a run at a time"),
        }
    }

    fn is_data(&self) -> bool {
        self.field_len == 4 && &self.field[..4] == b"data"
    }

    fn start_data(&mut self) {
        if !self.has_data {
            self.has_data = true;
            self.event_bytes = 0;
            self.scan.reset();
        }
    }

    fn data(&mut self, bytes: &[u8]) {
        self.start_data();
        self.event_bytes += bytes.len();
        if self.event_bytes <= self.max_event {
            self.scan.feed(bytes);
        }
    }

    fn end_line(&mut self, b: u8) {
        self.line = Line::Start;
        self.after_cr = b == b'\r';
    }

    /// A blank line: the event is complete, and what its data reported is the latest.
    fn dispatch(&mut self) {
        if !self.has_data {
            return;
        }
        self.has_data = false;
        if self.event_bytes > self.max_event {
            self.oversized += 1;
            return;
        }
        self.scan.finish();
        for (all, event) in self.found.iter_mut().zip(self.scan.found()) {
            if event.is_some() {
                *all = *event;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(stream: &str, pointers: &[&str], piece: usize) -> Vec<Option<u64>> {
        let mut events = Events::new(Pointers::new(pointers.iter().copied()), 1 << 16);
        for chunk in stream.as_bytes().chunks(piece) {
            events.feed(chunk);
        }
        events.found().to_vec()
    }

    const OPENAI: &str = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
        data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n\
        data: [DONE]\n\n";

    const ANTHROPIC: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n\
        event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"data: {\\\"usage\\\"\"}}\r\n\r\n\
        : a comment\r\n\r\n\
        event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\n\r\n\
        event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\r\n\r\n\
        event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";

    #[test]
    fn the_providers_streams_report_their_usage_in_any_pieces() {
        for piece in [1, 2, 5, 13, 1000] {
            assert_eq!(read(OPENAI, &["/usage/total_tokens"], piece), [Some(21)], "{piece}");
            assert_eq!(
                read(ANTHROPIC, &["/message/usage/input_tokens", "/usage/output_tokens"], piece),
                [Some(25), Some(40)],
                "the cumulative output count, its last value: {piece}"
            );
        }
    }

    #[test]
    fn data_lines_join_and_an_unfinished_event_reports_nothing() {
        let split = "data: {\"usage\":\ndata: {\"total_tokens\": 7}}\n\n";
        assert_eq!(read(split, &["/usage/total_tokens"], 3), [Some(7)]);
        let unfinished = "data: {\"usage\":{\"total_tokens\":7}}\n";
        assert_eq!(read(unfinished, &["/usage/total_tokens"], 3), [None]);
        let no_space = "data:{\"usage\":{\"total_tokens\":8}}\r\rdata";
        assert_eq!(read(no_space, &["/usage/total_tokens"], 1), [Some(8)]);
    }

    #[test]
    fn an_event_over_the_cap_is_left_unread() {
        let mut events = Events::new(Pointers::new(["/usage/total_tokens"]), 64);
        let padding = "x".repeat(100);
        events.feed(format!("data: {{\"pad\":\"{padding}\",\"usage\":{{\"total_tokens\":5}}}}\n\n").as_bytes());
        assert_eq!((events.found(), events.oversized), (&[None][..], 1));
        events.feed(b"data: {\"usage\":{\"total_tokens\":6}}\n\n");
        assert_eq!(events.found(), [Some(6)]);
    }
}
