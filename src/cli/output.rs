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

/// How wide a table on standard output may be: `COLUMNS` when it is set, else the terminal's
/// width when standard output is one (80 when it cannot be read); none for a pipe or a file,
/// where cutting a line would lose what a reader greps for.
pub(super) fn width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&n| n > 0) {
        return Some(n);
    }
    if !io::IsTerminal::is_terminal(&io::stdout()) {
        return None;
    }
    // `stty size` reads the terminal's size without any unsafe ioctl of our own.
    let size = std::fs::File::open("/dev/tty")
        .ok()
        .and_then(|tty| {
            std::process::Command::new("stty").arg("size").stdin(tty).stderr(std::process::Stdio::null()).output().ok()
        })
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<usize>().ok())
        .filter(|&n| n > 0);
    Some(size.unwrap_or(80))
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
