//! Quantities with real units: CPU in millicores, memory in bytes.
//!
//! Both parse the forms users write in `.cca` files and print a canonical form that parses back
//! to the same value. Both serialize as that text, so `etcdctl get` shows `"500m"`, not `500`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::SchemaError;

/// CPU in millicores: `500m` is half a core, `2` is two cores, `0.5` is half a core.
///
/// ```
/// use ccattler_core::schema::Cpu;
///
/// assert_eq!("500m".parse::<Cpu>()?, Cpu::from_millis(500));
/// assert_eq!("0.5".parse::<Cpu>()?, Cpu::from_millis(500));
/// assert_eq!(Cpu::from_millis(2000).to_string(), "2");
/// assert!("500x".parse::<Cpu>().is_err());
/// # Ok::<(), ccattler_core::schema::SchemaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cpu(u64);

impl Cpu {
    /// No CPU.
    pub const ZERO: Cpu = Cpu(0);

    /// `millis` thousandths of a core.
    pub const fn from_millis(millis: u64) -> Self {
        Cpu(millis)
    }

    /// The amount in thousandths of a core.
    pub const fn millis(self) -> u64 {
        self.0
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Cpu) -> Option<Cpu> {
        self.0.checked_add(other.0).map(Cpu)
    }

    /// The difference, or zero.
    #[must_use]
    pub fn saturating_sub(self, other: Cpu) -> Cpu {
        Cpu(self.0.saturating_sub(other.0))
    }
}

impl FromStr for Cpu {
    type Err = SchemaError;

    fn from_str(text: &str) -> Result<Self, SchemaError> {
        let invalid = |reason: &str| SchemaError::invalid("cpu", text, reason, CPU_FORMS);
        if let Some(millis) = text.strip_suffix('m') {
            if millis.is_empty() || !millis.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("millicores must be a whole number before `m`"));
            }
            return millis
                .parse()
                .map(Cpu)
                .map_err(|_| invalid("the number is too large"));
        }
        let millis = Decimal::parse(text)
            .ok_or_else(|| invalid(bad_number_reason(text)))?
            .scaled(1000)
            .map_err(|e| invalid(&e.reason("1m")))?;
        Ok(Cpu(millis))
    }
}

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

const CPU_FORMS: &str = "cores like `2` or `0.5`, or millicores like `500m`";

/// Memory in bytes: `512Mi`, `1Gi`, `1G`, `1024`.
///
/// Binary suffixes `Ki Mi Gi Ti Pi Ei` are powers of 1024, decimal ones `K M G T P E` (and `k`)
/// powers of 1000. A fraction is allowed when the result is a whole number of bytes (`1.5Ki`).
///
/// ```
/// use ccattler_core::schema::Memory;
///
/// assert_eq!("512Mi".parse::<Memory>()?.bytes(), 536_870_912);
/// assert_eq!("1G".parse::<Memory>()?.bytes(), 1_000_000_000);
/// assert_eq!(Memory::from_bytes(1 << 30).to_string(), "1Gi");
/// assert!("1e99Gi".parse::<Memory>().is_err());
/// # Ok::<(), ccattler_core::schema::SchemaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Memory(u64);

const BINARY: [(&str, u64); 6] = [
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
];
const DECIMAL: [(&str, u64); 6] = [
    ("E", 1_000_000_000_000_000_000),
    ("P", 1_000_000_000_000_000),
    ("T", 1_000_000_000_000),
    ("G", 1_000_000_000),
    ("M", 1_000_000),
    ("K", 1_000),
];
const MEMORY_FORMS: &str = "bytes like `1024`, or a number with a unit: Ki Mi Gi Ti Pi Ei (powers of 1024) or K M G T P E (powers of 1000), like `512Mi` or `1G`";

impl Memory {
    /// No memory.
    pub const ZERO: Memory = Memory(0);

    /// `bytes` bytes.
    pub const fn from_bytes(bytes: u64) -> Self {
        Memory(bytes)
    }

    /// The amount in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Whether it is no memory at all.
    pub const fn is_zero(&self) -> bool {
        self.0 == 0
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Memory) -> Option<Memory> {
        self.0.checked_add(other.0).map(Memory)
    }

    /// The difference, or zero.
    #[must_use]
    pub fn saturating_sub(self, other: Memory) -> Memory {
        Memory(self.0.saturating_sub(other.0))
    }
}

impl FromStr for Memory {
    type Err = SchemaError;

