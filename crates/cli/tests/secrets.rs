//! Secrets never reach the terminal (issue 31, item 4): `opencouch config`,
//! start-up errors and logs, with a sentinel password in the database URL
//! (given by environment and by flag), the API key and the base URL.
#![allow(clippy::unwrap_used)]

mod common;

use common::{opencouch, run};

const SENTINEL: &str = "Sentinel7Pw";

fn assert_hidden(label: &str, text: &str) {
    let lower = text.to_ascii_lowercase();
    assert!(
        !lower.contains(&SENTINEL.to_ascii_lowercase()) && !lower.contains("sentinel7"),
        "{label} shows the secret:\n{text}"
    );
}

#[test]
fn config_output_masks_every_secret() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let db = format!(
        "postgres://user:se@cret{SENTINEL}@db.example:5432/oc?password={SENTINEL}&sslmode=require"
    );
    let base = format!("https://u:{SENTINEL}@proxy.example/v1?api-key={SENTINEL}");
    let key = format!("sk-{SENTINEL}-abcd");
    let bot_token = format!("123456:{SENTINEL}-bot");
    let hook_secret = format!("{SENTINEL}_hook");
    let by_env = run(opencouch(home.path(), &data)
        .env("OPENCOUCH_DATABASE_URL", &db)
        .env("OPENAI_BASE_URL", &base)
        .env("OPENAI_API_KEY", &key)
        .env("OPENCOUCH_TELEGRAM_BOT_TOKEN", &bot_token)
        .env(
            "OPENCOUCH_TELEGRAM_WEBHOOK_URL",
            "https://bot.example/telegram/webhook",
        )
        .env("OPENCOUCH_TELEGRAM_WEBHOOK_SECRET", &hook_secret)
        .env("OPENCOUCH_LOG", "trace")
        .arg("config"));
    let by_flag = run(opencouch(home.path(), &data)
        .env("OPENCOUCH_LOG", "trace")
        .args(["--database-url", &db, "config"]));
    for (label, (out, stdout, stderr)) in [("environment", by_env), ("flag", by_flag)] {
        assert!(out.status.success(), "{label}: {stderr}");
        assert!(
            stdout
                .contains("postgres://user:****@db.example:5432/oc?password=****&sslmode=require"),
            "{label}: {stdout}"
        );
        assert_hidden(label, &stdout);
        assert_hidden(label, &stderr);
    }
}

#[test]
fn start_up_errors_and_logs_do_not_show_the_database_password() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    // A socket directory with no server: the connection fails at once.
    let socket_dir = home.path().join("no-server").display().to_string();
    let socket_dir = socket_dir.replace('/', "%2F");
    let urls = [
        // Not accepted by the driver (bad port).
        format!("postgres://user:se@cret{SENTINEL}@db.example:port/oc?password={SENTINEL}"),
        // Accepted, but nothing listens.
        format!("postgres://user:se@cret{SENTINEL}@{socket_dir}/oc?password={SENTINEL}"),
        // Refused by the settings check.
        format!("mysql://user:{SENTINEL}@db.example/oc"),
    ];
    for url in &urls {
        for args in [
            vec!["--database-url", url.as_str(), "threads", "list"],
            vec!["--database-url", url.as_str(), "db", "migrate"],
        ] {
            let (out, stdout, stderr) = run(opencouch(home.path(), &data)
                .env("OPENCOUCH_LOG", "trace")
                .args(&args));
            assert!(!out.status.success(), "{args:?} succeeded: {stdout}");
            assert!(!stderr.trim().is_empty(), "{args:?}: no error message");
            assert_hidden(&format!("{args:?} stdout"), &stdout);
            assert_hidden(&format!("{args:?} stderr"), &stderr);
        }
        let (out, stdout, stderr) = run(opencouch(home.path(), &data)
            .env("OPENCOUCH_DATABASE_URL", url)
            .env("OPENCOUCH_LOG", "trace")
            .args(["threads", "list"]));
        assert!(!out.status.success(), "{url}");
        assert_hidden("environment stdout", &stdout);
        assert_hidden("environment stderr", &stderr);
    }
}
