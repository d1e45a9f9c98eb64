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

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_separated_by_commas() {
        for (n, text) in [(0, "0"), (999, "999"), (1000, "1,000"), (123_456, "123,456"), (2_000_000, "2,000,000")] {
            assert_eq!(super::thousands(n), text);
        }
    }
}
