//! Server-sent events, as the streaming APIs send them: lines, `data:`
//! fields joined per event, an empty line ending each event. Only `data`
//! matters to the APIs' streams (`event:` repeats the data's own `type`).

/// Longest line kept (a longer one is an error, not unbounded memory).
const MAX_LINE: usize = 8 << 20;

/// A stream the decoder will not hold: a line longer than `MAX_LINE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the API's event stream has a line longer than {} MiB", .max_bytes >> 20)]
pub struct SseError {
    /// The longest line kept, in bytes.
    pub max_bytes: usize,
}

/// Splits a byte stream into events' data.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The unfinished line.
    buf: Vec<u8>,
    /// The data lines of the event being read.
    data: String,
}

impl SseDecoder {
    /// Feeds `bytes`; `on_event` gets each complete event's data.
    pub fn feed(&mut self, bytes: &[u8], on_event: &mut dyn FnMut(&str)) -> Result<(), SseError> {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(i) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let end = start + i;
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            start = end + 1;
            self.line(&line, on_event);
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE {
            return Err(SseError {
                max_bytes: MAX_LINE,
            });
        }
        Ok(())
    }

    /// The stream ended: a last event without its empty line still counts.
    pub fn end(&mut self, on_event: &mut dyn FnMut(&str)) {
        if !self.buf.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            self.line(&rest, on_event);
        }
        self.dispatch(on_event);
    }

    /// Whether anything was received since the decoder was made.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.data.is_empty()
    }

    fn line(&mut self, line: &str, on_event: &mut dyn FnMut(&str)) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            self.dispatch(on_event);
        } else if let Some(d) = line.strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
        // `event:`, `id:`, `retry:` and comments carry nothing we use.
    }

    fn dispatch(&mut self, on_event: &mut dyn FnMut(&str)) {
        let data = std::mem::take(&mut self.data);
        if !data.trim().is_empty() {
            on_event(data.trim());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_across_chunks_and_multi_line_data() {
        let mut d = SseDecoder::default();
        let mut got = Vec::new();
        let text = "event: a\r\ndata: one\r\n\r\n: comment\ndata: two\ndata: lines\n\ndata: last";
        for chunk in text.as_bytes().chunks(3) {
            d.feed(chunk, &mut |e| got.push(e.to_string()))
                .expect("fed");
        }
        d.end(&mut |e| got.push(e.to_string()));
        assert_eq!(got, ["one", "two\nlines", "last"]);
    }
}
