//! "Did you mean" suggestions for misspelt names.

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for &candidate in candidates {
        let d = distance(&word, candidate);
        // A third of the candidate's length, at least one edit and at most three.
        let allowed = (candidate.chars().count() / 3).clamp(1, 3);
        let plausible = d <= allowed
            || (word.len() >= 3 && candidate.starts_with(&word))
            || (candidate.len() >= 3 && word.starts_with(candidate) && word.len() <= candidate.len() + 2);
        if plausible && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance, counting a swap of two neighbours as one edit.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(prev2[j - 2] + 1);
            }
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let fields = ["per", "limit", "window", "algorithm", "burst", "cost", "applies-to", "max-keys"];
        for (typo, want) in [
            ("limt", Some("limit")),
            ("windwo", Some("window")),
            ("maxkeys", Some("max-keys")),
            ("max_keys", Some("max-keys")),
            ("applies_to", Some("applies-to")),
            ("algo", Some("algorithm")),
            ("colour", None),
            ("x", None),
        ] {
            assert_eq!(closest(typo, &fields), want, "{typo}");
        }
        assert_eq!(closest("x-ratelimit", &["x-rate-limit", "x-rate-limit-policies"]), Some("x-rate-limit"));
        assert_eq!(
            closest("x-rate-limit-policy", &["x-rate-limit", "x-rate-limit-policies"]),
            Some("x-rate-limit-policies")
        );
        assert_eq!(closest("x-logo", &["x-rate-limit", "x-rate-limit-policies"]), None);
    }
}