    fn from_str(text: &str) -> Result<Self, SchemaError> {
        let invalid = |reason: &str| SchemaError::invalid("memory", text, reason, MEMORY_FORMS);
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let multiplier = match unit {
            "" => 1,
            "k" => 1000,
            _ => BINARY
                .iter()
                .chain(DECIMAL.iter())
                .find(|(suffix, _)| *suffix == unit)
                .map(|(_, m)| *m)
                .ok_or_else(|| invalid(&format!("unknown unit `{unit}`")))?,
        };
        let bytes = Decimal::parse(number)
            .ok_or_else(|| invalid(bad_number_reason(text)))?
            .scaled(multiplier)
            .map_err(|e| invalid(&e.reason("one byte")))?;
        Ok(Memory(bytes))
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exact = |table: &[(&'static str, u64)]| {
            table
                .iter()
                .find(|(_, m)| self.0.is_multiple_of(*m))
                .map(|(suffix, m)| (self.0 / m, *suffix))
        };
        let best = match (exact(&BINARY), exact(&DECIMAL)) {
            _ if self.0 == 0 => None,
            (Some(b), Some(d)) => Some(if d.0 < b.0 { d } else { b }),
            (b, d) => b.or(d),
        };
        match best {
            Some((n, suffix)) => write!(f, "{n}{suffix}"),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A non-negative decimal number as digits, kept exact.
struct Decimal<'a> {
    whole: &'a str,
    fraction: &'a str,
}

enum ScaleError {
    Overflow,
    TooPrecise,
}

impl ScaleError {
    fn reason(&self, unit: &str) -> String {
        match self {
            ScaleError::Overflow => "the number is too large".to_owned(),
            ScaleError::TooPrecise => format!("the smallest step is {unit}"),
        }
    }
}

impl<'a> Decimal<'a> {
    fn parse(text: &'a str) -> Option<Self> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let valid = !whole.is_empty()
            && digits(whole)
            && digits(fraction)
            && (fraction.is_empty() != text.contains('.'));
        valid.then_some(Decimal { whole, fraction })
    }

    /// The number times `multiplier`, which must come out whole.
    fn scaled(&self, multiplier: u64) -> Result<u64, ScaleError> {
        let whole: u64 = self.whole.parse().map_err(|_| ScaleError::Overflow)?;
        let whole = whole.checked_mul(multiplier).ok_or(ScaleError::Overflow)?;
        let fraction = self.fraction.trim_end_matches('0');
        if fraction.is_empty() {
            return Ok(whole);
        }
        if fraction.len() > 19 {
            return Err(ScaleError::TooPrecise);
        }
        let numerator: u128 = fraction.parse().map_err(|_| ScaleError::Overflow)?;
        let denominator = 10u128.pow(fraction.len() as u32);
        let scaled = numerator * u128::from(multiplier);
        if !scaled.is_multiple_of(denominator) {
            return Err(ScaleError::TooPrecise);
        }
        let part = u64::try_from(scaled / denominator).map_err(|_| ScaleError::Overflow)?;
        whole.checked_add(part).ok_or(ScaleError::Overflow)
    }
}

fn bad_number_reason(text: &str) -> &'static str {
    if text.starts_with('-') {
        "it cannot be negative"
    } else if text.is_empty() {
        "it is empty"
    } else {
        "it is not a plain decimal number"
    }
}

macro_rules! text_serde {
    ($type:ty) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

text_serde!(Cpu);
text_serde!(Memory);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_forms() {
        for (text, millis) in [
            ("500m", 500),
            ("2", 2000),
            ("0.5", 500),
            ("0.001", 1),
            ("0", 0),
            ("1.250", 1250),
        ] {
            assert_eq!(text.parse::<Cpu>().unwrap().millis(), millis, "{text}");
        }
        for bad in [
            "500x",
            "-1",
            "1e99",
            "",
            "m",
            "0.0005",
            "1.5m",
            ".5",
            "5.",
            "99999999999999999999",
        ] {
            assert!(bad.parse::<Cpu>().is_err(), "{bad} should be rejected");
        }
        assert_eq!(Cpu::from_millis(1500).to_string(), "1500m");
        assert_eq!(Cpu::from_millis(3000).to_string(), "3");
    }

    #[test]
    fn memory_forms() {
        for (text, bytes) in [
            ("512Mi", 512 << 20),
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("1024", 1024),
            ("1.5Ki", 1536),
            ("2k", 2000),
            ("0", 0),
        ] {
            assert_eq!(text.parse::<Memory>().unwrap().bytes(), bytes, "{text}");
        }
        for bad in [
            "500x", "-1", "1e99Gi", "0.5", "1.1Ki", "Gi", "", "16Ei", "1 Gi",
        ] {
            assert!(bad.parse::<Memory>().is_err(), "{bad} should be rejected");
        }
        assert_eq!(Memory::from_bytes(1_000_000_000).to_string(), "1G");
        assert_eq!(Memory::from_bytes(1536).to_string(), "1536");
        assert_eq!(Memory::from_bytes(1024 * 1000).to_string(), "1000Ki");
        assert_eq!(Memory::from_bytes(1023).to_string(), "1023");
    }

    #[test]
    fn errors_say_what_is_accepted() {
        let err = "500x".parse::<Cpu>().unwrap_err().to_string();
        assert!(err.contains("500x") && err.contains("millicores"), "{err}");
        let err = "12Qi".parse::<Memory>().unwrap_err().to_string();
        assert!(
            err.contains("unknown unit `Qi`") && err.contains("Mi"),
            "{err}"
        );
    }

    #[test]
    fn serialises_as_text() {
        let json =
            serde_json::to_string(&(Cpu::from_millis(500), Memory::from_bytes(256 << 20))).unwrap();
        assert_eq!(json, r#"["500m","256Mi"]"#);
        let back: (Cpu, Memory) = serde_json::from_str(&json).unwrap();
        assert_eq!(back, (Cpu::from_millis(500), Memory::from_bytes(256 << 20)));
        assert!(serde_json::from_str::<Cpu>(r#""lots""#).is_err());
    }

    proptest! {
        #[test]
        fn cpu_prints_what_it_parses(millis in any::<u64>()) {
            let cpu = Cpu::from_millis(millis);
            prop_assert_eq!(cpu.to_string().parse::<Cpu>().unwrap(), cpu);
        }

        #[test]
        fn memory_prints_what_it_parses(bytes in any::<u64>()) {
            let memory = Memory::from_bytes(bytes);
            prop_assert_eq!(memory.to_string().parse::<Memory>().unwrap(), memory);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,24}") {
            let _ = text.parse::<Cpu>();
            let _ = text.parse::<Memory>();
        }
    }
}
