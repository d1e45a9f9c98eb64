//! A scripted upstream that drives the pool and its connections through any sequence of answers,
//! stray bytes, early and late bytes and closes, checking that no request is ever given bytes the
//! upstream wrote before that request was sent: run by a unit test and by the fuzz target
//! `upstream_desync`.
//!
//! Every request gets a marker letter; the upstream's real answer to it says that letter in an
//! `X-Marker` field and carries only that letter in its body. Stray bytes never hold a lower-case
//! letter (a response planted in them carries `#`), so an answer whose head does not name the
//! request's marker, or whose body holds any other byte, was read out of step.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Asked, Io};
use crate::server::upstream::pool::{Pool, UpstreamPool};

/// The status of a response planted in stray bytes; real answers use 200 to 204.
const PLANTED: u16 = 299;
/// How long a client waits for a body before it goes away (on the paused clock: no real wait).
const BODY_WAIT: Duration = Duration::from_secs(60);

/// Runs the ops `data` encodes against a pool of scripted connections; panics when a request is
/// answered with bytes that were not written for it.
pub fn run(data: &[u8]) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build() {
        Ok(runtime) => runtime,
        Err(e) => panic!("a runtime for the scripted upstream: {e}"),
    };
    runtime.block_on(drive(data));
}

async fn drive(data: &[u8]) {
    let mut input = Input(data);
    let upstream = Arc::new(Mutex::new(Upstream::default()));
    let max_idle = 1 + usize::from(input.byte() % 3);
    // Reuse paused after stray bytes, or every connection still checked and reused.
    let stray_pause = if input.byte() % 2 == 0 { Duration::ZERO } else { Duration::from_secs(10) };
    let settings = UpstreamPool { idle_timeout: Duration::from_secs(30), max_idle, stray_pause };
    let pool = {
        let upstream = upstream.clone();
        Pool::scripted(move || Io::Stream(Box::new(Scripted::new(&upstream))), settings)
    };
    let mut sent = 0usize;
    while !input.0.is_empty() {
        match input.byte() % 8 {
            // Stray bytes written later arrive now, while every connection is idle.
            0 => lock(&upstream).release(),
            // The upstream closes its idle connections.
            1 => lock(&upstream).close_all(),
            _ => {
                let marker = b'a' + (sent % 26) as u8;
                sent += 1;
                let plan = Plan::read(&mut input, marker);
                exchange(&pool, &upstream, plan).await;
            }
        }
    }
}

/// One request and how the upstream answers it.
#[derive(Clone, Debug)]
struct Plan {
    marker: u8,
    head_request: bool,
    /// The bytes written at once in answer (the response, then any stray bytes).
    now: Vec<Vec<u8>>,
    /// Stray bytes written later: they arrive with the next `release`.
    later: Vec<u8>,
    /// The answer a reader in step gets: status and body.
    expect: Option<(u16, Vec<u8>)>,
    /// How many body frames the client reads before it goes away (`None`: all).
    read_frames: Option<u8>,
    /// The largest read the connection is given at a time.
    split: usize,
}

