//! Printing that outlives its reader: `opbound routes spec.yaml | head` stops writing when `head`
//! leaves, instead of panicking the way `println!` does on a closed pipe.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Where a line goes.
#[derive(Clone, Copy)]
pub(super) enum Stream {
    Out,
    Err,
}

/// What became of one stream. Atomics rather than a value passed around, so that every line the
/// commands print goes through one macro, as `println!` did.
struct State {
    /// Nothing more is written: the reader left, or the stream failed.
    closed: AtomicBool,
    /// The stream failed for some other reason than a reader leaving (a full disk, say), so
    /// what was printed is incomplete and the exit code says so.
    failed: AtomicBool,
}

static OUT: State = State { closed: AtomicBool::new(false), failed: AtomicBool::new(false) };
static ERR: State = State { closed: AtomicBool::new(false), failed: AtomicBool::new(false) };

/// Writes one line. A reader that has gone (a broken pipe) silences the stream for the rest of
/// the run: it asked for no more. Any other failure is said once on stderr.
pub(super) fn line(stream: Stream, args: fmt::Arguments<'_>) {
    let state = match stream {
        Stream::Out => &OUT,
        Stream::Err => &ERR,
    };
    if state.closed.load(Ordering::Relaxed) {
        return;
    }
    let written = match stream {
        Stream::Out => writeln!(io::stdout().lock(), "{args}"),
        Stream::Err => writeln!(io::stderr().lock(), "{args}"),
    };
    let Err(e) = written else { return };
    state.closed.store(true, Ordering::Relaxed);
    if e.kind() == io::ErrorKind::BrokenPipe {
        return;
    }
    state.failed.store(true, Ordering::Relaxed);
    if let Stream::Out = stream {
        line(Stream::Err, format_args!("error: cannot write to standard output: {e}"));
    }
}

/// The exit code of a command that printed: `code`, or [`super::exit::UNREADABLE`] when output
/// was lost for another reason than its reader leaving, so a truncated file is never a success.
pub(super) fn exit_code(code: u8) -> u8 {
    if OUT.failed.load(Ordering::Relaxed) || ERR.failed.load(Ordering::Relaxed) {
        code.max(super::exit::UNREADABLE)
    } else {
        code
    }
}

/// `println!` through [`line`].
macro_rules! outln {
    () => {
        $crate::cli::output::line($crate::cli::output::Stream::Out, format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::line($crate::cli::output::Stream::Out, format_args!($($arg)*))
    };
}

/// `eprintln!` through [`line`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::output::line($crate::cli::output::Stream::Err, format_args!($($arg)*))
    };
}
