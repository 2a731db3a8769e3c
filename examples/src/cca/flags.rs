//! Parsers of command-line values shared by `cca dev` and `cca agent`: quantities, durations,
//! zones and labels, each refusing bad input with a message that says what is accepted.

use std::time::Duration;

use ccattler_core::schema::{self, Cpu, Memory, PortRange};

/// CPU: cores (`2`, `0.5`) or millicores (`500m`).
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_cpu(text: &str) -> Result<Cpu, String> {
    text.parse()
        .map_err(|err: schema::SchemaError| err.to_string())
}

/// Memory: `512Mi`, `2Gi`, `1G` or bytes.
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_memory(text: &str) -> Result<Memory, String> {
    text.parse()
        .map_err(|err: schema::SchemaError| err.to_string())
}

/// A duration: `250ms`, `10s`, `1h30m`.
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_time(text: &str) -> Result<Duration, String> {
    schema::parse_duration(text).map_err(|err| err.to_string())
}

/// A zone name: non-empty, without `/`.
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_zone(text: &str) -> Result<String, String> {
    let zone = text.trim();
    if zone.is_empty() || zone.contains('/') {
        return Err("a zone is a non-empty name without `/`".to_owned());
    }
    Ok(zone.to_owned())
}

/// A label, `KEY=VALUE` (the value may be empty).
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

/// A range of host ports, `FIRST-LAST` (`20000-29999`), both from 1 to 65535.
///
/// # Errors
///
/// What is wrong with `text`, in words.
pub fn parse_port_range(text: &str) -> Result<PortRange, String> {
    let wrong =
        || format!("expected FIRST-LAST with ports from 1 to 65535 (20000-29999), got {text:?}");
    let (first, last) = text.split_once('-').ok_or_else(wrong)?;
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|p| *p >= 1);
    match (port(first), port(last)) {
        (Some(first), Some(last)) if first <= last => Ok(PortRange { first, last }),
        (Some(_), Some(_)) => Err(format!("the range {text:?} ends before it starts")),
        _ => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_range_is_two_ports_in_order() {
        assert_eq!(
            parse_port_range("20000-20009"),
            Ok(PortRange {
                first: 20000,
                last: 20009
            })
        );
        for bad in ["20000", "0-10", "10-70000", "30-20", "a-b"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_values_say_what_is_accepted() {
        assert!(parse_cpu("500x").is_err());
        assert!(parse_memory("-1").is_err());
        assert_eq!(parse_zone(" a "), Ok("a".to_owned()));
        assert!(parse_zone("a/b").is_err());
        assert_eq!(
            parse_label("disk=ssd"),
            Ok(("disk".to_owned(), "ssd".to_owned()))
        );
        assert!(parse_label("=x").unwrap_err().contains("KEY=VALUE"));
        assert_eq!(parse_time("250ms"), Ok(Duration::from_millis(250)));
    }
}
