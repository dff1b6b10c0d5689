//! Durations and byte sizes as people write them, with one rule for every
//! place that takes one: command-line flags, `[workflow]`, and every
//! `[providers.NAME]` table of `dsh.toml`.
//!
//! - A duration is a bare number of seconds (`3`, `1.5`; in TOML also the
//!   number itself, `timeout = 30`) or numbers with units `ms`, `s`, `m`,
//!   `h`, one after another (`500ms`, `2m`, `1h30m`, `1m30s`).
//! - A size is a bare number of bytes (`1048576`) or a whole number with a
//!   binary unit: `KiB`, `MiB`, `GiB` (also `K`/`k`, `M`, `G`, and `B` for
//!   bytes). Decimal units (`KB`, `MB`, `GB`) are refused with a hint:
//!   tools disagree on whether `1MB` is 10^6 or 2^20 bytes, and a memory
//!   budget off by 5 % should not pass silently (docs/cli.md).
//!
//! [`Seconds`] and [`ByteSize`] are the serde forms; [`parse_duration`]
//! and [`parse_size`] the text forms (the CLI's flag parsers).

use std::fmt;
use std::time::Duration;

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration or size that does not follow the rule in the module docs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

/// Parses a duration (see the module docs).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let s = s.trim();
    let bad = || {
        UnitError(format!(
            "invalid duration {s:?}: use e.g. 500ms, 2s, 1m, 1h30m, or a number of seconds"
        ))
    };
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return seconds(secs).ok_or_else(bad);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let secs = match unit {
            "ms" => n / 1000.0,
            "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            _ => return Err(bad()),
        };
        total = total
            .checked_add(seconds(secs).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// A finite, non-negative number of seconds as a duration.
fn seconds(secs: f64) -> Option<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// Parses a byte size (see the module docs).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let bad = || {
        UnitError(format!(
            "invalid size {s:?}: use e.g. 256MiB, 1GiB, 64M, or a number of bytes"
        ))
    };
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        decimal @ ("KB" | "kB" | "MB" | "GB") => {
            let binary = match decimal {
                "MB" => "MiB",
                "GB" => "GiB",
                _ => "KiB",
            };
            return Err(UnitError(format!(
                "invalid size {s:?}: decimal units such as {decimal} are not accepted (tools \
                 disagree on what they mean); write {n}{binary} for {n} × {}, or the number of \
                 bytes",
                match binary {
                    "MiB" => "1048576",
                    "GiB" => "1073741824",
                    _ => "1024",
                }
            )));
        }
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// A duration in configuration: a number of seconds (integer or fraction)
/// or a string such as `"500ms"` or `"1h30m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Seconds(pub Duration);

/// A byte size in configuration: a number of bytes or a string such as
/// `"512KiB"` or `"16MiB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl From<Seconds> for Duration {
    fn from(s: Seconds) -> Duration {
        s.0
    }
}

impl From<ByteSize> for u64 {
    fn from(s: ByteSize) -> u64 {
        s.0
    }
}

impl std::str::FromStr for Seconds {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_duration(s).map(Seconds)
    }
}

