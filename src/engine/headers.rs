//! RateLimit headers in the style asked for: the widely deployed `RateLimit-Limit/-Remaining/
//! -Reset` names, the IETF draft's `RateLimit-Policy` and `RateLimit`, both, or none.

use std::cell::RefCell;

use bytes::BytesMut;
use http::{HeaderName, HeaderValue};
use smallvec::SmallVec;

use super::clock::Nanos;
use super::decision::{Decision, Outcome, Report, whole_seconds};
use crate::policy::Policy;

/// Which RateLimit headers to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    #[default]
    Legacy,
    /// draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "name";q=100;w=60` and
    /// `RateLimit: "name";r=50;t=30`.
    Draft,
    /// The legacy three and the draft's two together, for clients of either kind.
    Both,
    /// No RateLimit headers (a refusal still carries `Retry-After`).
    None,
    /// The legacy three, and what model providers send, which their clients read: OpenAI's
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` and Anthropic's
    /// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (tokens: the bounds with
    /// `cost-from` or `settle`), and on a refusal `retry-after-ms`, with `x-should-retry: false`
    /// when the wait is longer than the official SDKs sleep.
    Models,
}

impl std::str::FromStr for HeaderStyle {
    type Err = crate::choice::NotOneOf;

    fn from_str(s: &str) -> Result<HeaderStyle, crate::choice::NotOneOf> {
        match s {
            "legacy" => Ok(HeaderStyle::Legacy),
            "draft" => Ok(HeaderStyle::Draft),
            "both" => Ok(HeaderStyle::Both),
            "none" => Ok(HeaderStyle::None),
            "models" => Ok(HeaderStyle::Models),
            other => Err(crate::choice::NotOneOf::new(other, "legacy, draft, both, models or none")),
        }
    }
}

/// `RateLimit-Limit`.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining`.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// The draft's `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The draft's `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Header names and values for a decision, in the order they should be sent. Numbers go
/// straight into their values, without a string between.
pub fn render(style: HeaderStyle, policy: &Policy, decision: &Decision) -> SmallVec<[(HeaderName, HeaderValue); 6]> {
    let mut out = SmallVec::new();
    if let Some(pending) = Pending::of(style, policy, decision) {
        pending.each(|name, value| out.push((name.clone(), value.header_value())));
    }
    out
}

/// A decision's RateLimit fields, kept as what they say until a response head is written:
/// opbound's own HTTP/1.1 writer formats the numbers straight into the head, where a header map
/// would take a hashed insert and a value per field ([`Pending::apply`] does that for the
/// others).
#[derive(Clone, Debug)]
pub struct Pending {
    legacy: Option<[u64; 3]>,
    /// `RateLimit-Policy` and `RateLimit`, for the draft's style.
    draft: Option<Box<(HeaderValue, HeaderValue)>>,
    retry_after: Option<u64>,
    /// The providers' fields, for the models style.
    models: Option<Vec<(HeaderName, HeaderValue)>>,
}

/// One field's value, as [`Pending::each`] gives it.
pub enum Field<'a> {
    /// A number, written in decimal.
    Number(u64),
    /// A value as it is.
    Text(&'a HeaderValue),
}

impl Field<'_> {
    fn header_value(&self) -> HeaderValue {
        match self {
            Field::Number(n) => number(*n),
            Field::Text(value) => (*value).clone(),
        }
    }
}

impl Pending {
    /// The fields of `decision` in `style`; `None` when it reports no bound (nothing to say).
    pub fn of(style: HeaderStyle, policy: &Policy, decision: &Decision) -> Option<Pending> {
        let report = decision.report?;
        let legacy = matches!(style, HeaderStyle::Legacy | HeaderStyle::Both | HeaderStyle::Models)
            .then(|| [report.limit.into(), report.remaining.into(), report.reset_seconds()]);
        let draft = matches!(style, HeaderStyle::Draft | HeaderStyle::Both).then(|| {
            let (policy_value, value) = draft(policy, &report);
            // Printable ASCII only (`sf_string` replaces the rest): always a valid value, and the
            // fallback never taken.
            let valid = |v: String| HeaderValue::try_from(v).unwrap_or_else(|_| HeaderValue::from_static("\"?\""));
            Box::new((valid(policy_value), valid(value)))
        });
        let retry_after = matches!(decision.outcome, Outcome::Limited { .. } | Outcome::Unavailable { .. })
            .then(|| report.retry_after());
        let models = (style == HeaderStyle::Models).then(|| providers(policy, decision, &report));
        Some(Pending { legacy, draft, retry_after, models })
    }

