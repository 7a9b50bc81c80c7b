//! Stream helpers: tool-call delta assembly and stream collection.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt};

use crate::{ChatResponse, LlmError, StreamDelta, ToolCall};

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles streamed tool-call deltas (`index`, `id`, `function.name`,
/// `function.arguments` fragments) into complete [`ToolCall`]s.
///
/// Lenient with servers that omit `index`: a delta without an index but with
/// a new id starts a new call; otherwise it continues the latest one.
#[derive(Debug, Default)]
pub struct ToolCallAssembler {
    calls: BTreeMap<u32, PartialCall>,
    last: Option<u32>,
}

impl ToolCallAssembler {
    /// An empty assembler.
    pub fn new() -> ToolCallAssembler {
        ToolCallAssembler::default()
    }

    /// Adds one delta.
    pub fn push(
        &mut self,
        index: Option<u32>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) {
        let index = match index {
            Some(i) => i,
            None => {
                let id = id.filter(|s| !s.is_empty());
                match (self.last, id) {
                    (Some(last), Some(id)) => {
                        let same = self
                            .calls
                            .get(&last)
                            .is_some_and(|c| c.id.is_empty() || c.id == id);
                        if same {
                            last
                        } else {
                            self.calls.keys().next_back().map_or(0, |k| k + 1)
                        }
                    }
                    (Some(last), None) => last,
                    (None, _) => 0,
                }
            }
        };
        self.last = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id.filter(|s| !s.is_empty())
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        if let Some(name) = name.filter(|s| !s.is_empty()) {
            if call.name.is_empty() {
                call.name = name.to_owned();
            } else if call.name != name {
                call.name.push_str(name);
            }
        }
        if let Some(args) = arguments {
            call.arguments.push_str(args);
        }
    }

    /// Whether no delta arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The assembled calls in index order. Calls without a name are dropped;
    /// calls without an id get `call_<index>`.
    pub fn finish(self) -> Vec<ToolCall> {
        self.calls
            .into_iter()
            .filter(|(_, c)| !c.name.is_empty())
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
            })
            .collect()
    }
}

/// Folds stream deltas into one [`ChatResponse`], one delta at a time, so a
/// caller can forward the text as it arrives ([`collect_stream`] is the
/// plain fold).
#[derive(Debug, Default)]
pub struct StreamCollector {
    text: String,
    resp: ChatResponse,
}

impl StreamCollector {
    /// An empty response.
    pub fn new() -> StreamCollector {
        StreamCollector::default()
    }

    /// Adds one delta; returns its text, if it carried any.
    pub fn push(&mut self, delta: StreamDelta) -> Option<String> {
        match delta {
            StreamDelta::Text(t) if t.is_empty() => None,
            StreamDelta::Text(t) => {
                self.text.push_str(&t);
                Some(t)
            }
            StreamDelta::ToolCall(call) => {
                self.resp.tool_calls.push(call);
                None
            }
            StreamDelta::Finished {
                finish_reason,
                usage,
                model,
            } => {
                self.resp.finish_reason = finish_reason;
                self.resp.usage = usage;
                self.resp.model = model;
                None
            }
        }
    }

    /// Whether any text arrived so far.
    pub fn has_text(&self) -> bool {
        !self.text.is_empty()
    }

    /// The collected response (`text` is `None` when no text arrived).
    pub fn finish(self) -> ChatResponse {
        let mut resp = self.resp;
        resp.text = (!self.text.is_empty()).then_some(self.text);
        resp
    }
}

/// Collects a delta stream into one [`ChatResponse`]; the first error ends collection.
pub async fn collect_stream<S>(stream: S) -> Result<ChatResponse, LlmError>
where
    S: Stream<Item = Result<StreamDelta, LlmError>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut collector = StreamCollector::new();
    while let Some(item) = stream.next().await {
        collector.push(item?);
    }
    Ok(collector.finish())
}

