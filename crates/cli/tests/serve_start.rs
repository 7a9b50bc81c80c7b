//! `opencouch serve` start-up messages (issue 14, item 10): a refused or
//! failed start never first claims the server runs, and a bind error says
//! the operating system's reason once.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{opencouch, run};

#[test]
fn an_open_address_without_users_is_refused_without_a_listening_line() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let (out, _stdout, stderr) =
        run(opencouch(home.path(), &data).args(["serve", "--listen", "0.0.0.0:0"]));
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(stderr.contains("refusing to listen"), "{stderr}");
    assert!(!stderr.contains("OpenCouch API on"), "{stderr}");
}

#[test]
fn a_port_in_use_is_reported_once_without_a_listening_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let (out, _stdout, stderr) =
        run(opencouch(home.path(), &data).args(["serve", "--listen", &addr]));
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(!stderr.contains("OpenCouch API on"), "{stderr}");
    assert!(
        stderr.contains(&format!("could not listen on {addr}")),
        "{stderr}"
    );
    // The OS reason ("Address already in use (os error 98)") appears once.
    assert_eq!(stderr.matches("os error").count(), 1, "{stderr}");
}

#[test]
fn a_started_server_names_the_address_it_bound() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let mut child = opencouch(home.path(), &data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("OpenCouch API on") => break l,
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no listening line; stderr so far: {seen:?}");
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    // The real port, not the `:0` asked for.
    assert!(line.contains("http://127.0.0.1:"), "{line}");
    assert!(!line.contains("127.0.0.1:0/"), "{line}");
}
