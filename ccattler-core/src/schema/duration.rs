//! Durations as people write them: `250ms`, `10s`, `5m`, `1h30m`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

use super::SchemaError;

const UNITS: [(&str, u64); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];
const FORMS: &str =
    "a number with a unit, largest first: h, m, s, ms, us, ns (like `250ms`, `10s`, `1h30m`)";

/// Parses `1h30m`, `250ms`, `10s`. Units must come largest first and at most once each; `0`
/// alone is zero.
///
/// # Errors
///
/// [`SchemaError::Invalid`] for a missing or unknown unit, a sign, a fraction, units out of order,
/// or a total beyond about 584 years.
///
/// ```
/// use std::time::Duration;
/// use ccattler_core::schema::{format_duration, parse_duration};
///
/// assert_eq!(parse_duration("1h30m")?, Duration::from_secs(5400));
/// assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
/// assert!(parse_duration("10").is_err());
/// # Ok::<(), ccattler_core::schema::SchemaError>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, SchemaError> {
    let invalid = |reason: &str| SchemaError::invalid("duration", text, reason, FORMS);
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid("it is empty"));
    }
    let mut rest = text;
    let mut total: u64 = 0;
    let mut smallest_so_far = usize::MAX; // index into UNITS of the last unit seen
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            let reason = if rest.starts_with('-') {
                "it cannot be negative".to_owned()
            } else {
                format!("expected a number at `{rest}`")
            };
            return Err(invalid(&reason));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        let (unit, after) = after.split_at(unit_len);
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            let reason = if unit.is_empty() {
                if after.starts_with('.') {
                    "fractions are not allowed; use a smaller unit (`1500ms`, not `1.5s`)"
                        .to_owned()
                } else {
                    format!("`{number}` has no unit")
                }
            } else {
                format!("unknown unit `{unit}`")
            };
            return Err(invalid(&reason));
        };
        if smallest_so_far != usize::MAX && index <= smallest_so_far {
            return Err(invalid("units must come largest first, each at most once"));
        }
        smallest_so_far = index;
        let value: u64 = number
            .parse()
            .map_err(|_| invalid("the number is too large"))?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|nanos| total.checked_add(nanos))
            .ok_or_else(|| invalid("the duration is too long"))?;
        rest = after;
    }
    Ok(Duration::from_nanos(total))
}

/// Prints a duration in the canonical form [`parse_duration`] reads back: `0s`, `250ms`,
/// `1h30m`.
pub fn format_duration(duration: Duration) -> String {
    let mut nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let mut text = String::new();
    for (unit, size) in UNITS {
        let size = u128::from(size);
        if nanos >= size {
            text.push_str(&format!("{}{unit}", nanos / size));
            nanos %= size;
        }
    }
    text
}

/// Serializes a duration as its canonical text (for `#[serde(serialize_with)]`).
pub fn serialize_duration<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*d))
}

/// Reads a duration from its text (for `#[serde(deserialize_with)]`).
pub fn deserialize_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn forms() {
        for (text, ms) in [
            ("250ms", 250),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("0", 0),
            ("1m30s", 90_000),
        ] {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
        for bad in [
            "10",
            "-1s",
            "1.5s",
            "5x",
            "30s1m",
            "1s1s",
            "",
            "s",
            "99999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn errors_explain() {
        let err = parse_duration("1.5s").unwrap_err().to_string();
        assert!(err.contains("1500ms"), "{err}");
        let err = parse_duration("10").unwrap_err().to_string();
        assert!(err.contains("no unit") && err.contains("250ms"), "{err}");
    }

    proptest! {
        #[test]
        fn prints_what_it_parses(nanos in any::<u64>()) {
            let d = Duration::from_nanos(nanos);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,24}") {
            let _ = parse_duration(&text);
        }
    }
}
