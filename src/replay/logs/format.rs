//! [`Format`]: the log formats opbound reads, and the facts each does not log.

/// A log format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Detected from each file's first readable lines.
    #[default]
    Auto,
    /// nginx `combined` (also Apache's), optionally followed by `name=value` fields.
    Combined,
    /// nginx `log_format ... escape=json` with nginx variable names as keys.
    NginxJson,
    /// Caddy's JSON access log.
    Caddy,
    /// Envoy's `json_format` access log with command-operator names as keys.
    Envoy,
    /// opbound's own request log (`serve --request-log`).
    Opbound,
}

impl Format {
    /// The facts this format does not log, before any `--field` mapping supplies them.
    ///
    /// `combined` logs the time to the second only ("sub-second time"): requests within a second
    /// replay in line order at the same instant. Its "duration" comes from a trailing `rt=` or
    /// `request_time=` field when one is logged (then it is not reported as lacking).
    pub fn lacks(&self) -> &'static [&'static str] {
        match self {
            Format::Auto | Format::Opbound => &[],
            Format::Combined => &["user", "org", "roles", "token", "headers", "cookies", "duration", "sub-second time"],
            Format::NginxJson => &["user", "org", "roles", "token"],
            Format::Caddy => &["org", "roles", "token"],
            Format::Envoy => &["user", "org", "roles", "token", "headers", "cookies"],
        }
    }
}
