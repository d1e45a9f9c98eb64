//! Access logs read into [`Record`]s: nginx `combined`, the JSON logs of nginx, Caddy and Envoy,
//! and opbound's own request log; gzip read directly; malformed lines counted and reported.

mod caddy;
mod combined;
mod envoy;
mod json;
mod opbound;
mod order;
mod time;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flate2::read::MultiGzDecoder;

use super::{Record, Source};
use crate::engine::clock::Nanos;
use order::{Merge, Records, Reorder};

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

    fn parse(self, line: &str, fields: &[Field], problems: &mut Problems) -> Result<Record, String> {
        match self {
            Format::Combined => combined::parse(line, fields),
            Format::NginxJson => json::parse_nginx(line, fields),
            Format::Caddy => caddy::parse(line, fields, problems),
            Format::Envoy => envoy::parse(line, fields),
            Format::Opbound => opbound::parse(line, fields),
            Format::Auto => Err("format not detected".to_owned()),
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

/// Which log field feeds which fact, beyond what a format names itself (`--field user=uid`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// `(fact, field)`: fact is `user`, `org`, `roles`, `token`, `address`, `header:NAME` or
    /// `cookie:NAME`; field a JSON key (dotted for nested objects) or a `name=value` field.
    pub fields: Vec<(String, String)>,
}

const FACTS: &str = "user, org, roles, token, address, header:NAME, cookie:NAME";

impl Mapping {
    /// Reads a `--field fact=field` value into `(fact, field)`, the fact checked and header
    /// names lower-cased.
    pub fn parse(text: &str) -> Result<(String, String), String> {
        let Some((fact, field)) = text.split_once('=') else {
            return Err(format!("`{text}` is not fact=field (for example `user=remote_user`)"));
        };
        let (fact, field) = (fact.trim(), field.trim());
        if field.is_empty() {
            return Err(format!("`{text}` names no field after `=`"));
        }
        let fact = Fact::parse(fact)?;
        Ok((fact.to_string(), field.to_owned()))
    }

    fn compile(&self) -> Result<Vec<Field>, LogError> {
        let mut fields = Vec::with_capacity(self.fields.len());
        for (fact, path) in &self.fields {
            let fact = Fact::parse(fact).map_err(LogError::Mapping)?;
            if path.is_empty() {
                return Err(LogError::Mapping(format!("`{fact}` is mapped to no field")));
            }
            fields.push(Field { fact, path: path.clone() });
        }
        Ok(fields)
    }
}

/// A fact a mapped field can supply.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fact {
    User,
    Org,
    Roles,
    Token,
    Address,
    Header(String),
    Cookie(String),
}

impl Fact {
    fn parse(text: &str) -> Result<Fact, String> {
        let named = |prefix: &str| text.strip_prefix(prefix).filter(|name| !name.is_empty());
        Ok(match text {
            "user" => Fact::User,
            "org" => Fact::Org,
            "roles" => Fact::Roles,
            "token" => Fact::Token,
            "address" => Fact::Address,
            _ => {
                if let Some(name) = named("header:") {
                    Fact::Header(name.to_ascii_lowercase())
                } else if let Some(name) = named("cookie:") {
                    Fact::Cookie(name.to_owned())
                } else {
                    return Err(format!("unknown fact `{text}`: expected one of {FACTS}"));
                }
            }
        })
    }

    /// The entry of [`Format::lacks`] this fact fills.
    fn lack(&self) -> Option<&'static str> {
        match self {
            Fact::User => Some("user"),
            Fact::Org => Some("org"),
            Fact::Roles => Some("roles"),
            Fact::Token => Some("token"),
            Fact::Address | Fact::Header(_) | Fact::Cookie(_) => None,
        }
    }
}

impl std::fmt::Display for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fact::User => f.write_str("user"),
            Fact::Org => f.write_str("org"),
            Fact::Roles => f.write_str("roles"),
            Fact::Token => f.write_str("token"),
            Fact::Address => f.write_str("address"),
            Fact::Header(name) => write!(f, "header:{name}"),
            Fact::Cookie(name) => write!(f, "cookie:{name}"),
        }
    }
}

/// One checked `--field` mapping.
#[derive(Clone, Debug)]
struct Field {
    fact: Fact,
    path: String,
}

/// A mapped field's value on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Text(String),
    List(Vec<String>),
}

