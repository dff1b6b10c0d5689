//! Strings and numbers of a dry-run answer: `minLength` padding, a sample
//! of a known `format`, strings built from a `pattern` regex (its shortest
//! match, lengthened where `minLength` asks); `0` moved into the bounds.

use serde_json::{Map, Number, Value};

/// The longest string built from a `pattern`.
const MAX_PATTERN_CHARS: usize = 10_000;

/// `""`, or `minLength` characters; then a non-empty string, which a
/// `oneOf` of strings may need to tell its branches apart; then strings
/// built from `pattern`.
pub(super) fn string_candidates(obj: &Map<String, Value>) -> Vec<Value> {
    if let Some(sample) = obj
        .get("format")
        .and_then(Value::as_str)
        .and_then(format_sample)
    {
        return vec![Value::String(sample.to_owned())];
    }
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let min = usize::try_from(min.min(4096)).unwrap_or(4096);
    let first = "x".repeat(min);
    let second = "x".repeat(min.max(1));
    let mut out = vec![Value::String(first.clone())];
    if second != first {
        out.push(Value::String(second));
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
        for s in pattern_samples(p, min) {
            let v = Value::String(s);
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// Strings that match the regex `pattern`: its shortest match, then (for
/// a `minLength` of `min_len` characters) that match with one repetition
/// repeated more, or padded with `x` before or after it. Empty when the
/// pattern does not parse here (the validator's dialect decides what is
/// valid; every candidate is checked anyway).
fn pattern_samples(pattern: &str, min_len: usize) -> Vec<String> {
    let Ok(hir) = regex_syntax::ParserBuilder::new().build().parse(pattern) else {
        return Vec::new();
    };
    let build = |grow: Option<(usize, usize)>| {
        let mut g = PatternGen {
            grow,
            seen: 0,
            out: String::new(),
        };
        g.emit(&hir).map(|()| (g.out, g.seen))
    };
    let Some((shortest, repeats)) = build(None) else {
        return Vec::new();
    };
    let mut out = vec![shortest.clone()];
    let have = shortest.chars().count();
    if have < min_len {
        let need = min_len - have;
        for i in 0..repeats.min(64) {
            if let Some((s, _)) = build(Some((i, need))) {
                out.push(s);
            }
        }
        out.push(format!("{}{shortest}", "x".repeat(need)));
        out.push(format!("{shortest}{}", "x".repeat(need)));
    }
    out.dedup();
    out
}

/// Builds one match of a regex's syntax tree.
struct PatternGen {
    /// `(i, chars)`: repeat the i-th repetition (in tree order) enough
    /// more times to add about `chars` characters.
    grow: Option<(usize, usize)>,
    /// Repetitions met so far.
    seen: usize,
    out: String,
}

impl PatternGen {
    fn emit(&mut self, hir: &regex_syntax::hir::Hir) -> Option<()> {
        use regex_syntax::hir::{Class, HirKind};
        if self.out.len() > MAX_PATTERN_CHARS {
            return None;
        }
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(l) => self.out.push_str(std::str::from_utf8(&l.0).ok()?),
            HirKind::Class(Class::Unicode(c)) => {
                let ranges = c.ranges();
                let has = |ch: char| ranges.iter().any(|r| r.start() <= ch && ch <= r.end());
                let ch = ['x', 'a', '0', 'A', '-', '_']
                    .into_iter()
                    .find(|&ch| has(ch))
                    .or_else(|| {
                        ranges
                            .iter()
                            .find(|r| r.end() >= '!')
                            .map(|r| r.start().max('!'))
                    })?;
                self.out.push(ch);
            }
            HirKind::Class(Class::Bytes(c)) => {
                let r = c.ranges().iter().find(|r| r.start() < 0x80)?;
                let b = if r.start() <= b'x' && b'x' <= r.end() {
                    b'x'
                } else {
                    r.start().max(b'!').min(r.end())
                };
                self.out.push(char::from(b));
            }
            HirKind::Repetition(r) => {
                let index = self.seen;
                self.seen += 1;
                let mut times = r.min as usize;
                if let Some((i, chars)) = self.grow
                    && i == index
                {
                    let per = r.sub.properties().minimum_len().unwrap_or(0);
                    if per > 0 {
                        times += chars.div_ceil(per);
                    }
                    if let Some(max) = r.max {
                        times = times.min(max as usize);
                    }
                }
                for _ in 0..times {
                    self.emit(&r.sub)?;
                    if self.out.len() > MAX_PATTERN_CHARS {
                        return None;
                    }
                }
            }
            HirKind::Capture(c) => self.emit(&c.sub)?,
            HirKind::Concat(parts) => {
                for p in parts {
                    self.emit(p)?;
                }
            }
            HirKind::Alternation(alts) => {
                let shortest = alts
                    .iter()
                    .min_by_key(|a| a.properties().minimum_len().unwrap_or(usize::MAX))?;
                self.emit(shortest)?;
            }
        }
        Some(())
    }
}

/// A short valid string of a `format` the validator checks.
fn format_sample(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "1970-01-01T00:00:00Z",
        "date" => "1970-01-01",
        "time" => "00:00:00Z",
        "duration" => "P0D",
        "email" | "idn-email" => "user@example.com",
        "hostname" | "idn-hostname" => "example.com",
        "ipv4" => "127.0.0.1",
        "ipv6" => "::1",
        "uri" | "iri" | "uri-reference" | "iri-reference" => "https://example.com/",
        "uri-template" => "https://example.com/{id}",
        "uuid" => "00000000-0000-0000-0000-000000000000",
        "json-pointer" | "regex" => "",
        "relative-json-pointer" => "0",
        _ => return None,
    })
}

