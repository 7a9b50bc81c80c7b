//! Tests of the fake OpenAI server through a real HTTP client on loopback.

use std::time::{Duration, Instant};

use opencouch_testkit::{
    DEFAULT_REPLY_TEXT, Endpoint, FakeOpenAi, Match, Reply, Rule, cosine, hash_embedding,
};
use serde_json::{Value, json};

fn chat_body(user: &str) -> Value {
    json!({"model": "m1", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": user}]})
}

async fn post(fake: &FakeOpenAi, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{}", fake.base_url(), path))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .expect("request to the fake server")
}

async fn chat_text(fake: &FakeOpenAi, body: &Value) -> String {
    let v: Value = post(fake, "/chat/completions", body)
        .await
        .json()
        .await
        .expect("JSON body");
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Data payloads of an SSE body.
fn sse_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn default_reply_is_a_real_chat_completion_and_request_is_recorded() {
    let fake = FakeOpenAi::start().await;
    let resp = post(&fake, "/chat/completions", &chat_body("hello")).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "m1");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], DEFAULT_REPLY_TEXT);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);

    assert_eq!(fake.request_count(), 1);
    let req = &fake.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(req.last_user_message().as_deref(), Some("hello"));
    assert_eq!(req.model(), Some("m1"));
}

#[tokio::test]
async fn rules_one_shot_fifo_sticky_and_default() {
    let fake = FakeOpenAi::start().await;
    fake.set_default(Reply::text("default"));
    fake.always_when(Match::model("special"), Reply::text("sticky"));
    fake.push_when(Match::last_user_contains("pills"), Reply::text("crisis"));
    fake.push(Reply::text("first"));
    fake.push(Reply::text("second"));
    let special = json!({"model": "special", "messages": [{"role": "user", "content": "x"}]});
    let cases: Vec<(Value, &str)> = vec![
        (chat_body("I have pills"), "crisis"),
        (chat_body("hi"), "first"),
        (special.clone(), "second"),
        (special.clone(), "sticky"),
        (special, "sticky"),
        (chat_body("I have pills"), "default"),
    ];
    for (i, (body, want)) in cases.into_iter().enumerate() {
        assert_eq!(chat_text(&fake, &body).await, want, "request {i}");
    }
    assert_eq!(fake.pending_rules(), 0);
    assert_eq!(fake.request_count(), 6);
}

#[tokio::test]
async fn matcher_table() {
    let fake = FakeOpenAi::start().await;
    let with_tools = json!({"model": "m", "messages": [{"role": "user", "content": "a"}],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]});
    let with_format = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
        "response_format": {"type": "json_object"}});
    let after_tool = json!({"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "c", "content": "{}"}]});
    let cases: Vec<(Match, Value, bool)> = vec![
        (Match::any(), chat_body("x"), true),
        (Match::has_tools(), with_tools.clone(), true),
        (Match::has_tools(), chat_body("x"), false),
        (Match::tool_offered("lookup"), with_tools.clone(), true),
        (Match::tool_offered("other"), with_tools, false),
        (Match::has_response_format(), with_format.clone(), true),
        (Match::last_user_contains("parts"), with_format, true),
        (Match::body_contains("\"system\""), chat_body("x"), true),
        (Match::last_role("tool"), after_tool, true),
        (Match::last_role("tool"), chat_body("x"), false),
        (
            Match::model("m1").and(Match::last_user_contains("y")),
            chat_body("y"),
            true,
        ),
        (
            Match::model("m1").and(Match::last_user_contains("y")),
            chat_body("z"),
            false,
        ),
        (Match::streaming().negate(), chat_body("x"), true),
    ];
    for (i, (matcher, body, hit)) in cases.into_iter().enumerate() {
        fake.clear_rules();
        fake.push_when(matcher, Reply::text("hit"));
        let got = chat_text(&fake, &body).await;
        assert_eq!(got == "hit", hit, "case {i}: got {got}");
    }
}

#[tokio::test]
async fn streamed_text_is_split_into_chunks_and_terminated() {
    let fake = FakeOpenAi::start().await;
    let text = "Breathe in slowly — and out. Ça va?";
    fake.push(Reply::text(text));
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = post(&fake, "/chat/completions", &body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect::<Vec<_>>()
        .join("");
    assert_eq!(joined, text);
    assert!(chunks.len() > 5, "text must arrive in several chunks");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")]);
    assert!(
        chunks.last().unwrap()["usage"]["total_tokens"]
            .as_u64()
            .is_some()
    );
}

#[tokio::test]
async fn streamed_tool_calls_are_split_by_index() {
    let fake = FakeOpenAi::start().await;
    let args_a = json!({"country": "US", "note": "a longer argument string"});
    let args_b = json!({"q": 1});
    fake.push(Reply::tool_calls(vec![
        ("lookup_crisis_resources", args_a.clone()),
        ("recall", args_b.clone()),
    ]));
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    let events = sse_events(
        &post(&fake, "/chat/completions", &body)
            .await
            .text()
            .await
            .unwrap(),
    );
    let mut names = vec![String::new(); 2];
    let mut ids = vec![String::new(); 2];
    let mut args = vec![String::new(); 2];
    let mut fragments = 0;
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if let Some(id) = tc["id"].as_str() {
                ids[i] = id.to_owned();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                names[i].push_str(n);
            }
            args[i].push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            fragments += 1;
        }
    }
    assert_eq!(names, ["lookup_crisis_resources", "recall"]);
    assert!(ids.iter().all(|id| id.starts_with("call_")) && ids[0] != ids[1]);
    assert_eq!(serde_json::from_str::<Value>(&args[0]).unwrap(), args_a);
    assert_eq!(serde_json::from_str::<Value>(&args[1]).unwrap(), args_b);
    assert!(
        fragments >= 6,
        "arguments must be split across chunks: {fragments}"
    );
}

