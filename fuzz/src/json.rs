//! Arbitrary JSON values, as deep as serde_json's parser lets a value be
//! (every JSON value the host holds came through it).

use arbitrary::{Arbitrary, Result, Unstructured};
use serde_json::{Map, Number, Value};

/// How deep a generated value nests (serde_json parses at most 128).
pub const MAX_DEPTH: usize = 120;

/// An arbitrary JSON value of at most `depth` levels.
pub fn value(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let leaf = depth == 0 || u.is_empty();
    let kind = if leaf {
        u.int_in_range(0..=4)?
    } else {
        u.int_in_range(0..=6)?
    };
    Ok(match kind {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => Value::Number(if bool::arbitrary(u)? {
            Number::from(i64::arbitrary(u)?)
        } else {
            Number::from(u64::arbitrary(u)?)
        }),
        3 => Number::from_f64(f64::arbitrary(u)?).map_or(Value::Null, Value::Number),
        4 => Value::String(String::arbitrary(u)?),
        5 => {
            let n = u.int_in_range(0..=4)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let n = u.int_in_range(0..=4)?;
            let mut m = Map::new();
            for _ in 0..n {
                let k = String::arbitrary(u)?;
                m.insert(k, value(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}
