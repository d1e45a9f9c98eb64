//! Query parameters, form-decoded, and refused when upstreams would read them differently.

use std::borrow::Cow;

use super::reading::Unclear;

/// A query parameter's value, form-decoded (`+` is a space). `Err` when the parameter comes
/// more than once with different values (Werkzeug and Go take the first, Rails and PHP the
/// last, Express all of them), or when one of its values has a malformed escape (Werkzeug keeps
/// `%ZZ`, Go drops the pair): counting any one reading would let a client choose its key.
pub fn query_param<'a>(query: &'a str, name: &str) -> Result<Option<Cow<'a, str>>, Unclear> {
    let mut found: Option<Cow<'a, str>> = None;
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if form_decode(k).as_deref() != Some(name) {
            continue;
        }
        let value = form_decode(v).ok_or(Unclear::Malformed)?;
        match &found {
            Some(previous) if *previous != value => return Err(Unclear::Repeated),
            Some(_) => {}
            None => found = Some(value),
        }
    }
    Ok(found)
}

/// Every value of a query parameter, decoded, in order (undecodable ones left out).
pub fn query_params(query: &str, name: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (form_decode(k).as_deref() == Some(name)).then(|| form_decode(v).map(Cow::into_owned)).flatten()
        })
        .collect()
}

fn form_decode(s: &str) -> Option<Cow<'_, str>> {
    if !s.contains(['%', '+']) {
        return Some(Cow::Borrowed(s));
    }
    crate::spec::pointer::percent_decode(&s.replace('+', " ")).map(Cow::Owned)
}
