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
}

impl fmt::Display for Settle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Settle::Header(name) => write!(f, "header:{name}"),
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
}
