//! The per-run log budget (`logBytes`, contract §9): UTF-8 bytes of log
//! message text, newlines not counted. The first line that would cross the
//! limit is replaced by one in-band marker line; every later line is
//! dropped and counted, so the host's memory stays bounded however much a
//! script logs.

/// Longest single log line: what fits in one frame with room to spare.
pub const MAX_LINE_BYTES: usize = dsh_protocol::DEFAULT_MAX_FRAME_BYTES - 64 * 1024;

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

    /// The line to send for `message`: itself, the marker, or nothing. A
    /// single line longer than `MAX_LINE_BYTES` is cut to fit one frame; the
    /// cut bytes count as dropped.
    pub fn admit(&mut self, mut message: String) -> Option<String> {
        if message.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            let dropped = message[cut..].bytes().filter(|b| *b != b'\n').count() as u64;
            message.truncate(cut);
            self.dropped += dropped;
        }
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
