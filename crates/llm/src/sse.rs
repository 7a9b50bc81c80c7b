//! Minimal Server-Sent Events decoder: yields the `data` payload of each event.
//!
//! The upstream is not trusted: one buffered line and one event's data are
//! each capped ([`SseDecoder::with_limit`]), a line end is searched for only
//! in bytes not searched before (no rescan of a long line on every chunk),
//! and complete lines are read straight from the pushed chunk (only an
//! unfinished tail is copied). Lines end with LF, CRLF or a lone CR (also
//! when the CR and the LF arrive in different chunks), and a byte-order mark
//! at the start of the stream is skipped, as the SSE specification says.

/// Default cap on one line and on one event's data: 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The stream broke a limit; decoding cannot continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("server-sent event larger than {limit} bytes")]
pub struct SseTooLarge {
    /// The limit that was exceeded.
    pub limit: usize,
}

/// Incremental SSE decoder. Feed raw bytes with [`SseDecoder::push`]; each
/// completed event's `data` lines (joined with `\n`) come back in order.
/// Comments (`:`), `event:`, `id:` and `retry:` fields are ignored.
#[derive(Debug)]
pub struct SseDecoder {
    /// The unfinished line (no line end seen yet); never searched twice.
    partial: Vec<u8>,
    /// The data of the event being built.
    data: Option<String>,
    /// The previous chunk ended with CR: an LF starting the next one
    /// belongs to that line end.
    after_cr: bool,
    /// Bytes of a leading BOM matched so far; `None` once past the start.
    bom: Option<usize>,
    limit: usize,
    failed: bool,
}

impl Default for SseDecoder {
    fn default() -> SseDecoder {
        SseDecoder::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A fresh decoder with the default limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// A fresh decoder that fails when one line, or one event's data, is
    /// longer than `limit` bytes.
    pub fn with_limit(limit: usize) -> SseDecoder {
        SseDecoder {
            partial: Vec::new(),
            data: None,
            after_cr: false,
            bom: Some(0),
            limit: limit.max(1),
            failed: false,
        }
    }

    /// Feeds bytes; returns the payloads of events completed by them.
    ///
    /// # Errors
    /// [`SseTooLarge`] when a line or an event's data grows past the limit
    /// (the decoder then refuses every later call).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseTooLarge> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out)?;
        Ok(out)
    }

