//! End-to-end tests of the OpenAI-compatible client against the fake server (loopback only).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use opencouch_core::ModelTier;
use opencouch_llm::{
    ChatMessage, ChatModel, ChatRequest, EmbeddingProvider, EmbeddingsConfig, FinishReason,
    LlmConfig, LlmError, OpenAiCompatClient, OpenAiEmbeddings, StreamDelta, TierModels, ToolChoice,
    ToolSpec, collect_stream, structured, structured_with,
};
use opencouch_testkit::{Endpoint, FakeOpenAi, Match, Reply, hash_embedding};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

fn config(fake: &FakeOpenAi) -> LlmConfig {
    LlmConfig {
        base_url: fake.base_url(),
        api_key: Some("sk-test-key".into()),
        require_key: true,
        models: TierModels {
            control: "ctl-model".into(),
            fast: "fast-model".into(),
            quality: "quality-model".into(),
        },
        timeout: Duration::from_secs(3),
        max_attempts: 2,
        backoff_base: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..LlmConfig::default()
    }
}

fn client(fake: &FakeOpenAi) -> OpenAiCompatClient {
    OpenAiCompatClient::new(config(fake)).expect("valid config")
}

fn user(tier: ModelTier, text: &str) -> ChatRequest {
    ChatRequest::new(
        tier,
        vec![ChatMessage::system("be kind"), ChatMessage::user(text)],
    )
}

fn crisis_tool() -> ToolSpec {
    ToolSpec::new(
        "lookup_crisis_resources",
        "Verified crisis resources for a country",
        json!({"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"], "additionalProperties": false}),
    )
}

#[tokio::test]
async fn tool_call_round_trip() {
    let fake = FakeOpenAi::start().await;
    fake.push_when(
        Match::has_tools().and(Match::last_role("user")),
        Reply::tool_call("lookup_crisis_resources", json!({"country": "US"})),
    );
    fake.push_when(
        Match::last_role("tool"),
        Reply::text("You can call or text 988."),
    );
    let model: Arc<dyn ChatModel> = Arc::new(client(&fake));

    let mut messages = vec![
        ChatMessage::system("crisis"),
        ChatMessage::user("I have the pills here"),
    ];
    let req = ChatRequest::new(ModelTier::Quality, messages.clone())
        .with_tools(vec![crisis_tool()])
        .with_tool_choice(ToolChoice::Required);
    let first = model.complete(req).await.unwrap();
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(first.text, None);
    assert_eq!(first.tool_calls.len(), 1);
    let call = first.tool_calls[0].clone();
    assert_eq!(call.name, "lookup_crisis_resources");
    assert_eq!(call.arguments_json().unwrap(), json!({"country": "US"}));

    messages.push(first.to_assistant_message());
    messages.push(ChatMessage::tool(
        call.id.clone(),
        r#"{"resources":[{"name":"988"}]}"#,
    ));
    let second = model
        .complete(ChatRequest::new(ModelTier::Quality, messages).with_tools(vec![crisis_tool()]))
        .await
        .unwrap();
    assert_eq!(second.text.as_deref(), Some("You can call or text 988."));
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].model(), Some("quality-model"));
    assert_eq!(reqs[0].body["tool_choice"], "required");
    assert_eq!(
        reqs[0].body["tools"][0]["function"]["name"],
        "lookup_crisis_resources"
    );
    let msgs = reqs[1].messages();
    assert_eq!(msgs[2]["role"], "assistant");
    assert_eq!(msgs[2]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], call.id.as_str());
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-test-key"));
}

