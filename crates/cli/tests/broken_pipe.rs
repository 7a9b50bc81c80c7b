//! Large output ends quietly when the reader goes away (issue 14, item
//! 10): `opencouch threads show ID | head` used to panic.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use common::{open, opencouch, seed};

/// Reads one line of the child's stdout, closes the pipe (as `head -1`
/// does) and waits for the child.
fn read_one_line_then_close(mut child: Child) -> (std::process::ExitStatus, String, String) {
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    drop(reader);
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        first,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `opencouch threads show ID | head` used to panic ("failed printing to
/// stdout: Broken pipe", exit 101).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_output_ends_quietly_on_a_closed_pipe() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let (backend, stores) = open(&data).await;
    seed(&stores, "big", 4_000, 200, 0).await;
    for i in 0..1_500 {
        seed(
            &stores,
            &format!("thread-{i:04}-{}", "y".repeat(80)),
            2,
            1,
            i,
        )
        .await;
    }
    backend.close().await;

    let cases: [&[&str]; 4] = [
        &["threads", "show", "big", "--limit", "4000"],
        &["threads", "list", "--limit", "5000"],
        &["threads", "show", "big", "--all"],
        &["threads", "list", "--all"],
    ];
    for args in cases {
        let child = opencouch(home.path(), &data)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, first, stderr) = read_one_line_then_close(child);
        assert!(!first.is_empty(), "{args:?}: printed something");
        assert!(
            status.success(),
            "{args:?}: exit {status}, stderr: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}
