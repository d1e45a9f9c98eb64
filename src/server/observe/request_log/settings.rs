//! How a request log writes the values that identify a caller (`--request-log-keys`), and the
//! secret it hashes them with.

use std::path::PathBuf;

use siphasher::sip128::SipHasher13;

/// How values that identify a caller are written (`--request-log-keys`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeyMode {
    // Plain comments, not docs: clap would print documented values one a line, and lay out the
    // whole of `serve --help` apart for them.
    // `h:` and 32 hex digits of a keyed hash: equal values stay equal, none can be read back.
    #[default]
    Hashed,
    // As the client sent them.
    Plain,
}

/// The key values are hashed with.
pub(crate) type Secret = [u8; 16];

/// The fewest bytes a `--request-log-secret-file` holds: a SipHash key's worth.
pub(crate) const MIN_SECRET: usize = 16;

/// `--request-log` and its companions, checked, with the secret file read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The file lines are appended to (created if missing; reopened on SIGHUP).
    pub path: PathBuf,
    /// Whether values are hashed or written as they came.
    pub keys: KeyMode,
    /// The hashing key from `--request-log-secret-file`; `None`: a random one per process.
    pub secret: Option<Secret>,
}

/// A secret file too short to be one: how many bytes it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("holds {0} bytes, and a secret needs at least {MIN_SECRET}; write one with `head -c 32 /dev/urandom | base64`")]
pub(crate) struct ShortSecret(pub usize);

/// The hashing key of a secret file's bytes (a trailing newline removed), which may be longer
/// than a key: every byte counts. Or why the file cannot serve as one.
pub(crate) fn secret_from(mut bytes: &[u8]) -> Result<Secret, ShortSecret> {
    while let [rest @ .., b'\n' | b'\r'] = bytes {
        bytes = rest;
    }
    if bytes.len() < MIN_SECRET {
        return Err(ShortSecret(bytes.len()));
    }
    // A fixed key: the derivation only folds any length into 16 bytes; the secret is the input.
    Ok(SipHasher13::new_with_keys(0x6f70_626f_756e_6400, 0x7265_7175_6573_746c).hash(bytes).as_bytes())
}
