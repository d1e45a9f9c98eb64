//! [`Facts`], the parts of a request a bound can be keyed on, as the server, `explain` and the
//! tests ([`Given`]) each supply them.

use std::borrow::Cow;
use std::net::IpAddr;

use http::HeaderName;

use super::cookie::cookie_value;
use super::query::query_param;
use super::reading::Unclear;

/// The parts of a request a bound can be keyed on. The server implements it over hyper's
/// request; `explain` over its flags.
pub trait Facts {
    /// The client address the server resolved (peer, or trusted forwarded address).
    fn address(&self) -> IpAddr;
    /// Every value of a header, in order; `name` is lower case.
    fn headers(&self, name: &str) -> impl Iterator<Item = &[u8]>;
    /// The same for a name already made: a server holding a header map looks it up without
    /// parsing the name again.
    fn named(&self, name: &HeaderName) -> impl Iterator<Item = &[u8]> {
        self.headers(name.as_str())
    }
    /// The raw query string, without `?`.
    fn query_string(&self) -> Option<&str>;

    /// The request body, when the server read it for a bound's key or cost; `None` otherwise
    /// (see [`WithBody`](super::WithBody)).
    fn body(&self) -> Option<&[u8]> {
        None
    }

    /// A header's value. `Err` when it comes more than once with different values: frameworks
    /// disagree on which one the application sees (the first, the last, or all joined), so
    /// counting any one of them would let a client pick the key.
    fn header(&self, name: &str) -> Result<Option<&[u8]>, Unclear> {
        one_value(self.headers(name))
    }

    /// [`Facts::header`] for a name already made.
    fn header_named(&self, name: &HeaderName) -> Result<Option<&[u8]>, Unclear> {
        one_value(self.named(name))
    }

    /// A query parameter's value, form-decoded (see [`query_param`]).
    fn query(&self, name: &str) -> Result<Option<Cow<'_, str>>, Unclear> {
        match self.query_string() {
            Some(q) => query_param(q, name),
            None => Ok(None),
        }
    }

    /// A cookie's value, from every `Cookie` header (see [`cookie_value`]).
    fn cookie(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        self.headers("cookie").find_map(|h| cookie_value(h, name))
    }
}

/// Facts given directly, for `explain` and tests.
#[derive(Clone, Debug)]
pub struct Given {
    /// The client address, as the server would have resolved it.
    pub address: IpAddr,
    /// Lower-case names.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The raw query string, without `?`; `None` when the request has none.
    pub query: Option<String>,
}

impl Facts for Given {
    fn address(&self) -> IpAddr {
        self.address
    }

    fn headers(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.headers.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_slice())
    }

    fn query_string(&self) -> Option<&str> {
        self.query.as_deref()
    }
}

/// The one value of a header given once, or the same way each time it is given.
fn one_value<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Result<Option<&'a [u8]>, Unclear> {
    let Some(first) = values.next() else { return Ok(None) };
    match values.all(|v| v == first) {
        true => Ok(Some(first)),
        false => Err(Unclear::Repeated),
    }
}