impl std::str::FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for Seconds {
    /// Milliseconds, which [`parse_duration`] reads back exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0.as_millis())
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"30s\", \"500ms\", \"2m\" or a number of seconds")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Seconds, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(Duration::from_secs(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Seconds, E> {
                u64::try_from(v)
                    .map(|v| Seconds(Duration::from_secs(v)))
                    .map_err(|_| E::custom(format!("invalid duration {v}: must not be negative")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Seconds, E> {
                seconds(v).map(Seconds).ok_or_else(|| {
                    E::custom(format!(
                        "invalid duration {v}: use a non-negative number of seconds or e.g. \"30s\""
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"16MiB\", \"512KiB\" or a number of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {v}: must not be negative")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ByteSize, E> {
                Err(E::custom(format!(
                    "invalid size {v}: a size is a whole number of bytes or e.g. \"16MiB\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `deserialize_with` helpers for fields that hold a plain [`Duration`] or
/// byte count, read through [`Seconds`] and [`ByteSize`].
pub mod de {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    use super::{ByteSize, Seconds};

    /// A [`Seconds`] as a [`Duration`].
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Seconds::deserialize(d).map(|s| s.0)
    }

    /// An optional [`Seconds`] as a [`Duration`] (with `#[serde(default)]`).
    pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Seconds::deserialize(d).map(|s| Some(s.0))
    }

    /// A [`ByteSize`] as bytes.
    pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        ByteSize::deserialize(d).map(|s| s.0)
    }

    /// An optional [`ByteSize`] as bytes (with `#[serde(default)]`).
    pub fn opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        ByteSize::deserialize(d).map(|s| Some(s.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("500ms", 500)]
    #[case("2s", 2000)]
    #[case("1m", 60_000)]
    #[case("2m", 120_000)]
    #[case("1h30m", 5_400_000)]
    #[case("3", 3000)]
    #[case("1.5", 1500)]
    #[case("1m30s", 90_000)]
    #[case(" 7s ", 7000)]
    fn durations(#[case] text: &str, #[case] ms: u128) {
        assert_eq!(parse_duration(text).expect("valid").as_millis(), ms);
    }

    #[rstest]
    #[case("")]
    #[case("abc")]
    #[case("5x")]
    #[case("-1")]
    #[case("ms")]
    #[case("1e400")]
    #[case("NaN")]
    #[case("inf")]
    fn bad_durations(#[case] text: &str) {
        let e = parse_duration(text).expect_err("invalid");
        assert!(e.to_string().contains("invalid duration"), "{e}");
    }

    #[rstest]
    #[case("1024", 1024)]
    #[case("256MiB", 256 << 20)]
    #[case("512KiB", 512 << 10)]
    #[case("16MiB", 16 << 20)]
    #[case("1G", 1 << 30)]
    #[case("64K", 64 << 10)]
    #[case("8 MiB", 8 << 20)]
    #[case("10B", 10)]
    fn sizes(#[case] text: &str, #[case] bytes: u64) {
        assert_eq!(parse_size(text).expect("valid"), bytes);
    }

    #[rstest]
    #[case("12XB", "invalid size")]
    #[case("", "invalid size")]
    #[case("1.5MiB", "invalid size")]
    #[case("99999999999999GiB", "invalid size")]
    #[case("1MB", "write 1MiB")]
    #[case("2GB", "write 2GiB")]
    #[case("4kB", "write 4KiB")]
    fn bad_sizes(#[case] text: &str, #[case] says: &str) {
        let e = parse_size(text).expect_err("invalid");
        assert!(e.to_string().contains(says), "{e}");
    }

    #[derive(Deserialize)]
    struct Table {
        d: Seconds,
        s: ByteSize,
    }

    /// TOML gives every spelling the same meaning as the flags do: bare
    /// integers and fractions of seconds, strings with units.
    #[rstest]
    #[case("d = 3\ns = 1024", 3000, 1024)]
    #[case("d = 1.5\ns = \"16MiB\"", 1500, 16 << 20)]
    #[case("d = \"1h30m\"\ns = \"512KiB\"", 5_400_000, 512 << 10)]
    #[case("d = \"500ms\"\ns = 0", 500, 0)]
    fn config_spellings(#[case] text: &str, #[case] ms: u128, #[case] bytes: u64) {
        let t: Table = toml::from_str(text).expect("valid");
        assert_eq!(t.d.0.as_millis(), ms);
        assert_eq!(t.s.0, bytes);
    }

    #[rstest]
    #[case("d = -1\ns = 1", "must not be negative")]
    #[case("d = 1\ns = 1.5", "whole number of bytes")]
    #[case("d = \"1x\"\ns = 1", "invalid duration")]
    #[case("d = 1\ns = \"1MB\"", "write 1MiB")]
    #[case("d = true\ns = 1", "a duration such as")]
    fn config_errors(#[case] text: &str, #[case] says: &str) {
        let e = toml::from_str::<Table>(text).err().expect("invalid");
        assert!(e.to_string().contains(says), "{e}");
    }

    #[test]
    fn seconds_display_reads_back() {
        let s = Seconds(Duration::from_millis(1500));
        assert_eq!(s.to_string().parse::<Seconds>(), Ok(s));
    }
}
