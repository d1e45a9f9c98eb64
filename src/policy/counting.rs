//! What a bound counts once the response is known: only some statuses (`count-when`), or what
//! the upstream reports it used (`settle`).

use std::fmt;

/// The statuses a `count-when` bound counts: exact codes and whole classes (`4xx`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StatusSet {
    /// Classes by their first digit: bit 4 is `4xx`.
    classes: u8,
    /// Exact statuses, sorted, without duplicates.
    codes: Vec<u16>,
}

impl StatusSet {
    /// Adds an exact status (100 to 599).
    pub fn add_code(&mut self, code: u16) {
        if let Err(at) = self.codes.binary_search(&code) {
            self.codes.insert(at, code);
        }
    }

    /// Adds a class by its first digit (1 to 5).
    pub fn add_class(&mut self, digit: u8) {
        self.classes |= 1 << digit;
    }

    /// Whether a response with this status is counted.
    pub fn matches(&self, status: u16) -> bool {
        let digit = status / 100;
        (digit < 8 && self.classes & (1 << digit) != 0) || self.codes.binary_search(&status).is_ok()
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let classes = (1..=5u8).filter(|d| self.classes & (1 << d) != 0).map(|d| format!("{d}xx"));
        let all: Vec<String> = self.codes.iter().map(u16::to_string).chain(classes).collect();
        f.write_str(&all.join(", "))
    }
}

/// Where the upstream reports what a request actually cost.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Settle {
    /// A response header holding a non-negative integer; the name is stored lower case.
    Header(String),
    /// A weighted sum of integers in the response body (`json:/usage/input_tokens + 4 *
    /// json:/usage/output_tokens`): read from the JSON body, or from every event's JSON `data`
    /// in a `text/event-stream`, where the last value found at a pointer wins.
    Body(Vec<Term>),
}

/// One term of a body-settled sum: `factor * json:POINTER`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    /// What each unit found at the pointer counts (1 when the term has no factor).
    pub factor: u64,
    /// An RFC 6901 JSON pointer into the body (or an event's data), `/usage/total_tokens`.
    pub pointer: String,
}

impl Settle {
    /// The body's pointers this settle reads, in term order (none for a header).
    pub fn pointers(&self) -> impl Iterator<Item = &str> {
        let terms: &[Term] = match self {
            Settle::Header(_) => &[],
            Settle::Body(terms) => terms,
        };
        terms.iter().map(|t| t.pointer.as_str())
    }
}

impl fmt::Display for Settle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Settle::Header(name) => write!(f, "header:{name}"),
            Settle::Body(terms) => {
                for (i, t) in terms.iter().enumerate() {
                    let plus = if i == 0 { "" } else { " + " };
                    match t.factor {
                        1 => write!(f, "{plus}json:{}", t.pointer)?,
                        n => write!(f, "{plus}{n} * json:{}", t.pointer)?,
                    }
                }
                Ok(())
            }
        }
    }
}

/// How a bound counts a request once its response is known. The default counts every admitted
/// request at admission, by `cost`, as bounds always have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counting {
    /// Only responses with one of these statuses are counted; until the response comes, the
    /// request's cost is held as pending against the limit.
    pub count_when: Option<StatusSet>,
    /// The charge is corrected to what the upstream reports.
    pub settle: Option<Settle>,
    /// `max-cost`: what a counted success response is charged when its usage was expected and
    /// never came (nothing where `settle` reads, a body that is not JSON or is compressed, a
    /// stream cut before its usage). `None`: the estimate stands.
    pub max_cost: Option<std::num::NonZeroU32>,
}

impl Counting {
    /// Whether the bound waits for the response at all.
    pub fn after_response(&self) -> bool {
        self.count_when.is_some() || self.settle.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_by_code_and_by_class() {
        let mut s = StatusSet::default();
        s.add_code(401);
        s.add_code(403);
        s.add_class(5);
        assert!(s.matches(401) && s.matches(403) && s.matches(500) && s.matches(599));
        assert!(!s.matches(200) && !s.matches(404) && !s.matches(429));
        assert_eq!(s.to_string(), "401, 403, 5xx");
    }

    #[test]
    fn a_body_settle_is_written_as_it_is_read() {
        let terms = vec![
            Term { factor: 1, pointer: "/message/usage/input_tokens".into() },
            Term { factor: 4, pointer: "/usage/output_tokens".into() },
        ];
        let settle = Settle::Body(terms);
        assert_eq!(settle.to_string(), "json:/message/usage/input_tokens + 4 * json:/usage/output_tokens");
        assert_eq!(settle.pointers().collect::<Vec<_>>(), ["/message/usage/input_tokens", "/usage/output_tokens"]);
    }
}
