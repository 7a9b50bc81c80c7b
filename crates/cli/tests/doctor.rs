//! `opencouch doctor` (issue 27, item 5): every check is one line, ok /
//! warning / error, with the fix when not ok; the model endpoint gets one
//! cheap request bounded by a timeout.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{clean, run};
use opencouch_testkit::{FakeOpenAi, canned};
use serde_json::Value;

/// `opencouch doctor ARGS` in hybrid mode against `base_url`.
fn doctor(home: &Path, data: &Path, base_url: &str, args: &[&str]) -> (bool, String) {
    let mut cmd: Command = clean(home);
    cmd.env("OPENCOUCH_MODE", "hybrid")
        .env("OPENCOUCH_NO_MODEL_HINT", "1")
        .env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", "sk-fake")
        .env("OPENAI_MODEL", "fake-model")
        .arg("--data-dir")
        .arg(data)
        .arg("doctor")
        .args(args);
    let (out, stdout, stderr) = run(&mut cmd);
    (out.status.success(), format!("{stdout}{stderr}"))
}

fn checks(json: &str) -> Vec<Value> {
    let line = json.lines().next().unwrap();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["checks"].as_array().unwrap().clone()
}

fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_has_a_level_and_every_problem_a_fix() {
    let fake = FakeOpenAi::start().await;
    canned::script_calm_model(&fake, "ok");
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let (_, out) = doctor(home.path(), &data, &fake.base_url(), &["--json"]);
    let checks = checks(&out);
    for c in &checks {
        let level = c["level"].as_str().unwrap();
        assert!(matches!(level, "ok" | "warning" | "error"), "{c}");
        if level != "ok" {
            assert!(c["fix"].is_string(), "a {level} without its fix: {c}");
        }
    }
    let db = check(&checks, "database");
    assert_eq!(db["level"], "ok", "{db}");
    assert!(db["detail"].as_str().unwrap().contains("schema version"));
    let dir = check(&checks, "data directory");
    assert_eq!(dir["level"], "ok", "{dir}");
    assert!(dir["detail"].as_str().unwrap().contains("700"), "{dir}");
    let endpoint = check(&checks, "model endpoint");
    assert_eq!(endpoint["level"], "ok", "{endpoint}");
    assert!(
        endpoint["detail"]
            .as_str()
            .unwrap()
            .contains("answers (HTTP"),
        "{endpoint}"
    );
    // The one cheap request went to the model server.
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.ends_with("/models")),
        "no GET /models"
    );
    let crisis = check(&checks, "crisis directory");
    assert_eq!(crisis["level"], "ok", "{crisis}");
    let detail = crisis["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("recorded ")
            && detail.contains("resources")
            && detail.contains("countries"),
        "{detail}"
    );
    let embedding = check(&checks, "embedding model");
    let detail = embedding["detail"].as_str().unwrap();
    if embedding["level"] == "ok" && detail.starts_with("local") {
        assert!(detail.ends_with("present and loaded"), "{detail}");
    }

    // The text form: one line per check, the fix under a problem, and with
    // `--verbose` every setting with where it came from.
    let (_, text) = doctor(home.path(), &data, &fake.base_url(), &["--verbose"]);
    for want in [
        "ok       database",
        "ok       model endpoint",
        "ok       crisis directory",
        "configuration",
        "[environment (OPENAI_BASE_URL)]",
        "[flag]",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}

#[test]
fn an_endpoint_that_refuses_is_an_error_with_its_fix() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    // A port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let (ok, out) = doctor(home.path(), &data, &url, &[]);
    assert!(!ok, "an error fails the command:\n{out}");
    assert!(out.contains("error    model endpoint"), "{out}");
    assert!(out.contains("cannot connect"), "{out}");
    assert!(
        out.contains("fix: check OPENCOUCH_BASE_URL and that the model server runs"),
        "{out}"
    );
}

#[test]
fn an_endpoint_that_never_answers_is_cut_off_by_the_timeout() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    // Connections are accepted by the kernel and never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", silent.local_addr().unwrap());
    let (ok, out) = doctor(home.path(), &data, &url, &["--json"]);
    assert!(!ok, "{out}");
    let checks = checks(&out);
    let endpoint = check(&checks, "model endpoint");
    assert_eq!(endpoint["level"], "error", "{endpoint}");
    assert!(
        endpoint["detail"]
            .as_str()
            .unwrap()
            .contains("did not answer within 3 s"),
        "{endpoint}"
    );
    assert!(endpoint["fix"].is_string());
    drop(silent);
}

#[cfg(unix)]
#[test]
fn a_data_directory_others_can_read_is_a_warning_with_the_chmod() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, out) = doctor(home.path(), &data, "http://127.0.0.1:9/v1", &["--json"]);
    let checks = checks(&out);
    let dir = check(&checks, "data directory");
    assert_eq!(dir["level"], "warning", "{dir}");
    assert!(dir["detail"].as_str().unwrap().contains("755"), "{dir}");
    assert_eq!(
        dir["fix"].as_str().unwrap(),
        format!("chmod 700 '{}'", data.display())
    );
}
