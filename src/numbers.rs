//! Numbers written for people. A leaf: only `std`.

/// `2000000` as `2,000,000`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 warning`, `2 warnings`, `0 warnings`: a count with its noun, made plural when it is not one.
/// Only for nouns whose plural adds an `s`.
pub(crate) fn counted(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    if n == "1" { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    /// Issue 47, item 10: `check` said "1 warnings".
    #[test]
    fn one_is_singular() {
        assert_eq!(super::counted(1, "warning"), "1 warning");
        assert_eq!(super::counted(0, "warning"), "0 warnings");
        assert_eq!(super::counted(2, "error"), "2 errors");
        assert_eq!(super::counted(1_u64, "request"), "1 request");
    }

    #[test]
    fn thousands_are_separated_by_commas() {
        for (n, text) in [(0, "0"), (999, "999"), (1000, "1,000"), (123_456, "123,456"), (2_000_000, "2,000,000")] {
            assert_eq!(super::thousands(n), text);
        }
    }
}