#[tokio::test]
async fn streamed_text_is_assembled_exactly() {
    let fake = FakeOpenAi::start().await;
    let text = "Let's take one slow breath together — in… and out. Ça va? 🌿 Take your time.";
    fake.push(Reply::text(text));
    let stream = client(&fake)
        .stream(user(ModelTier::Fast, "hi"))
        .await
        .unwrap();
    let items: Vec<StreamDelta> = stream.map(|d| d.unwrap()).collect().await;
    let pieces: Vec<&str> = items
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        pieces.len() > 3,
        "expected several text deltas, got {}",
        pieces.len()
    );
    assert_eq!(pieces.concat(), text);
    match items.last().unwrap() {
        StreamDelta::Finished {
            finish_reason,
            usage,
            model,
        } => {
            assert_eq!(finish_reason, &Some(FinishReason::Stop));
            assert!(usage.unwrap().total_tokens.unwrap() > 0);
            assert_eq!(model, "fast-model");
        }
        other => panic!("last item must be Finished, got {other:?}"),
    }
    let req = &fake.requests()[0];
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn streamed_tool_call_deltas_are_assembled() {
    let fake = FakeOpenAi::start().await;
    let a =
        json!({"country": "GB", "context": "a fairly long argument so it is split in fragments"});
    let b = json!({"query": "sleep"});
    fake.push(
        Reply::tool_calls(vec![
            ("lookup_crisis_resources", a.clone()),
            ("recall_memories", b.clone()),
        ])
        .with_text("One moment."),
    );
    let resp = collect_stream(
        client(&fake)
            .stream(user(ModelTier::Control, "x"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.text.as_deref(), Some("One moment."));
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
    let got: Vec<(String, Value)> = resp
        .tool_calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments_json().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("lookup_crisis_resources".to_owned(), a),
            ("recall_memories".to_owned(), b)
        ]
    );
    assert!(resp.tool_calls.iter().all(|c| c.id.starts_with("call_")));
    assert_ne!(resp.tool_calls[0].id, resp.tool_calls[1].id);
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct TriageDecision {
    route: String,
    confidence: f32,
    clarification_question: Option<String>,
}

#[tokio::test]
async fn structured_output_valid_repaired_and_failing() {
    let valid = json!({"route": "therapeutic", "confidence": 0.9, "clarification_question": null});
    let want = TriageDecision {
        route: "therapeutic".into(),
        confidence: 0.9,
        clarification_question: None,
    };

    // Valid on the first attempt; strict json_schema format is sent.
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::json(valid.clone()));
    let model = client(&fake);
    let got: TriageDecision = structured(&model, ModelTier::Control, "triage", "hello")
        .await
        .unwrap();
    assert_eq!(got, want);
    let body = &fake.requests()[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "TriageDecision"
    );
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["additionalProperties"],
        false
    );
    assert_eq!(body["model"], "ctl-model");

    // Invalid cases then a valid reply: one repair each.
    let invalid_replies = vec![
        ("not json", Reply::text("I think the route is therapeutic.")),
        (
            "schema violation",
            Reply::json(json!({"route": "therapeutic"})),
        ),
        (
            "wrong type",
            Reply::json(json!({"route": 3, "confidence": 0.9, "clarification_question": null})),
        ),
    ];
    for (label, bad) in invalid_replies {
        let fake = FakeOpenAi::start().await;
        fake.push(bad);
        fake.push(Reply::text(format!("```json\n{valid}\n```")));
        let model: Arc<dyn ChatModel> = Arc::new(client(&fake));
        let out = structured_with::<TriageDecision, dyn ChatModel>(
            &*model,
            ModelTier::Control,
            vec![ChatMessage::system("triage"), ChatMessage::user("hello")],
        )
        .await
        .unwrap();
        assert_eq!(out.value, want, "{label}");
        assert_eq!(out.attempts, 2, "{label}");
        assert_eq!(fake.request_count(), 2, "{label}");
        let repair = fake.requests()[1].last_user_message().unwrap();
        assert!(repair.contains("could not be used"), "{label}: {repair}");
    }

    // Invalid twice: typed error, exactly two requests.
    let fake = FakeOpenAi::start().await;
    fake.always_when(Match::any(), Reply::json(json!({"unexpected": true})));
    let err = structured::<TriageDecision, _>(&client(&fake), ModelTier::Control, "triage", "hi")
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::InvalidStructuredOutput { attempts: 2, .. }),
        "{err:?}"
    );
    assert!(
        !err.to_string().contains("unexpected"),
        "error must not echo model output: {err}"
    );
    assert_eq!(fake.request_count(), 2);

    // Transport errors are not "repaired".
    let fake = FakeOpenAi::start().await;
    fake.always_when(Match::any(), Reply::status(401));
    let err = structured::<TriageDecision, _>(&client(&fake), ModelTier::Control, "t", "u")
        .await
        .unwrap_err();
    assert_eq!(err, LlmError::Http { status: 401 });
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn retry_policy_table() {
    struct Case {
        label: &'static str,
        replies: Vec<Reply>,
        ok: bool,
        err: Option<LlmError>,
        requests: usize,
    }
    let cases = vec![
        Case {
            label: "500 then ok",
            replies: vec![Reply::server_error()],
            ok: true,
            err: None,
            requests: 2,
        },
        Case {
            label: "429 then ok",
            replies: vec![Reply::rate_limited(0)],
            ok: true,
            err: None,
            requests: 2,
        },
        Case {
            label: "400 is not retried",
            replies: vec![Reply::status(400)],
            ok: false,
            err: Some(LlmError::Http { status: 400 }),
            requests: 1,
        },
        Case {
            label: "404 is not retried",
            replies: vec![Reply::status(404)],
            ok: false,
            err: Some(LlmError::Http { status: 404 }),
            requests: 1,
        },
        Case {
            label: "503 twice gives up after 2 attempts",
            replies: vec![Reply::status(503), Reply::status(503)],
            ok: false,
            err: Some(LlmError::Http { status: 503 }),
            requests: 2,
        },
        Case {
            label: "429 twice is RateLimited",
            replies: vec![Reply::rate_limited(0), Reply::rate_limited(0)],
            ok: false,
            err: Some(LlmError::RateLimited {
                retry_after: Some(Duration::ZERO),
            }),
            requests: 2,
        },
        Case {
            label: "malformed body is not retried",
            replies: vec![Reply::malformed()],
            ok: false,
            err: None,
            requests: 1,
        },
    ];
    for case in cases {
        let fake = FakeOpenAi::start().await;
        for r in case.replies {
            fake.push(r);
        }
        let result = client(&fake).complete(user(ModelTier::Fast, "x")).await;
        assert_eq!(result.is_ok(), case.ok, "{}: {result:?}", case.label);
        if let Some(err) = case.err {
            assert_eq!(result.as_ref().unwrap_err(), &err, "{}", case.label);
        }
        if case.label.starts_with("malformed") {
            assert!(
                matches!(result, Err(LlmError::BadResponse { .. })),
                "{}",
                case.label
            );
        }
        assert_eq!(fake.request_count(), case.requests, "{}", case.label);
    }
}

