//! Calendar windows at month ends, leap years, ISO weeks, and across clock changes in many zones.
use super::*;
use crate::period::testing::{at, shown, zone};

/// Period, zone, an instant, and the window that holds it.
type Row = (&'static str, &'static str, &'static str, [&'static str; 2]);

fn run(table: &[Row]) {
    for &(period, zone_name, now, expected) in table {
        let zone = zone(zone_name);
        let calendar = Calendar::new(Period::parse(period).unwrap(), zone.clone()).unwrap();
        let window = calendar.window(at(now));
        assert_eq!(shown(&zone, window), expected, "{period} in {zone_name} at {now}");
    }
}

#[test]
fn months_and_years_end_on_the_calendar() {
    run(&[
        ("P1M", "UTC", "2026-01-31T23:59:59Z", ["2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"]),
        ("P1M", "UTC", "2026-02-01T00:00:00Z", ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"]),
        // February of a leap year and of a common year.
        ("P1M", "UTC", "2028-02-29T12:00:00Z", ["2028-02-01T00:00:00+00:00", "2028-03-01T00:00:00+00:00"]),
        ("P1M", "UTC", "2027-02-28T23:59:59.999999999Z", ["2027-02-01T00:00:00+00:00", "2027-03-01T00:00:00+00:00"]),
        ("P1D", "UTC", "2028-02-29T12:00:00Z", ["2028-02-29T00:00:00+00:00", "2028-03-01T00:00:00+00:00"]),
        ("P1D", "UTC", "2027-02-28T12:00:00Z", ["2027-02-28T00:00:00+00:00", "2027-03-01T00:00:00+00:00"]),
        ("P1D", "UTC", "2026-12-31T23:59:59Z", ["2026-12-31T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]),
        ("P1Y", "UTC", "2026-12-31T23:59:59Z", ["2026-01-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]),
        ("P1Y", "UTC", "2027-01-01T00:00:00Z", ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]),
        // Half past midnight on New Year's Day in Berlin is still the old year in UTC.
        ("P1M", "Europe/Berlin", "2026-12-31T23:30:00Z", ["2027-01-01T00:00:00+01:00", "2027-02-01T00:00:00+01:00"]),
        ("P1Y", "Europe/Berlin", "2026-12-31T23:30:00Z", ["2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00"]),
    ]);
}

#[test]
fn weeks_are_iso_weeks_from_monday() {
    run(&[
        // 2026-12-31 is a Thursday: its week runs from Monday 28 December into 2027.
        ("P1W", "UTC", "2026-12-31T12:00:00Z", ["2026-12-28T00:00:00+00:00", "2027-01-04T00:00:00+00:00"]),
        ("P1W", "UTC", "2027-01-03T23:59:59Z", ["2026-12-28T00:00:00+00:00", "2027-01-04T00:00:00+00:00"]),
        ("P1W", "UTC", "2027-01-04T00:00:00Z", ["2027-01-04T00:00:00+00:00", "2027-01-11T00:00:00+00:00"]),
        // A week that holds the spring change is an hour short.
        (
            "P1W",
            "Europe/Berlin",
            "2026-03-29T12:00:00+02:00",
            ["2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00"],
        ),
        // The first week of 1970 began before the epoch; its start is clamped to 0.
        ("P1W", "UTC", "1970-01-01T00:00:00Z", ["1970-01-01T00:00:00+00:00", "1970-01-05T00:00:00+00:00"]),
    ]);
}

#[test]
fn local_midnight_stays_midnight_across_daylight_saving() {
    run(&[
        // 2026-03-29 in Berlin is 23 hours long: 02:00 becomes 03:00.
        (
            "P1D",
            "Europe/Berlin",
            "2026-03-29T01:59:59+01:00",
            ["2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"],
        ),
        (
            "P1D",
            "Europe/Berlin",
            "2026-03-29T12:00:00+02:00",
            ["2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"],
        ),
        // 2026-10-25 is 25 hours long: 03:00 becomes 02:00, and both passes of 02:30 are in it.
        (
            "P1D",
            "Europe/Berlin",
            "2026-10-25T02:30:00+02:00",
            ["2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"],
        ),
        (
            "P1D",
            "Europe/Berlin",
            "2026-10-25T02:30:00+01:00",
            ["2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"],
        ),
        (
            "P1D",
            "Europe/Berlin",
            "2026-10-25T23:59:59+01:00",
            ["2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"],
        ),
    ]);
    let berlin = zone("Europe/Berlin");
    let day = Calendar::new(Period::parse("P1D").unwrap(), berlin).unwrap();
    assert_eq!(day.window(at("2026-03-29T12:00:00+02:00")).nanos(), 23 * 3_600_000_000_000);
    assert_eq!(day.window(at("2026-10-25T12:00:00+01:00")).nanos(), 25 * 3_600_000_000_000);
}

/// Zones whose clocks skip or repeat midnight itself: the day starts at its first instant.
#[test]
fn a_day_starts_at_its_first_instant_when_midnight_is_skipped_or_repeated() {
    run(&[
        // Sao Paulo, 2018-11-04: midnight became 01:00.
        (
            "P1D",
            "America/Sao_Paulo",
            "2018-11-04T12:00:00-02:00",
            ["2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"],
        ),
        // Sao Paulo, 2018-02-18: midnight became 23:00 of the 17th, so the 17th lasted 25
        // hours with both passes through 23:00 in it, and the 18th began an hour later.
        (
            "P1D",
            "America/Sao_Paulo",
            "2018-02-17T23:30:00-02:00",
            ["2018-02-17T00:00:00-02:00", "2018-02-18T00:00:00-03:00"],
        ),
        (
            "P1D",
            "America/Sao_Paulo",
            "2018-02-17T23:30:00-03:00",
            ["2018-02-17T00:00:00-02:00", "2018-02-18T00:00:00-03:00"],
        ),
        // Havana, 2023-11-05: 01:00 became 00:00, so midnight came twice; the day began at the first.
        (
            "P1D",
            "America/Havana",
            "2023-11-05T00:30:00-05:00",
            ["2023-11-05T00:00:00-04:00", "2023-11-06T00:00:00-05:00"],
        ),
        // Apia skipped 2011-12-30 whole: the 29th ran into the 31st.
        (
            "P1D",
            "Pacific/Apia",
            "2011-12-29T12:00:00-10:00",
            ["2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00"],
        ),
        (
            "P1D",
            "Pacific/Apia",
            "2011-12-31T12:00:00+14:00",
            ["2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00"],
        ),
    ]);
}

#[test]
fn hours_follow_the_wall_clock_across_daylight_saving() {
    run(&[
        // Berlin, spring: the hour from 01:00 ends at 03:00, one elapsed hour.
        (
            "PT1H",
            "Europe/Berlin",
            "2026-03-29T01:59:59+01:00",
            ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00"],
        ),
        (
            "PT1H",
            "Europe/Berlin",
            "2026-03-29T03:00:00+02:00",
            ["2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"],
        ),
        // Berlin, autumn: 02:00-03:00 comes twice, as two periods.
        (
            "PT1H",
            "Europe/Berlin",
            "2026-10-25T01:59:59+02:00",
            ["2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00"],
        ),
        (
            "PT1H",
            "Europe/Berlin",
            "2026-10-25T02:30:00+02:00",
            ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00"],
        ),
        (
            "PT1H",
            "Europe/Berlin",
            "2026-10-25T02:30:00+01:00",
            ["2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"],
        ),
        // New York, spring (02:00 became 03:00) and autumn (02:00 became 01:00).
        (
            "PT1H",
            "America/New_York",
            "2026-03-08T01:30:00-05:00",
            ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"],
        ),
        (
            "PT1H",
            "America/New_York",
            "2026-03-08T03:30:00-04:00",
            ["2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"],
        ),
        (
            "PT1H",
            "America/New_York",
            "2026-11-01T00:59:59-04:00",
            ["2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00"],
        ),
        (
            "PT1H",
            "America/New_York",
            "2026-11-01T01:30:00-04:00",
            ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00"],
        ),
        (
            "PT1H",
            "America/New_York",
            "2026-11-01T01:30:00-05:00",
            ["2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"],
        ),
        // Havana repeats midnight: two periods start at 00:00.
        (
            "PT1H",
            "America/Havana",
            "2023-11-05T00:30:00-04:00",
            ["2023-11-05T00:00:00-04:00", "2023-11-05T00:00:00-05:00"],
        ),
        // Lord Howe moves by half an hour: 02:00 became 02:30, so that hour is 30 minutes...
        (
            "PT1H",
            "Australia/Lord_Howe",
            "2026-10-04T01:45:00+10:30",
            ["2026-10-04T01:00:00+10:30", "2026-10-04T02:30:00+11:00"],
        ),
        (
            "PT1H",
            "Australia/Lord_Howe",
            "2026-10-04T02:45:00+11:00",
            ["2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00"],
        ),
        // ...and when 02:00 became 01:30, the hour from 01:00 lasted an hour and a half.
        (
            "PT1H",
            "Australia/Lord_Howe",
            "2026-04-05T01:45:00+10:30",
            ["2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"],
        ),
        ("PT1H", "Asia/Kolkata", "2026-06-01T00:00:00Z", ["2026-06-01T05:00:00+05:30", "2026-06-01T06:00:00+05:30"]),
    ]);
}

#[test]
fn hour_blocks_start_at_local_midnight() {
    run(&[
        ("PT6H", "UTC", "2026-06-01T13:00:00Z", ["2026-06-01T12:00:00+00:00", "2026-06-01T18:00:00+00:00"]),
        ("PT6H", "UTC", "2026-06-01T23:59:59Z", ["2026-06-01T18:00:00+00:00", "2026-06-02T00:00:00+00:00"]),
        // 00:00-06:00 is five hours long on the spring day and seven on the autumn day.
        (
            "PT6H",
            "Europe/Berlin",
            "2026-03-29T04:00:00+02:00",
            ["2026-03-29T00:00:00+01:00", "2026-03-29T06:00:00+02:00"],
        ),
        (
            "PT6H",
            "Europe/Berlin",
            "2026-10-25T04:00:00+01:00",
            ["2026-10-25T00:00:00+02:00", "2026-10-25T06:00:00+01:00"],
        ),
        (
            "PT12H",
            "America/New_York",
            "2026-11-01T12:00:00-05:00",
            ["2026-11-01T12:00:00-05:00", "2026-11-02T00:00:00-05:00"],
        ),
        ("PT8H", "Asia/Kolkata", "2026-06-01T00:00:00Z", ["2026-06-01T00:00:00+05:30", "2026-06-01T08:00:00+05:30"]),
    ]);
}

#[test]
fn blocks_of_days_weeks_months_and_years_are_anchored() {
    run(&[
        // Days and weeks count from Monday 1969-12-29: 2026-12-28 starts a block of two weeks.
        ("P2D", "UTC", "2026-12-31T12:00:00Z", ["2026-12-30T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]),
        ("P7D", "UTC", "2026-12-31T12:00:00Z", ["2026-12-28T00:00:00+00:00", "2027-01-04T00:00:00+00:00"]),
        ("P2W", "UTC", "2026-12-31T12:00:00Z", ["2026-12-28T00:00:00+00:00", "2027-01-11T00:00:00+00:00"]),
        ("P2W", "UTC", "2026-12-27T12:00:00Z", ["2026-12-14T00:00:00+00:00", "2026-12-28T00:00:00+00:00"]),
        // Months count from January: quarters, halves.
        ("P3M", "UTC", "2026-05-15T00:00:00Z", ["2026-04-01T00:00:00+00:00", "2026-07-01T00:00:00+00:00"]),
        (
            "P3M",
            "Europe/Berlin",
            "2026-12-31T23:59:59+01:00",
            ["2026-10-01T00:00:00+02:00", "2027-01-01T00:00:00+01:00"],
        ),
        ("P6M", "UTC", "2026-07-01T00:00:00Z", ["2026-07-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]),
        ("P12M", "UTC", "2026-07-01T00:00:00Z", ["2026-01-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]),
        // Years count from years divisible by n.
        ("P2Y", "UTC", "2027-06-01T00:00:00Z", ["2026-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]),
        ("P10Y", "UTC", "2026-06-01T00:00:00Z", ["2020-01-01T00:00:00+00:00", "2030-01-01T00:00:00+00:00"]),
    ]);
}

#[test]
fn periods_without_calendar_boundaries_are_refused() {
    let table: &[(&str, &str)] = &[
        (
            "PT5H",
            "period PT5H has no calendar boundaries under reset: calendar; hours must divide a day: PT1H, PT2H, PT3H, PT4H, PT6H, PT8H or PT12H (P1D is a local day), or use reset: first-use",
        ),
        (
            "PT24H",
            "period PT24H has no calendar boundaries under reset: calendar; hours must divide a day: PT1H, PT2H, PT3H, PT4H, PT6H, PT8H or PT12H (P1D is a local day), or use reset: first-use",
        ),
        (
            "P5M",
            "period P5M has no calendar boundaries under reset: calendar; months must divide a year: P1M, P2M, P3M, P4M, P6M or P12M, or use reset: first-use",
        ),
        (
            "P24M",
            "period P24M has no calendar boundaries under reset: calendar; months must divide a year: P1M, P2M, P3M, P4M, P6M or P12M, or use reset: first-use",
        ),
    ];
    for &(period, message) in table {
        let refused = Calendar::new(Period::parse(period).unwrap(), Zone::utc());
        assert_eq!(refused.map_err(|e| e.to_string()), Err(message.to_string()), "{period}");
    }
}

/// The instants at the edge of what a `u64` of nanoseconds holds get windows, not a panic.
#[test]
fn the_last_instants_get_windows() {
    let year = Calendar::new(Period::parse("P1Y").unwrap(), Zone::utc()).unwrap();
    let window = year.window(u64::MAX);
    assert_eq!(shown(&Zone::utc(), window), ["2554-01-01T00:00:00+00:00", "2554-07-21T23:34:33.709551615+00:00"]);
    let hour = Calendar::new(Period::parse("PT1H").unwrap(), Zone::utc()).unwrap();
    assert_eq!(hour.window(0), Window { start: 0, end: 3_600_000_000_000 });
}

/// Windows tile time: every instant is in its window, and the windows at a window's edges are
/// that window and the next, which starts where it ends. Swept across three days around a
/// change of the clocks in zones that move them oddly, every 7 minutes for hours and every 41
/// for longer periods.
#[test]
fn windows_tile_time() {
    let zones: &[(&str, &str)] = &[
        ("UTC", "2026-12-20T00:00:00Z"),
        ("Europe/Berlin", "2026-03-28T00:00:00Z"),
        ("Europe/Berlin", "2026-10-24T00:00:00Z"),
        ("America/New_York", "2026-10-31T00:00:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T00:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T00:00:00Z"),
        ("America/Sao_Paulo", "2018-02-17T00:00:00Z"),
        ("America/Sao_Paulo", "2018-11-03T00:00:00Z"),
        ("America/Havana", "2023-11-04T00:00:00Z"),
        ("Pacific/Apia", "2011-12-29T00:00:00Z"),
        // Casey went from +11 to +08 in 2010: clocks set back three hours.
        ("Antarctica/Casey", "2010-03-04T00:00:00Z"),
    ];
    let periods = ["PT1H", "PT2H", "PT6H", "P1D", "P2D", "P1W", "P1M", "P3M", "P1Y"];
    for &(zone_name, from) in zones {
        for period in periods {
            let calendar = Calendar::new(Period::parse(period).unwrap(), zone(zone_name)).unwrap();
            let minutes = if period.starts_with("PT") { 7 } else { 41 };
            let mut now = at(from);
            for _ in 0..3 * 24 * 60 / minutes {
                let window = calendar.window(now);
                let context = format!("{period} in {zone_name} at {}", Zone::utc().rfc3339(now));
                assert!(window.contains(now), "{context}: {window:?}");
                assert_eq!(calendar.window(window.start), window, "{context}");
                assert_eq!(calendar.window(window.end - 1), window, "{context}");
                assert_eq!(calendar.window(window.end).start, window.end, "{context}");
                now += minutes * 60_000_000_000;
            }
        }
    }
}