    /// Calls `f` with each field's name and value, in the order they are sent.
    pub fn each(&self, mut f: impl FnMut(&HeaderName, Field<'_>)) {
        if let Some([limit, remaining, reset]) = self.legacy {
            f(&RATELIMIT_LIMIT, Field::Number(limit));
            f(&RATELIMIT_REMAINING, Field::Number(remaining));
            f(&RATELIMIT_RESET, Field::Number(reset));
        }
        self.each_after_legacy(f);
    }

    /// `each` without the legacy fields, which come first.
    fn each_after_legacy(&self, mut f: impl FnMut(&HeaderName, Field<'_>)) {
        if let Some(draft) = &self.draft {
            f(&RATELIMIT_POLICY, Field::Text(&draft.0));
            f(&RATELIMIT, Field::Text(&draft.1));
        }
        if let Some(retry) = self.retry_after {
            f(&http::header::RETRY_AFTER, Field::Number(retry));
        }
        for (name, value) in self.models.iter().flat_map(|m| m.iter()) {
            f(name, Field::Text(value));
        }
    }

    /// Whether `name` is one of the fields set here (which replace any the response had).
    pub fn sets(&self, name: &HeaderName) -> bool {
        let mut sets = false;
        self.each(|n, _| sets |= n == name);
        sets
    }

    /// Sets the fields on `headers`, replacing any of the same names.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        self.each(|name, value| {
            headers.insert(name.clone(), value.header_value());
        });
    }

    /// Writes the fields as header lines (`name: value\r\n`) into `dst`.
    pub fn write(&self, dst: &mut Vec<u8>) {
        // The three legacy lines, the usual case, each a prefix from the binary, the digits and
        // the line end into room made once, rather than piece by piece through `each`, with a
        // capacity check and a copy call for every name, separator, number and line end.
        if let Some(numbers) = self.legacy {
            let mut digits = itoa::Buffer::new();
            dst.reserve(LEGACY_PREFIXES.iter().map(|p| p.len() + 20 + 2).sum());
            for (prefix, n) in LEGACY_PREFIXES.iter().zip(numbers) {
                dst.extend_from_slice(prefix);
                dst.extend_from_slice(digits.format(n).as_bytes());
                dst.extend_from_slice(b"\r\n");
            }
        }
        self.each_after_legacy(|name, value| {
            dst.extend_from_slice(name.as_str().as_bytes());
            dst.extend_from_slice(b": ");
            match value {
                Field::Number(n) => dst.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
                Field::Text(text) => dst.extend_from_slice(text.as_bytes()),
            }
            dst.extend_from_slice(b"\r\n");
        });
    }
}

/// The longest wait the official SDKs honour before retrying (the Anthropic SDK's, and
/// openai-python's for `Retry-After`); past it they back off on their own and retry early, so
/// opbound tells them not to retry at all.
const SDK_PATIENCE: Nanos = 60 * 1_000_000_000;