    fn push_into(&mut self, mut bytes: &[u8], out: &mut Vec<String>) -> Result<(), SseTooLarge> {
        if self.failed {
            return Err(self.too_large());
        }
        if let Some(matched) = self.bom {
            let n = bytes.len().min(BOM.len() - matched);
            if bytes[..n] == BOM[matched..matched + n] {
                bytes = &bytes[n..];
                self.bom = (matched + n < BOM.len()).then_some(matched + n);
                if self.bom.is_some() {
                    return Ok(());
                }
            } else {
                // Not a BOM after all: what looked like one is text.
                self.partial.extend_from_slice(&BOM[..matched]);
                self.bom = None;
            }
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', bytes) {
            if self.partial.len() + pos > self.limit {
                return Err(self.fail());
            }
            if self.partial.is_empty() {
                self.line(&bytes[..pos], out)?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..pos]);
                self.line(&line, out)?;
                line.clear();
                self.partial = line;
            }
            let cr = bytes[pos] == b'\r';
            bytes = &bytes[pos + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if self.partial.len() + bytes.len() > self.limit {
            return Err(self.fail());
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// Flushes an event left open at the end of the stream.
    ///
    /// # Errors
    /// [`SseTooLarge`] as for [`SseDecoder::push`].
    pub fn finish(&mut self) -> Result<Vec<String>, SseTooLarge> {
        if self.failed {
            return Err(self.too_large());
        }
        let mut out = Vec::new();
        if let Some(matched) = self.bom.take() {
            self.partial.extend_from_slice(&BOM[..matched]);
        }
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.line(&rest, &mut out)?;
        }
        out.extend(self.data.take());
        Ok(out)
    }

    fn too_large(&self) -> SseTooLarge {
        SseTooLarge { limit: self.limit }
    }

    fn fail(&mut self) -> SseTooLarge {
        self.failed = true;
        self.partial = Vec::new();
        self.data = None;
        self.too_large()
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<String>) -> Result<(), SseTooLarge> {
        if line.is_empty() {
            out.extend(self.data.take());
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            return Ok(());
        }
        // A line holds whole UTF-8 sequences: it is cut only at CR or LF.
        let value = String::from_utf8_lossy(value);
        let grown = self.data.as_ref().map_or(0, |d| d.len() + 1) + value.len();
        if grown > self.limit {
            return Err(self.fail());
        }
        match &mut self.data {
            Some(d) => {
                d.push('\n');
                d.push_str(&value);
            }
            None => self.data = Some(value.into_owned()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in(parts: &[&[u8]], limit: usize) -> Result<Vec<String>, SseTooLarge> {
        let mut dec = SseDecoder::with_limit(limit);
        let mut got = Vec::new();
        for p in parts {
            got.extend(dec.push(p)?);
        }
        got.extend(dec.finish()?);
        Ok(got)
    }

    /// Every split of `stream` into two and three pieces decodes to `want`.
    fn all_splits(stream: &[u8], want: &[&str]) {
        let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(decode_in(&[stream], 1 << 20).unwrap(), want, "whole");
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let parts = [&stream[..a], &stream[a..b], &stream[b..]];
                assert_eq!(
                    decode_in(&parts, 1 << 20).unwrap(),
                    want,
                    "split at {a}, {b}"
                );
            }
        }
    }

    #[test]
    fn decodes_events_across_arbitrary_splits() {
        let stream = "data: {\"a\":1}\n\n: keep-alive\n\nevent: message\r\ndata: {\"b\":\"é\"}\r\n\r\ndata: [DONE]\n\n";
        all_splits(stream.as_bytes(), &["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"]);
    }

    #[test]
    fn line_endings_cr_lf_and_crlf_mixed() {
        all_splits(b"data: a\r\rdata: b\n\ndata: c\r\n\r\n", &["a", "b", "c"]);
        // CR-only throughout, with a two-line event.
        all_splits(b"data: x\rdata: y\r\r: c\r\rdata: z\r\r", &["x\ny", "z"]);
        // CR LF split across pushes is one line end, not two.
        assert_eq!(
            decode_in(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 100).unwrap(),
            ["a\nb"]
        );
    }

    #[test]
    fn a_leading_bom_is_skipped_only_at_the_start() {
        all_splits(b"\xEF\xBB\xBFdata: a\n\n", &["a"]);
        // A BOM later in the stream is data.
        all_splits(b"data: a\n\ndata: \xEF\xBB\xBFb\n\n", &["a", "\u{feff}b"]);
        // A BOM prefix that turns out not to be one is kept: here it
        // spoils the field name, so the line is not a data line.
        assert_eq!(
            decode_in(&[b"\xEF", b"data: a\n\ndata: b\n\n"], 100).unwrap(),
            ["b"]
        );
        assert_eq!(
            decode_in(&[b"\xEF\xBB"], 100).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn multi_line_data_and_unterminated_tail() {
        let mut dec = SseDecoder::new();
        let mut got = dec.push(b"data: one\ndata: two\n\ndata:three").unwrap();
        got.extend(dec.finish().unwrap());
        assert_eq!(got, vec!["one\ntwo".to_owned(), "three".to_owned()]);
    }

    #[test]
    fn a_line_longer_than_the_limit_fails_and_stays_failed() {
        let mut dec = SseDecoder::with_limit(16);
        assert_eq!(dec.push(b"data: 0123456789").unwrap(), Vec::<String>::new());
        assert_eq!(dec.push(b"a"), Err(SseTooLarge { limit: 16 }));
        assert_eq!(dec.push(b"\n\n"), Err(SseTooLarge { limit: 16 }));
        assert_eq!(dec.finish(), Err(SseTooLarge { limit: 16 }));
        // A line exactly at the limit passes.
        assert_eq!(
            decode_in(&[b"data: 0123456789", b"\n\n"], 16).unwrap(),
            ["0123456789"]
        );
        // A long line inside one push is caught too.
        assert!(decode_in(&[b"data: 01234567890123456789\n\n"], 16).is_err());
    }

    #[test]
    fn an_event_longer_than_the_limit_fails_even_with_short_lines() {
        let lines = "data: 0123456789\n".repeat(3);
        // 3 × 10 bytes and 2 joining newlines: 32.
        assert!(decode_in(&[lines.as_bytes()], 31).is_err());
        assert_eq!(
            decode_in(&[lines.as_bytes()], 32).unwrap(),
            ["0123456789\n0123456789\n0123456789"]
        );
        // Separate events each under the limit are fine.
        let events = "data: 0123456789\n\n".repeat(100);
        assert_eq!(decode_in(&[events.as_bytes()], 16).unwrap().len(), 100);
    }

    #[test]
    fn a_long_line_in_many_small_pushes_is_linear() {
        // 4 MiB in 64-byte pushes would take minutes if every push
        // rescanned the buffer from its start; this finishes at once. No timing is asserted: a
        // quadratic decoder simply never finishes the test suite.
        let mut dec = SseDecoder::with_limit(8 << 20);
        dec.push(b"data: ").unwrap();
        let chunk = [b'x'; 64];
        for _ in 0..(4 << 20) / 64 {
            assert!(dec.push(&chunk).unwrap().is_empty());
        }
        let got = dec.push(b"\n\n").unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), 4 << 20);
    }
}