#[tokio::test]
async fn retry_after_is_honoured_but_capped() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::rate_limited(30));
    let cfg = LlmConfig {
        max_backoff: Duration::from_millis(300),
        ..config(&fake)
    };
    let started = Instant::now();
    let resp = OpenAiCompatClient::new(cfg)
        .unwrap()
        .complete(user(ModelTier::Fast, "x"))
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(resp.text.as_deref(), Some("fake reply"));
    assert!(elapsed >= Duration::from_millis(300), "waited {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "cap ignored: {elapsed:?}");
}

#[tokio::test]
async fn stream_setup_is_retried_too() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::server_error());
    fake.push(Reply::text("streamed after retry"));
    let resp = collect_stream(
        client(&fake)
            .stream(user(ModelTier::Fast, "x"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.text.as_deref(), Some("streamed after retry"));
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn hanging_server_times_out_quickly_without_retry() {
    let fake = FakeOpenAi::start().await;
    fake.always_when(Match::any(), Reply::hang(Duration::from_secs(20)));
    let cfg = LlmConfig {
        timeout: Duration::from_millis(200),
        ..config(&fake)
    };
    let model = OpenAiCompatClient::new(cfg).unwrap();
    let started = Instant::now();
    let err = model
        .complete(user(ModelTier::Fast, "x"))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(
        err,
        LlmError::Timeout {
            after: Duration::from_millis(200)
        }
    );
    assert!(err.is_unavailable());
    assert!(
        elapsed >= Duration::from_millis(190) && elapsed < Duration::from_millis(1500),
        "{elapsed:?}"
    );
    assert_eq!(fake.request_count(), 1);

    let started = Instant::now();
    let err = model
        .stream(user(ModelTier::Fast, "x"))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, LlmError::Timeout { .. }));
    assert!(started.elapsed() < Duration::from_millis(1500));
}

#[tokio::test]
async fn stalled_stream_times_out_between_chunks() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::text("slow chunks here").with_chunk_delay(Duration::from_millis(400)));
    let cfg = LlmConfig {
        timeout: Duration::from_millis(150),
        ..config(&fake)
    };
    let stream = OpenAiCompatClient::new(cfg)
        .unwrap()
        .stream(user(ModelTier::Fast, "x"))
        .await
        .unwrap();
    let err = collect_stream(stream).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn missing_key_fails_without_any_request() {
    let fake = FakeOpenAi::start().await;
    let cfg = LlmConfig {
        api_key: None,
        ..config(&fake)
    };
    let model = OpenAiCompatClient::new(cfg).unwrap();
    assert_eq!(
        model
            .complete(user(ModelTier::Control, "x"))
            .await
            .unwrap_err(),
        LlmError::MissingApiKey
    );
    assert_eq!(
        model
            .stream(user(ModelTier::Control, "x"))
            .await
            .err()
            .unwrap(),
        LlmError::MissingApiKey
    );
    let blank = OpenAiCompatClient::new(LlmConfig {
        api_key: Some("  ".into()),
        ..config(&fake)
    })
    .unwrap();
    assert_eq!(
        blank
            .complete(user(ModelTier::Control, "x"))
            .await
            .unwrap_err(),
        LlmError::MissingApiKey
    );
    let emb = OpenAiEmbeddings::new(EmbeddingsConfig {
        base_url: fake.base_url(),
        api_key: None,
        require_key: true,
        ..EmbeddingsConfig::default()
    })
    .unwrap();
    assert_eq!(
        emb.embed(&["x".to_owned()]).await.unwrap_err(),
        LlmError::MissingApiKey
    );
    let err = structured::<TriageDecision, _>(&model, ModelTier::Control, "s", "u")
        .await
        .unwrap_err();
    assert!(err.is_unavailable());
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn local_server_needs_no_key_and_gets_no_auth_header() {
    let fake = FakeOpenAi::start().await;
    let cfg = LlmConfig {
        base_url: fake.base_url(),
        ..LlmConfig::local("http://unused", "llama3.2")
    };
    let model = OpenAiCompatClient::new(cfg).unwrap();
    let resp = model
        .complete(user(ModelTier::Quality, "x").with_max_tokens(64))
        .await
        .unwrap();
    assert_eq!(resp.text.as_deref(), Some("fake reply"));
    let req = &fake.requests()[0];
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.model(), Some("llama3.2"));
    assert_eq!(req.body["max_tokens"], 64);
}

