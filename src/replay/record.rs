//! One request read from an access log: what replay judges and suggest measures.

use std::net::IpAddr;

use crate::engine::clock::Nanos;

/// A request as an access log recorded it, normalised across log formats.
///
/// Only what the bounds can read is kept: the method and raw target (routed and canonicalised
/// exactly as `serve` does), the client address, the identity fields and the headers and cookies
/// a bound may count per. Values are opaque strings: a log that hashed them (opbound's own
/// request log does by default) replays alike, since only equality of keys matters to a count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Where it was read: the file's index among the logs given, and its 1-based line number.
    pub source: Source,
    /// When the request arrived, in Unix nanoseconds. Formats that log the time a request
    /// ended are moved back by its duration where the log has one.
    pub time: Nanos,
    /// The method as logged (replay upper-cases it as `serve` does).
    pub method: String,
    /// The raw request target, path and query, as the client sent it.
    pub target: String,
    /// The client address; `None` when the log has none (replay then counts every such request
    /// under `0.0.0.0`, and says so).
    pub client: Option<IpAddr>,
    /// The response status, when logged (`count-when` bounds settle by it).
    pub status: Option<u16>,
    /// How long the request took, when logged (concurrency bounds release at its end).
    pub duration: Option<Nanos>,
    /// The signed-in user, when the log identifies one (`per: user`).
    pub user: Option<String>,
    /// The caller's organisation (`per: org`).
    pub org: Option<String>,
    /// The caller's roles (`applies-to`).
    pub roles: Vec<String>,
    /// The credential, when the log holds one (`per: token`): put where the operation's security
    /// scheme says a credential lives.
    pub token: Option<String>,
    /// Request headers the log holds, names lower case, in order (`per: header:NAME`, credentials
    /// in headers, `cost-from` headers).
    pub headers: Vec<(String, String)>,
    /// Cookies the log holds, by name (`per: cookie:NAME`).
    pub cookies: Vec<(String, String)>,
}

/// Where a record was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Index of the log file among those given, from 0.
    pub file: usize,
    /// Line number, from 1.
    pub line: u64,
}