/// OpenAI's and Anthropic's fields for a decision: the requests family from the bound on
/// requests with the least left, the tokens family from the bound on what requests use.
fn providers(policy: &Policy, decision: &Decision, report: &Report) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(14);
    let metered = |r: &Report| policy.bounds[r.bound].def.is_metered();
    let other = decision.other.as_deref();
    let (requests, tokens) = if metered(report) { (other, Some(report)) } else { (Some(report), other) };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    for (family, r) in [("requests", requests), ("tokens", tokens)] {
        let Some(r) = r else { continue };
        let name = |n: String| HeaderName::try_from(n).expect("the names are lower-case tokens");
        let text = |v: String| HeaderValue::try_from(v).expect("digits, letters, colons and dashes");
        out.push((name(format!("x-ratelimit-limit-{family}")), number(r.limit.into())));
        out.push((name(format!("x-ratelimit-remaining-{family}")), number(r.remaining.into())));
        out.push((name(format!("x-ratelimit-reset-{family}")), text(go_duration(r.reset))));
        out.push((name(format!("anthropic-ratelimit-{family}-limit")), number(r.limit.into())));
        out.push((name(format!("anthropic-ratelimit-{family}-remaining")), number(r.remaining.into())));
        let at = now.saturating_add(whole_seconds(r.reset) * 1_000_000_000);
        out.push((name(format!("anthropic-ratelimit-{family}-reset")), text(rfc3339_utc(at))));
    }
    if matches!(decision.outcome, Outcome::Limited { .. } | Outcome::Unavailable { .. }) {
        out.push((HeaderName::from_static("retry-after-ms"), number(report.retry.div_ceil(1_000_000).max(1))));
        if report.retry > SDK_PATIENCE {
            out.push((HeaderName::from_static("x-should-retry"), HeaderValue::from_static("false")));
        }
    }
    out
}

