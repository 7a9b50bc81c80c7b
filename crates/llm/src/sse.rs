//! Minimal Server-Sent Events decoder: yields the `data` payload of each event.

/// Incremental SSE decoder. Feed raw bytes with [`SseDecoder::push`]; each
/// completed event's `data` lines (joined with `\n`) come back in order.
/// Comments (`:`), `event:`, `id:` and `retry:` fields are ignored.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    data: Option<String>,
}

impl SseDecoder {
    /// A fresh decoder.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds bytes; returns the payloads of events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut out);
        }
        out
    }

    /// Flushes an event left open at the end of the stream.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let text = String::from_utf8_lossy(&rest)
                .trim_end_matches('\r')
                .to_owned();
            self.line(&text, &mut out);
        }
        out.extend(self.data.take());
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<String>) {
        if line.is_empty() {
            out.extend(self.data.take());
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_events_across_arbitrary_splits() {
        let stream = "data: {\"a\":1}\n\n: keep-alive\n\nevent: message\r\ndata: {\"b\":\"é\"}\r\n\r\ndata: [DONE]\n\n";
        let want = vec![
            "{\"a\":1}".to_owned(),
            "{\"b\":\"é\"}".to_owned(),
            "[DONE]".to_owned(),
        ];
        let bytes = stream.as_bytes();
        for split in 1..bytes.len() {
            let mut dec = SseDecoder::new();
            let mut got = dec.push(&bytes[..split]);
            got.extend(dec.push(&bytes[split..]));
            got.extend(dec.finish());
            assert_eq!(got, want, "split at {split}");
        }
    }

    #[test]
    fn multi_line_data_and_unterminated_tail() {
        let mut dec = SseDecoder::new();
        let mut got = dec.push(b"data: one\ndata: two\n\ndata:three");
        got.extend(dec.finish());
        assert_eq!(got, vec!["one\ntwo".to_owned(), "three".to_owned()]);
    }
}
