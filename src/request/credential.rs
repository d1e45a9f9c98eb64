//! The credential a request presents for `per: token`, read so that one key counts alike
//! however it is sent.

use std::borrow::Cow;

use super::facts::Facts;
use super::key::{Key, cow_bytes};
use super::reading::{Unclear, trim};
use crate::policy::Credential;

/// The credential a request presents, where the operation's security schemes say it lives: the
/// first place that has one.
pub fn token<'a, F: Facts + ?Sized>(facts: &'a F, credentials: &[Credential]) -> Key<'a> {
    for credential in credentials {
        let found: Result<Option<Cow<'a, [u8]>>, Unclear> = match credential {
            Credential::Authorization => facts.header("authorization").map(|v| v.map(authorization_credential)),
            Credential::Header(name) => facts.header(name).map(|v| v.map(Cow::Borrowed)),
            Credential::Cookie(name) => Ok(facts.cookie(name)),
            Credential::Query(name) => facts.query(name).map(|v| v.map(cow_bytes)),
        };
        match found {
            Ok(Some(v)) if !v.is_empty() => return Key::Present(v),
            Ok(_) => {}
            Err(u) => return Key::Unclear(u),
        }
    }
    Key::Missing
}

/// The credential in an `Authorization` value, so that one key counts alike however it is
/// sent. `Bearer abc` and `bearer abc` are `abc`. `Basic` is decoded (RFC 7617): an API key
/// sent as the user name with an empty password (`abc:`, as Stripe takes it), or as the password
/// with an empty user name (`:abc`), is `abc` too; otherwise the user name, which is who a
/// failed password counts against. Other schemes: what follows the scheme.
fn authorization_credential(value: &[u8]) -> Cow<'_, [u8]> {
    let value = trim(value);
    let Some(space) = value.iter().position(|b| *b == b' ') else { return Cow::Borrowed(value) };
    let (scheme, rest) = (&value[..space], trim(&value[space + 1..]));
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Cow::Borrowed(rest);
    }
    use base64::Engine as _;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let Ok(decoded) = engine.decode(rest) else { return Cow::Borrowed(rest) };
    let Some(colon) = decoded.iter().position(|b| *b == b':') else { return Cow::Owned(decoded) };
    let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
    Cow::Owned(if user.is_empty() { password.to_vec() } else { user.to_vec() })
}
