//! Reading the sample logs of every format, mappings, gzip, malformed and late lines, and the
//! bounds on memory.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::field::address;
use super::file::LONGEST_LINE;
use super::problems::EXAMPLES;
use super::*;
use crate::replay::Source;

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
    let (records, problems) = read_fixture("caddy.json.log", Options { format: Format::Envoy, ..Options::default() });
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
    std::fs::write(&a, [line("00.1", "/a1"), line("00.3", "/a2"), "\n".into(), line("00.5", "/a3")].concat()).unwrap();
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
            Err("unknown fact `tenant`: expected one of user, org, roles, token, address, header:NAME, cookie:NAME"),
        ),
        (
            "header:=x",
            Err("unknown fact `header:`: expected one of user, org, roles, token, address, header:NAME, cookie:NAME"),
        ),
        ("user", Err("`user` is not fact=field (for example `user=remote_user`)")),
        ("user=", Err("`user=` names no field after `=`")),
    ];
    for &(text, want) in cases {
        let got = Mapping::parse(text);
        let got = got.as_ref().map(|(fact, field)| (fact.as_str(), field.as_str())).map_err(ToString::to_string);
        assert_eq!(got, want.map_err(str::to_string), "{text}");
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
