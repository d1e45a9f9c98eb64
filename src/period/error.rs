//! Why a period, a time zone, or a period under calendar reset was refused.

/// Why a period, a time zone, or a period under calendar reset was refused. Each message is
/// lowercase, carries the value as written and suggests what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    /// Not an ISO 8601 period (`P<n>Y`, `P<n>M`, `P<n>W`, `P<n>D`, `PT<n>H`); holds the text.
    #[error(
        "period {0:?} is not an ISO 8601 period; write a whole number of one unit: PT1H, PT6H, P1D, P1W, P1M, P3M or P1Y"
    )]
    Malformed(String),
    /// More than one unit (`P1M2D`, `PT1H30M`); holds the text and the units in words.
    #[error("period {text} mixes {units}; a quota period is a whole number of one unit, such as P1M, P5W or PT36H")]
    Mixed {
        /// The period as written.
        text: String,
        /// The units it mixes, in words (`months and days`).
        units: String,
    },
    /// A fraction of a unit (`PT1.5H`); holds the text.
    #[error("period {0} has a fraction; a quota period is a whole number of one unit (PT1H, P1D, P1M)")]
    Fraction(String),
    /// Minutes or seconds; holds the text and a hint (the same length in hours, when it is one).
    #[error("period {text} counts {unit}; a quota period counts hours, days, weeks, months or years{hint}")]
    BelowHour {
        /// The period as written.
        text: String,
        /// `minutes` or `seconds`.
        unit: &'static str,
        /// `"; write PT2H"` when the length is whole hours, else a pointer to the shorter bounds.
        hint: String,
    },
    /// Zero of a unit; holds the text.
    #[error("period {0} is zero; a quota period is at least PT1H")]
    Zero(String),
    /// Longer than 100 years; holds the text.
    #[error("period {0} is longer than 100 years")]
    TooLong(String),
    /// A period that has no calendar boundaries (`PT5H`, `P5M`); holds the canonical period and a
    /// hint naming the ones that have.
    #[error("period {period} has no calendar boundaries under reset: calendar; {hint}, or use reset: first-use")]
    Unanchored {
        /// The period, spelt canonically.
        period: String,
        /// The periods of the same unit that calendar reset can anchor.
        hint: &'static str,
    },
    /// Not a name in the time zone database; holds the name as written and a hint.
    #[error("unknown time zone {name:?}; {hint}")]
    UnknownZone {
        /// The name as written.
        name: String,
        /// A near name from the database, or what a name looks like.
        hint: String,
    },
}