#[tokio::test]
async fn lenient_parsing_of_non_standard_servers() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::raw_json(
        200,
        json!({"choices": [{"message": {"content": "plain"}, "finish_reason": ""}], "usage": {}}),
    ));
    fake.push(Reply::raw_json(
        200,
        json!({"object": "chat.completion", "model": "srv", "x_extra": {"a": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {}}}),
    ));
    fake.push(Reply::raw_json(
        200,
        json!({"choices": [{"message": {"content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}, "finish_reason": "weird_reason"}]}),
    ));
    // An SSE stream without `[DONE]` that still reports a finish reason.
    fake.push(Reply::raw(
        200,
        "text/event-stream",
        "data: {\"choices\":[{\"delta\":{\"content\":\"no \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"done marker\"},\"finish_reason\":\"stop\"}]}\n\n",
    ));
    let model = client(&fake);
    let r = model.complete(user(ModelTier::Fast, "x")).await.unwrap();
    assert_eq!(
        (r.text.as_deref(), r.finish_reason, r.usage),
        (Some("plain"), None, None)
    );
    assert_eq!(r.model, "fast-model");
    let r = model.complete(user(ModelTier::Fast, "x")).await.unwrap();
    assert_eq!(r.text, None);
    assert_eq!(r.tool_calls[0].name, "f");
    assert_eq!(r.usage.unwrap().total_tokens, Some(7));
    assert_eq!(r.model, "srv");
    let r = model.complete(user(ModelTier::Fast, "x")).await.unwrap();
    assert_eq!(r.text.as_deref(), Some("part one, part two"));
    assert_eq!(
        r.finish_reason,
        Some(FinishReason::Other("weird_reason".into()))
    );
    let r = collect_stream(model.stream(user(ModelTier::Fast, "x")).await.unwrap())
        .await
        .unwrap();
    assert_eq!(r.text.as_deref(), Some("no done marker"));
}

#[tokio::test]
async fn broken_streams_and_bodies_are_typed() {
    let fake = FakeOpenAi::start().await;
    fake.push(
        Reply::cut_stream("this stream is cut in the middle of the reply", 4)
            .with_chunk_delay(Duration::from_millis(2)),
    );
    fake.push(Reply::malformed());
    let model = client(&fake);
    let mut stream = model.stream(user(ModelTier::Fast, "x")).await.unwrap();
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item);
    }
    let err = last.unwrap().unwrap_err();
    assert!(matches!(err, LlmError::StreamInterrupted { .. }), "{err:?}");
    assert!(err.is_unavailable());
    let err = collect_stream(model.stream(user(ModelTier::Fast, "x")).await.unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err:?}");
}

#[tokio::test]
async fn unreachable_server_is_a_connection_error() {
    let fake = FakeOpenAi::start().await;
    let cfg = config(&fake);
    drop(fake);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = OpenAiCompatClient::new(cfg)
        .unwrap()
        .complete(user(ModelTier::Fast, "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Connection { .. }), "{err:?}");
    assert!(err.is_unavailable());
    assert!(!err.to_string().contains("sk-test-key"));
}

#[tokio::test]
async fn embeddings_client_batches_and_matches_the_fake() {
    let fake = FakeOpenAi::start().await;
    fake.set_embedding_dimension(32);
    let emb = OpenAiEmbeddings::new(EmbeddingsConfig {
        base_url: fake.base_url(),
        api_key: Some("k".into()),
        model: "embed-small".into(),
        batch_size: 2,
        backoff_base: Duration::from_millis(5),
        ..EmbeddingsConfig::default()
    })
    .unwrap();
    assert_eq!(emb.dimension(), None);
    assert!(emb.embed(&[]).await.unwrap().is_empty());
    let texts: Vec<String> = [
        "I can't sleep",
        "sleep is hard lately",
        "walks help me",
        "my sister called",
        "work stress",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let vecs = emb.embed(&texts).await.unwrap();
    assert_eq!(vecs.len(), 5);
    for (t, v) in texts.iter().zip(&vecs) {
        assert_eq!(v, &hash_embedding(t, 32));
    }
    assert_eq!(emb.dimension(), Some(32));
    assert_eq!(emb.model_id(), "embed-small");
    let reqs = fake.requests_to(Endpoint::Embeddings);
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[0].body["input"],
        json!(["I can't sleep", "sleep is hard lately"])
    );
    assert_eq!(reqs[0].model(), Some("embed-small"));

    // A configured dimension is sent and enforced; 500 is retried.
    let fake = FakeOpenAi::start().await;
    fake.push_rule(
        opencouch_testkit::Rule::new(Match::any(), Reply::server_error()).on(Endpoint::Embeddings),
    );
    let emb = OpenAiEmbeddings::new(EmbeddingsConfig {
        base_url: fake.base_url(),
        api_key: Some("k".into()),
        dimensions: Some(16),
        backoff_base: Duration::from_millis(5),
        ..EmbeddingsConfig::default()
    })
    .unwrap();
    let v = emb.embed(&["hello".to_owned()]).await.unwrap();
    assert_eq!(v[0].len(), 16);
    assert_eq!(fake.request_count(), 2);
    assert_eq!(fake.requests()[1].body["dimensions"], 16);
}

#[tokio::test]
async fn tricky_texts_survive_streaming_and_json_exactly() {
    let texts = [
        "",
        "a",
        "line one\nline two\r\n\nline four",
        "data: [DONE]\n\ndata: {\"fake\": true}",
        "emoji 🧘‍♀️ and combining é and CJK 你好",
        "quotes \" and backslashes \\ and tabs \t",
    ];
    let fake = FakeOpenAi::start().await;
    let model = client(&fake);
    for text in texts {
        fake.push(Reply::text(text));
        fake.push(Reply::text(text));
        let want = (!text.is_empty()).then(|| text.to_owned());
        let streamed = collect_stream(model.stream(user(ModelTier::Fast, "x")).await.unwrap())
            .await
            .unwrap();
        assert_eq!(streamed.text, want, "streamed {text:?}");
        let whole = model.complete(user(ModelTier::Fast, "x")).await.unwrap();
        assert_eq!(whole.text, want, "complete {text:?}");
    }
}

/// `probe_models` (doctor's reachability check): one GET of `/models` with
/// the key, no retry, the status as the server answered it.
#[tokio::test]
async fn probe_models_sends_one_get_with_the_key_and_returns_the_status() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let mut heads = Vec::new();
        // Two connections at most: a retry would show as a second head.
        for _ in 0..2 {
            let accepted =
                tokio::time::timeout(Duration::from_millis(500), listener.accept()).await;
            let Ok(Ok((mut sock, _))) = accepted else {
                break;
            };
            let mut buf = vec![0u8; 4096];
            let n = sock.read(&mut buf).await.expect("read");
            heads.push(String::from_utf8_lossy(&buf[..n]).to_lowercase());
            sock.write_all(
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await
            .expect("write");
        }
        heads
    });
    let client = OpenAiCompatClient::new(LlmConfig {
        base_url: format!("http://{addr}/v1"),
        api_key: Some("sk-probe-key".into()),
        ..LlmConfig::default()
    })
    .expect("valid config");
    let status = client
        .probe_models(Duration::from_secs(3))
        .await
        .expect("an answer");
    assert_eq!(status, 401);
    let heads = server.await.expect("server");
    assert_eq!(heads.len(), 1, "one request, no retry: {heads:?}");
    assert!(heads[0].starts_with("get /v1/models "), "{}", heads[0]);
    assert!(
        heads[0].contains("authorization: bearer sk-probe-key"),
        "the key is sent"
    );
}

#[tokio::test]
async fn probe_models_reports_a_refused_connection() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let client = OpenAiCompatClient::new(LlmConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        ..LlmConfig::default()
    })
    .expect("valid config");
    let err = client
        .probe_models(Duration::from_secs(3))
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, LlmError::Connection { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot connect"), "{err}");
}