/// Turns a complete response into a delta stream (text in small pieces, then
/// tool calls, then `Finished`), for models that cannot stream natively.
pub fn response_to_deltas(resp: ChatResponse, piece_chars: usize) -> Vec<StreamDelta> {
    let mut out = Vec::new();
    if let Some(text) = resp.text {
        let chars: Vec<char> = text.chars().collect();
        out.extend(
            chars
                .chunks(piece_chars.max(1))
                .map(|c| StreamDelta::Text(c.iter().collect())),
        );
    }
    out.extend(resp.tool_calls.into_iter().map(StreamDelta::ToolCall));
    out.push(StreamDelta::Finished {
        finish_reason: resp.finish_reason,
        usage: resp.usage,
        model: resp.model,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Delta<'a> = (
        Option<u32>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );

    type Case<'a> = (&'a str, Vec<Delta<'a>>, Vec<(&'a str, &'a str, &'a str)>);

    #[test]
    fn assembles_table() {
        let cases: Vec<Case> = vec![
            (
                "openai style, two calls interleaved",
                vec![
                    (Some(0), Some("c1"), Some("a"), Some("")),
                    (Some(1), Some("c2"), Some("b"), Some("{\"y\"")),
                    (Some(0), None, None, Some("{\"x\":")),
                    (Some(0), None, None, Some("1}")),
                    (Some(1), None, None, Some(":2}")),
                ],
                vec![("c1", "a", "{\"x\":1}"), ("c2", "b", "{\"y\":2}")],
            ),
            (
                "no index, complete calls",
                vec![
                    (None, Some("k1"), Some("a"), Some("{}")),
                    (None, Some("k2"), Some("b"), Some("{}")),
                ],
                vec![("k1", "a", "{}"), ("k2", "b", "{}")],
            ),
            (
                "no index, fragments continue the latest call",
                vec![
                    (None, Some("k1"), Some("a"), Some("{\"q\"")),
                    (None, None, None, Some(":1}")),
                ],
                vec![("k1", "a", "{\"q\":1}")],
            ),
            (
                "missing id gets a synthetic one; repeated name is not doubled",
                vec![
                    (Some(3), None, Some("f"), Some("{")),
                    (Some(3), None, Some("f"), Some("}")),
                ],
                vec![("call_3", "f", "{}")],
            ),
            (
                "nameless call dropped",
                vec![(Some(0), Some("x"), None, Some("{}"))],
                vec![],
            ),
        ];
        for (label, deltas, want) in cases {
            let mut asm = ToolCallAssembler::new();
            for (i, id, name, args) in deltas {
                asm.push(i, id, name, args);
            }
            let got: Vec<(String, String, String)> = asm
                .finish()
                .into_iter()
                .map(|c| (c.id, c.name, c.arguments))
                .collect();
            let want: Vec<(String, String, String)> = want
                .into_iter()
                .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
                .collect();
            assert_eq!(got, want, "{label}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_fragmentation_reassembles(args in "[ -~]{0,60}", cuts in proptest::collection::vec(0usize..60, 0..8)) {
            let chars: Vec<char> = args.chars().collect();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(chars.len())).collect();
            points.push(0);
            points.push(chars.len());
            points.sort_unstable();
            points.dedup();
            let mut asm = ToolCallAssembler::new();
            asm.push(Some(0), Some("id"), Some("tool"), Some(""));
            for w in points.windows(2) {
                let frag: String = chars[w[0]..w[1]].iter().collect();
                asm.push(Some(0), None, None, Some(&frag));
            }
            let calls = asm.finish();
            proptest::prop_assert_eq!(calls.len(), 1);
            proptest::prop_assert_eq!(&calls[0].arguments, &args);
        }
    }

    #[tokio::test]
    async fn deltas_round_trip_through_collect() {
        let resp = ChatResponse {
            text: Some("héllo wörld, how are you?".into()),
            tool_calls: vec![ToolCall {
                id: "1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            finish_reason: Some(crate::FinishReason::ToolCalls),
            usage: None,
            model: "m".into(),
            refusal: None,
        };
        let deltas = response_to_deltas(resp.clone(), 3);
        let got = collect_stream(futures::stream::iter(deltas.into_iter().map(Ok)))
            .await
            .unwrap();
        assert_eq!(got, resp);
    }
}