impl Value {
    /// The single value: a list gives its first entry (Caddy logs each header as an array).
    fn first(self) -> Option<String> {
        match self {
            Value::Text(text) => Some(text),
            Value::List(list) => list.into_iter().next(),
        }
    }
}

/// Sets every mapped fact from the line's fields, overriding what the format read itself; a field
/// the line does not have leaves its fact empty.
fn apply(fields: &[Field], record: &mut Record, lookup: impl Fn(&str) -> Option<Value>) -> Result<(), String> {
    for field in fields {
        let value = lookup(&field.path);
        match &field.fact {
            Fact::User => record.user = value.and_then(Value::first),
            Fact::Org => record.org = value.and_then(Value::first),
            Fact::Token => record.token = value.and_then(Value::first),
            Fact::Roles => {
                record.roles = match value {
                    None => Vec::new(),
                    Some(Value::List(list)) => list,
                    // A JSON array written into a text field (`roles="[\"a\",\"b\"]"`).
                    Some(Value::Text(text)) if text.starts_with('[') => serde_json::from_str(&text)
                        .map_err(|_| format!("{} `{text}` is not a JSON array of strings", field.path))?,
                    Some(Value::Text(text)) => {
                        text.split(',').map(str::trim).filter(|role| !role.is_empty()).map(str::to_owned).collect()
                    }
                }
            }
            Fact::Address => {
                record.client = match value.and_then(Value::first) {
                    None => None,
                    Some(text) => {
                        Some(address(&text).ok_or_else(|| format!("{} `{text}` is not an IP address", field.path))?)
                    }
                }
            }
            Fact::Header(name) => {
                record.headers.retain(|(header, _)| header != name);
                if let Some(value) = value.and_then(Value::first) {
                    record.headers.push((name.clone(), value));
                }
            }
            Fact::Cookie(name) => {
                record.cookies.retain(|(cookie, _)| cookie != name);
                if let Some(value) = value.and_then(Value::first) {
                    record.cookies.push((name.clone(), value));
                }
            }
        }
    }
    Ok(())
}

/// A client address as logs write it: an IP, `ip:port`, `[v6]:port`, or an `X-Forwarded-For`
/// list, whose last entry is the one the nearest proxy saw.
fn address(text: &str) -> Option<IpAddr> {
    let last = text.rsplit(',').next()?.trim();
    last.parse::<IpAddr>()
        .ok()
        .or_else(|| last.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
        .or_else(|| last.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// `Cookie` header values split into `(name, value)` pairs.
fn cookies(header: &str) -> impl Iterator<Item = (String, String)> + '_ {
    header.split(';').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let name = name.trim();
        (!name.is_empty()).then(|| (name.to_owned(), value.trim().to_owned()))
    })
}

/// Arrival time from a logged end time and duration.
fn arrival(end: Nanos, duration: Option<Nanos>) -> Nanos {
    end.saturating_sub(duration.unwrap_or(0))
}

/// How logs are read.
#[derive(Clone, Debug)]
pub struct Options {
    /// The format of every file, or `Auto`.
    pub format: Format,
    /// Extra field mappings.
    pub mapping: Mapping,
    /// How far out of order lines may come and still be replayed in order.
    pub reorder: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options { format: Format::Auto, mapping: Mapping::default(), reorder: Duration::from_secs(5) }
    }
}

/// How many malformed lines are kept as examples.
const EXAMPLES: usize = 20;

/// The longest line kept, in bytes: longer ones are malformed (no access log writes them; a
/// binary file given by mistake would).
const LONGEST_LINE: u64 = 1 << 20;

/// How many records may wait in one file's reorder buffer: memory stays bounded however far
/// apart in time a log's lines are.
const REORDER_CAP: usize = 1_000_000;

/// What reading the logs ran into, for the report.
#[derive(Clone, Debug, Default)]
pub struct Problems {
    /// Lines that could not be read, skipped.
    pub malformed: u64,
    /// The first few of them, with why (the line is in the [`Source`]; the file is
    /// `formats[source.file]`).
    pub examples: Vec<(Source, String)>,
    /// Lines that came later than the reorder window allows: replayed at the latest time seen.
    pub late: u64,
    /// Each file given, in order, with its format: [`Format::Auto`] until a line was readable.
    pub formats: Vec<(PathBuf, Format)>,
    /// Facts the logs do not hold (see [`Format::lacks`]), and headers a log redacted, such as
    /// `header:authorization`; sorted, each once.
    pub lacks: Vec<String>,
}

