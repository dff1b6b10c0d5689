//! The per-run log budget (`logBytes`, contract §9): UTF-8 bytes of log
//! message text, newlines not counted. The first line that would cross the
//! limit is replaced by one in-band marker line; every later line is
//! dropped and counted, so the host's memory stays bounded however much a
//! script logs.

pub struct LogBudget {
    limit: u64,
    used: u64,
    dropped: u64,
    truncated: bool,
}

impl LogBudget {
    pub fn new(limit: u64) -> Self {
        LogBudget {
            limit,
            used: 0,
            dropped: 0,
            truncated: false,
        }
    }

    /// The line to send for `message`: itself, the marker, or nothing.
    pub fn admit(&mut self, message: String) -> Option<String> {
        let bytes = message.bytes().filter(|b| *b != b'\n').count() as u64;
        if self.truncated {
            self.dropped += bytes;
            return None;
        }
        if self.used + bytes > self.limit {
            self.truncated = true;
            self.dropped += bytes;
            return Some(format!(
                "[log truncated: limit of {} bytes reached]",
                self.limit
            ));
        }
        self.used += bytes;
        Some(message)
    }

    /// Bytes of message text dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossing_line_becomes_one_marker_and_later_lines_are_dropped() {
        let mut b = LogBudget::new(10);
        assert_eq!(b.admit("12345".into()).as_deref(), Some("12345"));
        assert_eq!(
            b.admit("12\n345".into()).as_deref(),
            Some("12\n345"),
            "newlines are not counted"
        );
        assert_eq!(
            b.admit("x".into()).as_deref(),
            Some("[log truncated: limit of 10 bytes reached]")
        );
        assert_eq!(b.admit("yy".into()), None);
        assert_eq!(b.dropped(), 3);
    }

    #[test]
    fn multibyte_text_counts_utf8_bytes() {
        let mut b = LogBudget::new(5);
        assert_eq!(b.admit("é€".into()).as_deref(), Some("é€")); // 2 + 3 bytes
        assert!(
            b.admit("a".into())
                .is_some_and(|m| m.starts_with("[log truncated"))
        );
    }
}