/// A span as OpenAI writes its resets (Go's duration format): `12ms` under a second, else
/// whole seconds rounded up, as `1s`, `6m0s`, `1h2m3s`.
fn go_duration(span: Nanos) -> String {
    if span < 1_000_000_000 {
        return format!("{}ms", span.div_ceil(1_000_000));
    }
    let s = whole_seconds(span);
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// An instant (Unix nanoseconds) as RFC 3339 in UTC, whole seconds: `2026-12-07T09:30:00Z`.
fn rfc3339_utc(instant: Nanos) -> String {
    let seconds = i64::try_from(instant / 1_000_000_000).unwrap_or(i64::MAX);
    jiff::Timestamp::from_second(seconds).map_or_else(|_| "1970-01-01T00:00:00Z".to_string(), |t| t.to_string())
}

/// `RateLimit-Limit`, `-Remaining` and `-Reset` as they start a header line, in that order.
const LEGACY_PREFIXES: [&[u8]; 3] = [b"ratelimit-limit: ", b"ratelimit-remaining: ", b"ratelimit-reset: "];

/// The numbers [`number`] takes from the binary: four bytes each, the digits first.
const SMALL: usize = 10_000;

/// The decimal digits of every number below [`SMALL`], four bytes a number.
static SMALL_DIGITS: [u8; 4 * SMALL] = small_digits();

const fn small_digits() -> [u8; 4 * SMALL] {
    let mut out = [0u8; 4 * SMALL];
    let mut n = 0;
    while n < SMALL {
        let len = digit_count(n as u64);
        let mut rest = n;
        let mut i = len;
        while i > 0 {
            i -= 1;
            out[4 * n + i] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        n += 1;
    }
    out
}

const fn digit_count(n: u64) -> usize {
    let mut count = 1;
    let mut rest = n / 10;
    while rest > 0 {
        count += 1;
        rest /= 10;
    }
    count
}

/// How many bytes of digits one block shared by the values of larger numbers holds.
const DIGITS_BLOCK: usize = 512;

thread_local!(static DIGITS: RefCell<BytesMut> = RefCell::new(BytesMut::new()));

/// A number as a header value. A reset, a retry, and the limits and what is left of most bounds
/// are small: those borrow static bytes, with no allocation on a request's path (`HeaderValue`'s
/// own `From<u64>` makes two). A larger one is a slice of a block of digits its thread shares
/// between values (one allocation per few dozen numbers; a block is freed once the last value
/// cut from it is).
pub fn number(n: u64) -> HeaderValue {
    if n < SMALL as u64 {
        let at = 4 * n as usize;
        if let Ok(digits) = std::str::from_utf8(&SMALL_DIGITS[at..at + digit_count(n)]) {
            return HeaderValue::from_static(digits);
        }
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let digits = &digits[at..];
    DIGITS.with(|block| {
        let mut block = block.borrow_mut();
        if block.capacity() - block.len() < digits.len() {
            *block = BytesMut::with_capacity(DIGITS_BLOCK);
        }
        block.extend_from_slice(digits);
        HeaderValue::from_maybe_shared(block.split().freeze()).expect("digits are a header value")
    })
}

/// The draft's two values: `"name";q=100;w=60` and `"name";r=50;t=30`.
fn draft(policy: &Policy, report: &Report) -> (String, String) {
    let bound = &policy.bounds[report.bound];
    let name = sf_string(&bound.id);
    let mut policy_value = format!("{name};q={}", report.limit);
    if let Some(window) = bound.def.algorithm.window() {
        policy_value.push_str(&format!(";w={}", window.secs_ceil()));
    } else if let Some(periods) = bound.def.algorithm.periods() {
        // The period's usual length (a month is a twelfth of a year): `w` describes the policy;
        // `t` says when this caller's period actually ends.
        policy_value.push_str(&format!(";w={}", periods.period().nominal_seconds()));
    }
    (policy_value, format!("{name};r={};t={}", report.remaining, report.reset_seconds()))
}

/// A structured-field string (RFC 8941): printable ASCII, `"` and `\` escaped.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn resets_are_written_as_openai_and_anthropic_write_them() {
        let second = 1_000_000_000;
        assert_eq!(super::go_duration(12_000_000), "12ms");
        assert_eq!(super::go_duration(1), "1ms");
        assert_eq!(super::go_duration(second), "1s");
        assert_eq!(super::go_duration(360 * second), "6m0s");
        assert_eq!(super::go_duration(3723 * second - 1), "1h2m3s");
        assert_eq!(super::rfc3339_utc(1_796_635_800 * second + 5), "2026-12-07T09:30:00Z");
    }

    use super::*;

    #[test]
    fn numbers_are_their_decimal_digits() {
        for n in [0, 1, 9, 10, 42, 99, 100, 999, 1000, 9999, 10_000, 10_001, 123_456_789, u32::MAX.into(), u64::MAX] {
            assert_eq!(number(n), n.to_string().as_str(), "{n}");
        }
        for n in 0..SMALL as u64 {
            assert_eq!(number(n).as_bytes(), n.to_string().as_bytes());
        }
        // Many large ones alive at once, across several shared blocks: each keeps its digits.
        let large: Vec<(u64, HeaderValue)> =
            (1..200u64).map(|i| (i * 1_000_000_007, number(i * 1_000_000_007))).collect();
        for (n, value) in &large {
            assert_eq!(value, n.to_string().as_str());
        }
    }

    /// `write` takes a shortcut for the legacy fields: it must write what `each` gives, line
    /// for line, whichever fields are set.
    #[test]
    fn written_fields_are_the_fields_each_gives() {
        let draft =
            || Box::new((HeaderValue::from_static("\"p\";q=10;w=60"), HeaderValue::from_static("\"p\";r=3;t=7")));
        for legacy in [None, Some([10, 0, 60]), Some([u64::from(u32::MAX), 4_294_967_294, u64::MAX])] {
            for with_draft in [false, true] {
                for retry_after in [None, Some(1), Some(86_400)] {
                    let pending = Pending { legacy, draft: with_draft.then(draft), retry_after, models: None };
                    let mut expected = Vec::new();
                    pending.each(|name, value| {
                        let value = match value {
                            Field::Number(n) => n.to_string().into_bytes(),
                            Field::Text(text) => text.as_bytes().to_vec(),
                        };
                        expected.extend_from_slice(format!("{}: ", name.as_str()).as_bytes());
                        expected.extend_from_slice(&value);
                        expected.extend_from_slice(b"\r\n");
                    });
                    let mut written = b"HTTP/1.1 200 OK\r\n".to_vec();
                    pending.write(&mut written);
                    assert_eq!(
                        String::from_utf8_lossy(&written[17..]),
                        String::from_utf8_lossy(&expected),
                        "{legacy:?} {with_draft} {retry_after:?}"
                    );
                }
            }
        }
        assert_eq!(
            LEGACY_PREFIXES.map(|p| p.to_vec()),
            [RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET].map(|n| format!("{}: ", n.as_str()).into_bytes())
        );
    }

    #[test]
    fn sf_strings_escape() {
        assert_eq!(sf_string("route:perimeter"), "\"route:perimeter\"");
        assert_eq!(sf_string("a\"b\\c é"), "\"a\\\"b\\\\c ?\"");
    }
}
