//! `opencouch threads list` / `threads show` page instead of truncating
//! silently (issue 14, item 3).
#![allow(clippy::unwrap_used)]

mod common;

use common::{ok, open, opencouch, run, seed};

fn indexes(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix('['))
        .map(|l| l.split(']').next().unwrap().parse().unwrap())
        .collect()
}

/// `threads show` printed the newest 50 entries and `threads list` the
/// newest 20 threads with no word about the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_list_and_show_page_instead_of_truncating() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let (backend, stores) = open(&data).await;
    seed(&stores, "long one", 120, 1, 0).await;
    for i in 0..25 {
        seed(&stores, &format!("alice:t{i:02}"), 2, 1, 10 + i).await;
    }
    seed(&stores, "bob:only", 2, 1, 100).await;
    backend.close().await;

    // show: the newest 50, and a hint naming the older page.
    let (stdout, stderr) = ok(opencouch(home.path(), &data).args(["threads", "show", "long one"]));
    assert_eq!(indexes(&stdout), (70..120).collect::<Vec<_>>());
    assert!(
        stderr.contains("Showing entries 70-119 of 120")
            && stderr.contains("opencouch threads show 'long one' --limit 50 --before 70"),
        "{stderr}"
    );
    let (stdout, stderr) = ok(opencouch(home.path(), &data).args([
        "threads", "show", "long one", "--limit", "50", "--before", "70",
    ]));
    assert_eq!(indexes(&stdout), (20..70).collect::<Vec<_>>());
    assert!(stderr.contains("--before 20"), "{stderr}");
    let (stdout, stderr) =
        ok(opencouch(home.path(), &data).args(["threads", "show", "long one", "--before", "20"]));
    assert_eq!(indexes(&stdout), (0..20).collect::<Vec<_>>());
    assert!(stderr.is_empty(), "nothing older: no hint: {stderr}");
    let (stdout, _) =
        ok(opencouch(home.path(), &data).args(["threads", "show", "long one", "--all"]));
    assert_eq!(indexes(&stdout), (0..120).collect::<Vec<_>>());

    // list: pages through every thread with the printed cursor.
    let rows = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    let (stdout, stderr) =
        ok(opencouch(home.path(), &data).args(["threads", "list", "--limit", "10"]));
    let mut seen = rows(&stdout);
    assert_eq!(seen.len(), 10);
    assert_eq!(seen[0], "bob:only");
    let mut hint = stderr;
    while let Some(cursor) = hint
        .split_whitespace()
        .skip_while(|w| *w != "--after")
        .nth(1)
        .map(str::to_owned)
    {
        let (stdout, stderr) = ok(opencouch(home.path(), &data)
            .args(["threads", "list", "--limit", "10", "--after", &cursor]));
        seen.extend(rows(&stdout));
        hint = stderr;
    }
    assert_eq!(seen.len(), 27, "{seen:?}");
    let (stdout, stderr) = ok(opencouch(home.path(), &data).args(["threads", "list", "--all"]));
    assert_eq!(rows(&stdout), seen);
    assert!(stderr.is_empty(), "{stderr}");

    // One API user's threads only.
    let (stdout, stderr) = ok(opencouch(home.path(), &data)
        .args(["threads", "list", "--owner", "alice", "--limit", "20"]));
    let alice = rows(&stdout);
    assert_eq!(alice.len(), 20);
    assert!(alice.iter().all(|t| t.starts_with("alice:")), "{alice:?}");
    assert!(
        stderr.contains("--owner alice --limit 20 --after "),
        "{stderr}"
    );

    let (out, _, stderr) =
        run(opencouch(home.path(), &data).args(["threads", "list", "--after", "zz"]));
    assert!(!out.status.success());
    assert!(stderr.contains("--after"), "{stderr}");
}