/// `0` moved into `minimum`/`maximum` (exclusive bounds respected), then
/// the value one above it.
pub(super) fn number_candidates(obj: &Map<String, Value>, integer: bool) -> Vec<Value> {
    let bound = |k: &str| obj.get(k).and_then(Value::as_f64);
    let (lo, lo_excl) = match (bound("minimum"), bound("exclusiveMinimum")) {
        (Some(a), Some(b)) if b >= a => (Some(b), true),
        (Some(a), _) => (Some(a), false),
        (None, Some(b)) => (Some(b), true),
        (None, None) => (None, false),
    };
    let (hi, hi_excl) = match (bound("maximum"), bound("exclusiveMaximum")) {
        (Some(a), Some(b)) if b <= a => (Some(b), true),
        (Some(a), _) => (Some(a), false),
        (None, Some(b)) => (Some(b), true),
        (None, None) => (None, false),
    };
    let fits = |x: f64| {
        lo.is_none_or(|lo| if lo_excl { x > lo } else { x >= lo })
            && hi.is_none_or(|hi| if hi_excl { x < hi } else { x <= hi })
    };
    let mut tries: Vec<f64> = vec![0.0, 1.0];
    if let Some(lo) = lo {
        let start = if integer { lo.floor() } else { lo };
        tries.extend([start, start + 1.0]);
        if !integer && let Some(hi) = hi {
            tries.push((lo + hi) / 2.0);
        }
    }
    if let Some(hi) = hi {
        let start = if integer { hi.ceil() } else { hi };
        tries.extend([start, start - 1.0]);
    }
    let mut out: Vec<Value> = Vec::new();
    for x in tries {
        if !x.is_finite() || !fits(x) || (integer && x.fract() != 0.0) {
            continue;
        }
        let v = number_value(x);
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_by(|a, b| {
        let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
        a.abs().total_cmp(&b.abs()).then(a.total_cmp(&b))
    });
    out
}

/// A JSON number, written as an integer when it is one.
pub(super) fn number_value(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        // Exact: |x| < 2^53.
        Value::from(x as i64)
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}
