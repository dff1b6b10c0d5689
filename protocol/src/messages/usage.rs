//! [`Usage`]: the tokens (and cost) a child reported, with its two
//! encodings (compact JSON, every field on the wire) and its arithmetic.

use serde::{Deserialize, Serialize};

/// Token usage a child reported.
///
/// As JSON (the journal, fixtures) it is `{"input": N, "output": N}` plus
/// `cacheRead`, `cacheWrite` and `costUsd` when they are not zero or
/// absent; on the wire (postcard, not self-describing) every field is
/// always there. Both read the JSON of older versions (`input` and
/// `output` only).
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens (cache reads and writes included).
    pub input: u64,
    /// Output tokens; these count against the budget.
    pub output: u64,
    /// Of `input`, the tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Of `input`, the tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write: u64,
    /// What the child's provider says the tokens cost, in US dollars
    /// (agent CLIs that report it); `None` when it said nothing. A cost
    /// that is not a finite number of dollars, 0 or more, reads as `None`.
    #[serde(default, deserialize_with = "dollars")]
    pub cost_usd: Option<f64>,
}

/// `cost_usd` as read: NaN, an infinity or a negative amount (which only a
/// broken or hostile peer, or a tampered file, holds) is refused, so every
/// decoded [`Usage`] sums and compares like a number and encodes back to
/// the same bytes.
fn dollars<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(d)? {
        Some(c) if Usage::dollars(c).is_none() => Err(serde::de::Error::custom(format!(
            "costUsd must be a finite number of US dollars, 0 or more; got {c}"
        ))),
        c => Ok(c),
    }
}

impl Serialize for Usage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeStruct};
        if s.is_human_readable() {
            let n = 2
                + usize::from(self.cache_read > 0)
                + usize::from(self.cache_write > 0)
                + usize::from(self.cost_usd.is_some());
            let mut m = s.serialize_map(Some(n))?;
            m.serialize_entry("input", &self.input)?;
            m.serialize_entry("output", &self.output)?;
            if self.cache_read > 0 {
                m.serialize_entry("cacheRead", &self.cache_read)?;
            }
            if self.cache_write > 0 {
                m.serialize_entry("cacheWrite", &self.cache_write)?;
            }
            if let Some(c) = self.cost_usd {
                m.serialize_entry("costUsd", &c)?;
            }
            m.end()
        } else {
            // Field by field, in declaration order: what the derived
            // `Deserialize` reads back.
            let mut st = s.serialize_struct("Usage", 5)?;
            st.serialize_field("input", &self.input)?;
            st.serialize_field("output", &self.output)?;
            st.serialize_field("cacheRead", &self.cache_read)?;
            st.serialize_field("cacheWrite", &self.cache_write)?;
            st.serialize_field("costUsd", &self.cost_usd)?;
            st.end()
        }
    }
}

impl Usage {
    /// `input` and `output` tokens, nothing cached, no cost reported.
    pub const fn new(input: u64, output: u64) -> Self {
        Usage {
            input,
            output,
            cache_read: 0,
            cache_write: 0,
            cost_usd: None,
        }
    }

    /// What `self` has more than `earlier` (a running total minus an
    /// earlier reading of it), never below zero.
    #[must_use]
    pub fn minus(self, earlier: Usage) -> Usage {
        Usage {
            input: self.input.saturating_sub(earlier.input),
            output: self.output.saturating_sub(earlier.output),
            cache_read: self.cache_read.saturating_sub(earlier.cache_read),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
            cost_usd: match (self.cost_usd, earlier.cost_usd) {
                (Some(a), Some(b)) => Some((a - b).max(0.0)),
                (a, _) => a,
            },
        }
    }

    /// `c` as a cost a `Usage` may hold: a finite number of dollars, 0 or
    /// more; `None` for anything else (what a provider reported that is no
    /// cost at all).
    pub fn dollars(c: f64) -> Option<f64> {
        (c.is_finite() && c >= 0.0).then_some(c)
    }

    /// The sum of two usages (a cost when either reported one; a sum past
    /// the largest `f64` stays at it).
    #[must_use]
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
            cache_read: self.cache_read.saturating_add(other.cache_read),
            cache_write: self.cache_write.saturating_add(other.cache_write),
            cost_usd: match (self.cost_usd, other.cost_usd) {
                (None, None) => None,
                (a, b) => Some((a.unwrap_or(0.0) + b.unwrap_or(0.0)).min(f64::MAX)),
            },
        }
    }
}
