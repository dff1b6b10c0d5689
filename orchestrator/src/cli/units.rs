//! Parsing of durations (`500ms`, `2s`, `1m`, `1h30m`, bare seconds) and
//! sizes (`256MiB`, `1G`, bare bytes) for command-line flags.

use std::time::Duration;

/// Parses a duration. A bare number is seconds (fractions allowed).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad =
        || format!("invalid duration {s:?}: use e.g. 500ms, 2s, 1m, 1h30m, or a number of seconds");
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(bad());
        }
        return Duration::try_from_secs_f64(secs).map_err(|_| bad());
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
        total += Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
    }
    Ok(total)
}

/// Parses a byte size: `1048576`, `512KiB`, `256MiB`, `1GiB`, `64M`, `1G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("invalid size {s:?}: use e.g. 256MiB, 1GiB, 64M, or a number of bytes");
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("500ms", 500)]
    #[case("2s", 2000)]
    #[case("1m", 60_000)]
    #[case("1h30m", 5_400_000)]
    #[case("3", 3000)]
    #[case("1.5", 1500)]
    #[case("1m30s", 90_000)]
    fn durations(#[case] text: &str, #[case] ms: u128) {
        assert_eq!(parse_duration(text).expect("valid").as_millis(), ms);
    }

    #[rstest]
    #[case("")]
    #[case("abc")]
    #[case("5x")]
    #[case("-1")]
    #[case("ms")]
    fn bad_durations(#[case] text: &str) {
        assert!(parse_duration(text).is_err());
    }

    #[rstest]
    #[case("1024", 1024)]
    #[case("256MiB", 256 << 20)]
    #[case("1G", 1 << 30)]
    #[case("64K", 64 << 10)]
    fn sizes(#[case] text: &str, #[case] bytes: u64) {
        assert_eq!(parse_size(text).expect("valid"), bytes);
    }

    #[test]
    fn bad_sizes() {
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("").is_err());
    }
}
