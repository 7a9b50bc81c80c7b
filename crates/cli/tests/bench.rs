//! `opencouch bench turns` (issue 16, item 2): the binary runs real turns
//! through the runtime against the fake OpenAI-compatible server, counts
//! them, reports sane figures, and refuses a run whose hybrid turns fell
//! back to deterministic replies. No test asserts on speed.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use opencouch_testkit::{Endpoint, FakeOpenAi, Match, Reply, canned};
use serde_json::{Value, json};

const REPLY: &str = "That sounds like a lot to carry. What feels heaviest right now?";
/// The therapeutic specialist's one tool (`opencouch_prompts::RESPONSE_SKILL_TOOL`).
const SKILL_TOOL: &str = "load_therapeutic_response_skill";

/// The binary with a clean environment pointed at `fake`.
fn bench(home: &Path, fake: &FakeOpenAi) -> Command {
    let mut cmd = common::clean(home);
    cmd.env("OPENCOUCH_NO_MODEL_HINT", "1")
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("OPENAI_API_KEY", "sk-fake")
        .env("OPENAI_MODEL", "fake-model");
    cmd
}

/// Runs `cmd` off the async runtime (the fake server answers on it).
async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The fake answers like the Python peer's server: gate level 0, triage
/// therapeutic, the specialist calls its one tool once, then replies.
fn script_like_the_peer(fake: &FakeOpenAi) {
    canned::script_calm_model(fake, REPLY);
    fake.always_when(
        Match::tool_offered(SKILL_TOOL).and(Match::last_role("tool").negate()),
        Reply::tool_call(
            SKILL_TOOL,
            json!({"style": "supportive", "approach": "cbt"}),
        ),
    );
}

fn number(report: &Value, key: &str) -> f64 {
    let v = report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number: {report}"));
    assert!(v.is_finite(), "{key} = {v}");
    v
}

/// The figures every run reports, checked for sanity (not speed).
fn check_figures(report: &Value, turns: u64) {
    assert_eq!(report["turns"], turns, "{report}");
    assert!(number(report, "turns_per_s") > 0.0);
    assert!(number(report, "wall_s") > 0.0);
    let p50 = number(report, "wall_ms_p50");
    let p90 = number(report, "wall_ms_p90");
    let p99 = number(report, "wall_ms_p99");
    let max = number(report, "wall_ms_max");
    assert!(
        0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
        "{report}"
    );
    assert!(number(report, "wall_ms_mean") > 0.0);
    let cpu = number(report, "cpu_ms_per_turn");
    let user = number(report, "cpu_user_ms_per_turn");
    let sys = number(report, "cpu_sys_ms_per_turn");
    assert!(cpu >= 0.0 && user >= 0.0 && sys >= 0.0);
    assert!((cpu - user - sys).abs() < 1e-6, "{report}");
    assert!(number(report, "peak_rss_mib") > 1.0, "{report}");
}