impl Plan {
    fn read(input: &mut Input<'_>, marker: u8) -> Plan {
        let kind = input.byte() % 9;
        let len = match input.byte() % 4 {
            0 => usize::from(input.byte()),
            // At and around the sizes the connection reads with.
            n => usize::from(n) * 16 * 1024 - 64 + usize::from(input.byte() % 128),
        };
        let status = 200 + u16::from(input.byte() % 3);
        let body = vec![marker; len];
        let m = marker as char;
        let mut head_request = false;
        let mut response = Vec::new();
        let mut stray = Vec::new();
        let expect = match kind {
            0 => {
                response.extend(
                    format!("HTTP/1.1 {status} OK\r\nX-Marker: {m}\r\nContent-Length: {len}\r\n\r\n").into_bytes(),
                );
                response.extend(&body);
                Some((status, body))
            }
            1 => {
                response.extend(
                    format!("HTTP/1.1 {status} OK\r\nX-Marker: {m}\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes(),
                );
                for piece in body.chunks(1 + usize::from(input.byte()) * 64) {
                    response.extend(format!("{:x}\r\n", piece.len()).into_bytes());
                    response.extend(piece);
                    response.extend(b"\r\n");
                }
                response.extend(b"0\r\n");
                if input.byte() % 2 == 1 {
                    response.extend(b"X-Trailer: done\r\n");
                }
                response.extend(b"\r\n");
                Some((status, body))
            }
            // A 204 or 304 that carries a body anyway: what follows its head is stray.
            2 | 3 => {
                let status = if kind == 2 { 204 } else { 304 };
                response.extend(
                    format!("HTTP/1.1 {status} X\r\nX-Marker: {m}\r\nContent-Length: {len}\r\n\r\n").into_bytes(),
                );
                stray.extend(vec![b'#'; len]);
                Some((status, Vec::new()))
            }
            // A HEAD answered with its body.
            4 => {
                head_request = true;
                response.extend(
                    format!("HTTP/1.1 {status} OK\r\nX-Marker: {m}\r\nContent-Length: {len}\r\n\r\n").into_bytes(),
                );
                stray.extend(vec![b'#'; len]);
                Some((status, Vec::new()))
            }
            // Interim responses first, some of them too many.
            5 => {
                for _ in 0..input.byte() % 40 {
                    response.extend(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                response.extend(
                    format!("HTTP/1.1 {status} OK\r\nX-Marker: {m}\r\nContent-Length: {len}\r\n\r\n").into_bytes(),
                );
                response.extend(&body);
                Some((status, body))
            }
            // A switch nobody asked for.
            6 => {
                response.extend(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n");
                None
            }
            // The same length twice, which the client gets once.
            7 => {
                response.extend(
                    format!("HTTP/1.1 {status} OK\r\nX-Marker: {m}\r\nContent-Length: {len}, {len}\r\n\r\n")
                        .into_bytes(),
                );
                response.extend(&body);
                Some((status, body))
            }
            // No answer in time (stray bytes for it come later: written at once, they would be
            // its answer, however wrong, not another's).
            _ => None,
        };
        // After the response: nothing more, or junk, written at once or later.
        stray.extend(input.junk());
        let answers = !response.is_empty();
        let mut now = split_at(response, input.byte());
        let later = if input.byte().is_multiple_of(3) || !answers {
            stray
        } else {
            if !stray.is_empty() {
                now.push(stray);
            }
            Vec::new()
        };
        let read_frames = match input.byte() % 4 {
            0 => Some(input.byte() % 3),
            _ => None,
        };
        let split = match input.byte() % 3 {
            0 => 1 + usize::from(input.byte()),
            _ => usize::MAX,
        };
        Plan { marker, head_request, now, later, expect, read_frames, split }
    }
}

/// `bytes` written in two pieces, cut at a point `at` picks.
fn split_at(mut bytes: Vec<u8>, at: u8) -> Vec<Vec<u8>> {
    if at.is_multiple_of(2) || bytes.len() < 2 {
        return vec![bytes];
    }
    let cut = usize::from(at) * bytes.len() / 256;
    let tail = bytes.split_off(cut.max(1));
    vec![bytes, tail]
}

async fn exchange(pool: &Pool, upstream: &Arc<Mutex<Upstream>>, plan: Plan) {
    let marker = plan.marker;
    let head = format!(
        "{} /{} HTTP/1.1\r\nHost: scripted\r\n\r\n",
        if plan.head_request { "HEAD" } else { "GET" },
        marker as char
    );
    let asked = Asked { head: plan.head_request, ..Asked::default() };
    let read_frames = plan.read_frames;
    let expect = plan.expect.clone();
    lock(upstream).plan = Some(plan);
    let answered = pool.exchange(head.as_bytes(), None, asked, true, Duration::from_secs(5)).await;
    lock(upstream).plan = None;
    let Ok((parts, fields, mut body)) = answered else { return };
    let status = parts.status.as_u16();
    let m = marker as char;
    assert_ne!(status, PLANTED, "request {m} read a response planted in stray bytes");
    let name = http::HeaderName::from_static("x-marker");
    let named: Vec<&[u8]> = fields.get_all(&name).collect();
    assert_eq!(named, [&[marker][..]], "request {m} was given a head written for another ({status})");
    let mut got = Vec::new();
    let read = async {
        let mut frames = 0u8;
        loop {
            if read_frames.is_some_and(|n| frames >= n) {
                return false;
            }
            match body.frame().await {
                None => return true,
                Some(Ok(frame)) => {
                    frames = frames.saturating_add(1);
                    if let Ok(data) = frame.into_data() {
                        got.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => return false,
            }
        }
    };
    let whole = tokio::time::timeout(BODY_WAIT, read).await.unwrap_or(false);
    if let Some(other) = got.iter().find(|&&b| b != marker) {
        panic!("request {m} was given a {:?} in its body, written for another", *other as char);
    }
    if whole {
        match expect {
            Some((want, body)) => {
                assert_eq!(status, want, "request {m}'s status");
                assert_eq!(got.len(), body.len(), "request {m}'s body");
            }
            None => panic!("request {m} got a {status} its upstream never sent"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The upstream: every connection it accepted, and the answer to the request under way.
#[derive(Default)]
struct Upstream {
    wires: Vec<Arc<Mutex<Wire>>>,
    plan: Option<Plan>,
}

impl Upstream {
    fn release(&mut self) {
        for wire in &self.wires {
            let mut wire = lock(wire);
            while let Some(late) = wire.late.pop_front() {
                wire.readable.extend_from_slice(&late);
            }
            wire.wake();
        }
    }

    fn close_all(&mut self) {
        for wire in &self.wires {
            let mut wire = lock(wire);
            wire.closed = true;
            wire.wake();
        }
    }
}

/// One connection as the upstream sees it.
#[derive(Default)]
struct Wire {
    /// What the client may read now.
    readable: BytesMut,
    /// Written later: arrives at the next release.
    late: VecDeque<Vec<u8>>,
    closed: bool,
    waker: Option<Waker>,
    /// What the client wrote and the upstream has not yet taken as a request head.
    written: Vec<u8>,
    /// The largest read the client gets at a time.
    split: usize,
}

impl Wire {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The client's end of one scripted connection.
struct Scripted {
    wire: Arc<Mutex<Wire>>,
    upstream: Arc<Mutex<Upstream>>,
}

impl Scripted {
    fn new(upstream: &Arc<Mutex<Upstream>>) -> Scripted {
        let wire = Arc::new(Mutex::new(Wire { split: usize::MAX, ..Wire::default() }));
        lock(upstream).wires.push(wire.clone());
        Scripted { wire, upstream: upstream.clone() }
    }
}

impl AsyncRead for Scripted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut wire = lock(&self.wire);
        if wire.readable.is_empty() {
            if wire.closed {
                return Poll::Ready(Ok(()));
            }
            wire.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = wire.readable.len().min(buf.remaining()).min(wire.split);
        let bytes = wire.readable.split_to(n);
        buf.put_slice(&bytes);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let mut wire = lock(&self.wire);
        if wire.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        wire.written.extend_from_slice(bytes);
        // A whole request head: the upstream answers it as planned.
        while let Some(end) = wire.written.windows(4).position(|w| w == b"\r\n\r\n") {
            wire.written.drain(..end + 4);
            let Some(plan) = lock(&self.upstream).plan.take() else { continue };
            wire.split = plan.split;
            for piece in plan.now {
                wire.readable.extend_from_slice(&piece);
            }
            if !plan.later.is_empty() {
                wire.late.push_back(plan.later);
            }
            wire.wake();
        }
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The fuzz input, read a byte at a time (zeros once it is used up).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// Stray bytes: some of the input, with every marker letter made `#`, or a planted response.
    fn junk(&mut self) -> Vec<u8> {
        let len = usize::from(self.byte() % 48);
        let take = len.min(self.0.len());
        let (raw, rest) = self.0.split_at(take);
        self.0 = rest;
        let mut junk: Vec<u8> = raw.iter().map(|&b| if b.is_ascii_lowercase() { b'#' } else { b }).collect();
        if self.byte() % 2 == 1 {
            junk.extend(format!("HTTP/1.1 {PLANTED} Planted\r\nContent-Length: 3\r\n\r\n###").into_bytes());
        }
        junk
    }
}