#[tokio::test]
async fn non_streamed_tool_calls_and_json() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::tool_call("f", json!({"a": 1})).with_text("checking"));
    fake.push(Reply::json(json!({"route": "therapeutic"})));
    let v: Value = post(&fake, "/chat/completions", &chat_body("x"))
        .await
        .json()
        .await
        .unwrap();
    let msg = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(msg["content"], "checking");
    assert_eq!(msg["tool_calls"][0]["type"], "function");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "f");
    assert_eq!(msg["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    let text = chat_text(&fake, &chat_body("x")).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"route": "therapeutic"})
    );
}

#[tokio::test]
async fn faults() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::server_error());
    fake.push(Reply::rate_limited(7));
    fake.push(Reply::status(400));
    fake.push(Reply::malformed());
    fake.push(Reply::raw_json(
        200,
        json!({"choices": [{"message": {"content": "x"}, "finish_reason": ""}], "usage": {}}),
    ));
    let r = post(&fake, "/chat/completions", &chat_body("x")).await;
    assert_eq!(r.status(), 500);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
    let r = post(&fake, "/chat/completions", &chat_body("x")).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(
        post(&fake, "/chat/completions", &chat_body("x"))
            .await
            .status(),
        400
    );
    let r = post(&fake, "/chat/completions", &chat_body("x")).await;
    assert_eq!(r.status(), 200);
    assert!(serde_json::from_str::<Value>(&r.text().await.unwrap()).is_err());
    let v: Value = post(&fake, "/chat/completions", &chat_body("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "");
}

#[tokio::test]
async fn hang_exceeds_client_timeout_and_latency_is_injected() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::hang(Duration::from_secs(30)));
    fake.push(Reply::text("slow").with_latency(Duration::from_millis(150)));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let url = format!("{}/chat/completions", fake.base_url());
    let started = Instant::now();
    let err = client
        .post(&url)
        .json(&chat_body("x"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert!(started.elapsed() < Duration::from_secs(2));
    let started = Instant::now();
    let v: Value = client
        .post(&url)
        .json(&chat_body("x"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "slow");
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn cut_stream_breaks_the_body() {
    let fake = FakeOpenAi::start().await;
    fake.push(
        Reply::cut_stream("this reply never finishes properly", 3)
            .with_chunk_delay(Duration::from_millis(5)),
    );
    fake.push(Reply::cut_stream("non streamed", 0));
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    let resp = post(&fake, "/chat/completions", &body).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.text().await.is_err(),
        "a cut stream must fail to read to the end"
    );
    let resp = post(&fake, "/chat/completions", &chat_body("x")).await;
    assert!(resp.text().await.is_err());
}

#[tokio::test]
async fn embeddings_default_scripted_and_faults() {
    let fake = FakeOpenAi::start().await;
    fake.set_embedding_dimension(128);
    let texts = [
        "I feel anxious about work",
        "anxious about my work",
        "bake bread with flour",
    ];
    let v: Value = post(&fake, "/embeddings", &json!({"model": "e", "input": texts}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    let vecs: Vec<Vec<f32>> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).unwrap())
        .collect();
    assert_eq!(vecs.len(), 3);
    assert_eq!(vecs[0], hash_embedding(texts[0], 128));
    assert!(cosine(&vecs[0], &vecs[1]) > cosine(&vecs[0], &vecs[2]));
    assert_eq!(v["data"][2]["index"], 2);

    let v: Value = post(
        &fake,
        "/embeddings",
        &json!({"model": "e", "input": "one", "dimensions": 8}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);

    fake.push_rule(
        Rule::new(Match::any(), Reply::embeddings(vec![vec![1.0, 0.0]])).on(Endpoint::Embeddings),
    );
    fake.push_rule(Rule::new(Match::any(), Reply::server_error()).on(Endpoint::Embeddings));
    let v: Value = post(&fake, "/embeddings", &json!({"model": "e", "input": ["a"]}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["embedding"], json!([1.0, 0.0]));
    assert_eq!(
        post(&fake, "/embeddings", &json!({"model": "e", "input": ["a"]}))
            .await
            .status(),
        500
    );
    // A chat rule is not consumed by embeddings requests.
    fake.push(Reply::text("chat only"));
    assert_eq!(
        post(&fake, "/embeddings", &json!({"model": "e", "input": ["a"]}))
            .await
            .status(),
        200
    );
    assert_eq!(fake.pending_rules(), 1);
    assert_eq!(fake.requests_to(Endpoint::Embeddings).len(), 5);
}

#[tokio::test]
async fn realtime_client_secret_and_unknown_paths() {
    let fake = FakeOpenAi::start().await;
    let session = json!({"type": "realtime", "model": "gpt-realtime", "audio": {"output": {"voice": "marin"}}});
    let v: Value = post(
        &fake,
        "/realtime/client_secrets",
        &json!({"session": session.clone()}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert!(v["value"].as_str().unwrap().starts_with("ek_"));
    assert!(v["expires_at"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["session"], session);
    let r = post(&fake, "/nope", &json!({})).await;
    assert_eq!(r.status(), 404);
    assert_eq!(fake.request_count(), 2);
    fake.clear_requests();
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn drop_shuts_the_server_down() {
    let fake = FakeOpenAi::start().await;
    let url = format!("{}/chat/completions", fake.base_url());
    drop(fake);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = reqwest::Client::new()
        .post(url)
        .json(&chat_body("x"))
        .send()
        .await;
    assert!(r.is_err());
}