impl Problems {
    fn malformed(&mut self, source: Source, why: String) {
        self.malformed += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push((source, why));
        }
    }

    fn lack(&mut self, fact: &str) {
        if let Err(at) = self.lacks.binary_search_by(|lack| lack.as_str().cmp(fact)) {
            self.lacks.insert(at, fact.to_owned());
        }
    }
}

/// A fatal error: a log that cannot be opened or read further.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file cannot be opened or read (a corrupt gzip stream is one).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `--field` mapping names no fact.
    #[error("--field: {0}")]
    Mapping(String),
}

/// Records from one or more logs, merged by time.
///
/// Memory stays bounded: each file is read a line at a time, and at most a reorder window's
/// worth of records (capped at a million per file) waits to be put in order.
pub struct Logs {
    records: Merge<Reorder<LogFile>>,
    problems: Problems,
}

impl Logs {
    /// Opens the logs; each is read as it is needed, a line at a time.
    pub fn open(paths: &[PathBuf], options: Options) -> Result<Logs, LogError> {
        let fields: std::sync::Arc<[Field]> = options.mapping.compile()?.into();
        let window = Nanos::try_from(options.reorder.as_nanos()).unwrap_or(Nanos::MAX);
        let mut problems = Problems::default();
        let mut files = Vec::with_capacity(paths.len());
        for (index, path) in paths.iter().enumerate() {
            let file = LogFile::open(index, path, options.format, fields.clone())?;
            problems.formats.push((path.clone(), options.format));
            files.push(Reorder::new(file, window, REORDER_CAP));
        }
        Ok(Logs { records: Merge::new(files), problems })
    }

    /// Records from one log already open (`name` stands for its path in reports): what the
    /// fuzz target and tests read from memory. Gzip is detected as for a file.
    pub fn from_reader(name: &Path, reader: impl Read + Send + 'static, options: Options) -> Result<Logs, LogError> {
        let fields: std::sync::Arc<[Field]> = options.mapping.compile()?.into();
        let window = Nanos::try_from(options.reorder.as_nanos()).unwrap_or(Nanos::MAX);
        let io = |source| LogError::Io { path: name.to_owned(), source };
        let mut raw = BufReader::new(reader);
        let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let lines: Box<dyn BufRead + Send> =
            if gzip { Box::new(BufReader::new(MultiGzDecoder::new(raw))) } else { Box::new(raw) };
        let file = LogFile::new(0, name, lines, options.format, fields);
        let problems = Problems { formats: vec![(name.to_owned(), options.format)], ..Problems::default() };
        Ok(Logs { records: Merge::new(vec![Reorder::new(file, window, REORDER_CAP)]), problems })
    }

    /// What reading has run into so far.
    pub fn problems(&self) -> &Problems {
        &self.problems
    }
}

impl Iterator for Logs {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.records.pull(&mut self.problems)
    }
}

/// One log, read line by line into records in the order written.
struct LogFile {
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
    fn open(index: usize, path: &Path, format: Format, fields: std::sync::Arc<[Field]>) -> Result<LogFile, LogError> {
        let io = |source| LogError::Io { path: path.to_owned(), source };
        let mut raw = BufReader::new(File::open(path).map_err(io)?);
        // Rotated logs are compressed or not whatever their names say: the magic bytes tell.
        let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let lines: Box<dyn BufRead + Send> =
            if gzip { Box::new(BufReader::new(MultiGzDecoder::new(raw))) } else { Box::new(raw) };
        Ok(LogFile::new(index, path, lines, format, fields))
    }

