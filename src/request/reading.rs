//! How a value a client wrote is read the one way every upstream would read it: trimmed of the
//! spaces and tabs around it, or [`Unclear`] when upstreams would read it differently.

/// Why a request's key cannot be read the one way every upstream would read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unclear {
    /// Sent more than once, with different values.
    Repeated,
    /// A malformed percent-escape (`%ZZ`), which some frameworks keep, some drop, some refuse.
    Malformed,
    /// In a compressed body (`Content-Encoding: gzip`, `br`, ...), which opbound does not
    /// undo and the upstream's parser may (Express's inflates gzip, deflate and brotli).
    Encoded,
    /// In a body that did not all arrive within the server's patience (whole milliseconds).
    Stalled {
        /// How long the server waited for the body, in milliseconds.
        patience_ms: u64,
    },
}

/// Bytes without the spaces and tabs around them.
pub(super) fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}