fn parse(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_incognito_makes_four_model_requests_per_turn() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeOpenAi::start().await;
    script_like_the_peer(&fake);
    let (turns, warmup) = (20_u64, 2_u64);
    let mut cmd = bench(home.path(), &fake);
    cmd.args(["--mode", "hybrid", "bench", "turns", "--turns", "20"])
        .args([
            "--concurrency",
            "4",
            "--warmup",
            "2",
            "--semantic",
            "off",
            "--json",
        ]);
    let report = parse(&output(cmd).await);
    check_figures(&report, turns);
    assert_eq!(report["mode"], "hybrid");
    assert_eq!(report["memory_mode"], "incognito");
    assert_eq!(report["store"], "memory");
    assert_eq!(report["concurrency"], 4);
    assert_eq!(report["warmup_turns"], warmup);
    assert_eq!(report["semantic_signal"], false);
    assert_eq!(report["model"], "fake-model");

    // Every turn (warm-up included) asked the model four times: the crisis
    // gate, triage, and the reply with one tool round (a call, then text).
    let all = turns + warmup;
    let chat = fake.requests_to(Endpoint::ChatCompletions);
    let count = |m: Match| chat.iter().filter(|r| m.matches(r)).count() as u64;
    assert_eq!(count(canned::gate_request()), all, "gate requests");
    assert_eq!(count(canned::triage_request()), all, "triage requests");
    let tool_round = Match::tool_offered(SKILL_TOOL).and(Match::last_role("tool").negate());
    assert_eq!(
        count(tool_round),
        all,
        "reply requests answered by a tool call"
    );
    assert_eq!(
        count(Match::last_role("tool")),
        all,
        "reply requests after the tool result"
    );
    assert_eq!(chat.len() as u64, 4 * all, "model requests per turn");
    // Incognito: no memory extraction, no embeddings.
    assert_eq!(count(canned::extraction_request()), 0);
    assert!(fake.requests_to(Endpoint::Embeddings).is_empty());

    // The eight user messages rotate (the reply requests end with the raw
    // message; the gate's wraps the conversation).
    let users: std::collections::BTreeSet<String> = chat
        .iter()
        .filter(|r| Match::last_role("tool").matches(r))
        .filter_map(|r| r.last_user_message())
        .collect();
    assert_eq!(users.len(), 8, "eight rotating user messages: {users:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hybrid_turn_answered_by_a_fallback_fails_the_run() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeOpenAi::start().await;
    // The gate and triage answer; the reply fails (HTTP 500, retried once),
    // so the deterministic responder answers instead.
    fake.always_when(canned::gate_request(), canned::gate_reply(0));
    fake.always_when(
        canned::triage_request(),
        canned::triage_reply("therapeutic"),
    );
    fake.set_default(Reply::server_error());
    let mut cmd = bench(home.path(), &fake);
    cmd.args(["--mode", "hybrid", "bench", "turns", "--turns", "3"])
        .args(["--warmup", "0", "--semantic", "off", "--json"]);
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a fallback turn must fail the run");
    assert!(out.stdout.is_empty(), "no report for a void run");
    assert!(
        stderr.contains("turn 1 of conversation 0")
            && stderr.contains("fell back to the deterministic responder"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_error_names_its_code() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeOpenAi::start().await;
    // A message longer than the limit fails validation: every turn errors.
    let mut cmd = bench(home.path(), &fake);
    cmd.env("OPENCOUCH_MAX_MESSAGE_CHARS", "10")
        .args(["--mode", "deterministic", "bench", "turns", "--turns", "2"])
        .args(["--warmup", "0", "--semantic", "off"]);
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("error code `message_too_long`"), "{stderr}");
    assert!(
        fake.requests().is_empty(),
        "deterministic mode asks no model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deterministic_on_sqlite_commits_every_turn() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let mut cmd = common::opencouch(home.path(), &data);
    cmd.args(["bench", "turns", "--turns", "20", "--concurrency", "4"])
        .args([
            "--warmup",
            "3",
            "--store",
            "sqlite",
            "--semantic",
            "off",
            "--json",
        ]);
    let report = parse(&output(cmd).await);
    check_figures(&report, 20);
    assert_eq!(report["mode"], "deterministic");
    assert_eq!(
        report["memory_mode"], "persistent",
        "sqlite implies persistent"
    );
    assert_eq!(report["store"], "sqlite");
    assert_eq!(report["model"], Value::Null);

    // The turns are in the SQLite file under --data-dir: four conversations
    // of five turns each, plus the warm-up thread.
    let (backend, stores) = common::open(&data).await;
    let mut threads = stores.threads.list_threads(100).await.unwrap();
    backend.close().await;
    threads.sort_by(|a, b| a.thread_id.cmp(&b.thread_id));
    let counts: Vec<u64> = threads.iter().map(|t| t.turn_count).collect();
    assert_eq!(counts, [5, 5, 5, 5, 3], "{threads:?}");
    assert!(threads.iter().all(|t| t.thread_id.starts_with("bench-")));
    assert!(threads[4].thread_id.ends_with("-warmup"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incognito_on_a_durable_store_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let mut cmd = common::opencouch(home.path(), &data);
    cmd.args([
        "bench",
        "turns",
        "--store",
        "sqlite",
        "--memory-mode",
        "incognito",
    ]);
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("incognito keeps nothing"), "{stderr}");
}