    fn new(
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
                problems.malformed(source, format!("longer than {LONGEST_LINE} bytes"));
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
                        problems.malformed(source, "not a line of any known log format".to_owned());
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

#[cfg(test)]
pub(super) mod tests {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    /// The directory of the sample logs.
    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/logs")
    }

    /// Every record of one sample log, and the problems reading it met.
    pub(in crate::replay::logs) fn read_fixture(name: &str, options: Options) -> (Vec<Record>, Problems) {
        read(&[fixtures().join(name)], options)
    }

    fn read(paths: &[PathBuf], options: Options) -> (Vec<Record>, Problems) {
        let mut logs = Logs::open(paths, options).unwrap();
        let records = logs.by_ref().collect::<Result<Vec<_>, _>>().unwrap();
        (records, logs.problems().clone())
    }

    /// A fresh directory of this test run's own.
    fn scratch() -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "opbound-logs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    /// Fact and field, or why the mapping is refused.
    type Parsed = Result<(&'static str, &'static str), &'static str>;

    const SAMPLES: [(&str, Format); 5] = [
        ("combined.log", Format::Combined),
        ("nginx.json.log", Format::NginxJson),
        ("caddy.json.log", Format::Caddy),
        ("envoy.json.log", Format::Envoy),
        ("opbound.json.log", Format::Opbound),
    ];

    #[test]
    fn each_sample_is_detected_and_reads_the_same_when_named() {
        for (name, format) in SAMPLES {
            let (detected, problems) = read_fixture(name, Options::default());
            assert_eq!(problems.formats, [(fixtures().join(name), format)], "{name}");
            let (named, _) = read_fixture(name, Options { format, ..Options::default() });
            assert_eq!(detected, named, "{name}");
            assert!(detected.len() > 20, "{name}");
        }
    }

    #[test]
    fn a_sample_read_in_the_wrong_format_is_all_malformed() {
        let (records, problems) =
            read_fixture("caddy.json.log", Options { format: Format::Envoy, ..Options::default() });
        assert!(records.is_empty());
        assert_eq!(problems.malformed, 30);
        assert_eq!(problems.examples.len(), EXAMPLES);
        assert_eq!(problems.examples[0], (Source { file: 0, line: 1 }, "no start_time".to_owned()));
    }

    #[test]
    fn gzip_reads_as_the_plain_file_whole_members_and_all() {
        let dir = scratch();
        for (name, _) in SAMPLES {
            let plain = std::fs::read(fixtures().join(name)).unwrap();
            let (want, want_problems) = read_fixture(name, Options::default());
            // Named .log on purpose: the magic bytes decide, not the name.
            let zipped = dir.join(name);
            std::fs::write(&zipped, gzip(&plain)).unwrap();
            let (got, problems) = read(std::slice::from_ref(&zipped), Options::default());
            assert_eq!(got, want, "{name}");
            assert_eq!(problems.examples, want_problems.examples, "{name}");
            // Rotation with `copytruncate` and `cat` joins gzip members into one file.
            let middle = plain[..plain.len() / 2].iter().rposition(|&b| b == b'\n').unwrap() + 1;
            let mut members = gzip(&plain[..middle]);
            members.extend(gzip(&plain[middle..]));
            let joined = dir.join(format!("{name}.gz"));
            std::fs::write(&joined, members).unwrap();
            let (got, _) = read(&[joined], Options::default());
            assert_eq!(got, want, "{name} in two members");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unreadable_logs_are_errors_naming_the_file() {
        let dir = scratch();
        let missing = dir.join("missing.log");
        let error = Logs::open(std::slice::from_ref(&missing), Options::default()).err().unwrap();
        assert!(error.to_string().starts_with(&format!("{}: ", missing.display())), "{error}");
        let corrupt = dir.join("corrupt.log.gz");
        let mut bytes = gzip(include_bytes!("../../../fixtures/logs/combined.log"));
        let middle = bytes.len() / 2;
        bytes[middle..].iter_mut().for_each(|byte| *byte = !*byte);
        std::fs::write(&corrupt, bytes).unwrap();
        let results: Vec<_> = Logs::open(std::slice::from_ref(&corrupt), Options::default()).unwrap().collect();
        let error = results.iter().find_map(|result| result.as_ref().err()).expect("an error");
        assert!(error.to_string().starts_with(&format!("{}: ", corrupt.display())), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn two_logs_merge_into_one_timeline() {
        let dir = scratch();
        let line = |at: &str, target: &str| {
            format!(r#"{{"time":"2026-11-30T21:30:{at}Z","method":"GET","target":"{target}"}}"#) + "\n"
        };
        let a = dir.join("a.log");
        let b = dir.join("b.log");
        std::fs::write(&a, [line("00.1", "/a1"), line("00.3", "/a2"), "\n".into(), line("00.5", "/a3")].concat())
            .unwrap();
        std::fs::write(&b, [line("00.2", "/b1"), line("00.3", "/b2"), line("00.4", "/b3")].concat()).unwrap();
        let (records, _) = read(&[a, b], Options::default());
        let order: Vec<(&str, usize, u64)> =
            records.iter().map(|record| (record.target.as_str(), record.source.file, record.source.line)).collect();
        assert_eq!(order, [("/a1", 0, 1), ("/b1", 1, 1), ("/a2", 0, 2), ("/b2", 1, 2), ("/b3", 1, 3), ("/a3", 0, 4)]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn mapping_parse_reads_facts_and_says_what_is_wrong() {
        let cases: &[(&str, Parsed)] = &[
            ("user=remote_user", Ok(("user", "remote_user"))),
            ("roles=jwt.groups", Ok(("roles", "jwt.groups"))),
            ("header:X-Tenant=http_x_tenant", Ok(("header:x-tenant", "http_x_tenant"))),
            ("cookie:Session=sid", Ok(("cookie:Session", "sid"))),
            ("address = x_forwarded_for", Ok(("address", "x_forwarded_for"))),
            (
                "tenant=org_id",
                Err(
                    "unknown fact `tenant`: expected one of user, org, roles, token, address, header:NAME, cookie:NAME",
                ),
            ),
            (
                "header:=x",
                Err(
                    "unknown fact `header:`: expected one of user, org, roles, token, address, header:NAME, cookie:NAME",
                ),
            ),
            ("user", Err("`user` is not fact=field (for example `user=remote_user`)")),
            ("user=", Err("`user=` names no field after `=`")),
        ];
        for &(text, want) in cases {
            let got = Mapping::parse(text);
            let got = got.as_ref().map(|(fact, field)| (fact.as_str(), field.as_str())).map_err(String::as_str);
            assert_eq!(got, want, "{text}");
        }
        let options = Options { mapping: Mapping { fields: vec![("group".into(), "g".into())] }, ..Options::default() };
        let error = Logs::open(&[], options).err().unwrap();
        assert!(error.to_string().starts_with("--field: unknown fact `group`"), "{error}");
    }

    #[test]
    fn mapped_facts_are_not_reported_lacking() {
        let mapping = Mapping { fields: vec![("user".into(), "uid".into()), ("org".into(), "remote_user".into())] };
        let (records, problems) = read_fixture("combined.log", Options { mapping, ..Options::default() });
        assert_eq!(problems.lacks, ["cookies", "headers", "roles", "sub-second time", "token"]);
        let alice = records.iter().find(|record| record.source.line == 2).unwrap();
        assert_eq!((alice.user.as_deref(), alice.org.as_deref()), (Some("u1"), Some("alice")));
    }

    #[test]
    fn odd_bytes_are_lines_not_failures() {
        let dir = scratch();
        let path = dir.join("odd.log");
        let good = r#"10.0.0.1 - - [30/Nov/2026:21:30:00 +0000] "GET /caf\xC3\xA9 HTTP/1.1" 200 5 "-" "-""#;
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend(good.as_bytes());
        bytes.extend(b"\r\n\n   \n");
        bytes.extend(vec![b'x'; LONGEST_LINE as usize + 10]);
        bytes.extend(b"\n10.0.0.2 - - [30/Nov/2026:21:30:01 +0000] \"GET /\xff HTTP/1.1\" 200 5\n");
        bytes.extend(vec![b'y'; LONGEST_LINE as usize]);
        std::fs::write(&path, bytes).unwrap();
        let (records, problems) = read(&[path], Options::default());
        let got: Vec<(u64, &str)> = records.iter().map(|record| (record.source.line, record.target.as_str())).collect();
        assert_eq!(got, [(1, "/café"), (5, "/\u{fffd}")]);
        let longer = format!("longer than {LONGEST_LINE} bytes");
        assert_eq!(
            problems.examples,
            [(Source { file: 0, line: 4 }, longer.clone()), (Source { file: 0, line: 6 }, longer)]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn logs_can_be_read_on_another_thread() {
        fn send<T: Send>() {}
        send::<Logs>();
    }

    #[test]
    fn addresses_in_each_spelling() {
        let cases: &[(&str, Option<&str>)] = &[
            ("10.0.0.1", Some("10.0.0.1")),
            ("10.0.0.1:5000", Some("10.0.0.1")),
            ("[::1]:5000", Some("::1")),
            ("[::1]", Some("::1")),
            ("2001:db8::7", Some("2001:db8::7")),
            ("198.51.100.4, 203.0.113.8", Some("203.0.113.8")),
            ("unix:/run/nginx.sock", None),
            ("", None),
        ];
        for &(text, want) in cases {
            assert_eq!(address(text), want.map(|ip| ip.parse().unwrap()), "{text}");
        }
    }
}
