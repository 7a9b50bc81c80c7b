//! `opencouch models install | status | remove` against the fake Hugging Face
//! hub of the test kit, with a test manifest of small fake files (the
//! hidden `--manifest` flag) so the real pins are never weakened and no test
//! touches the network.

mod common;

use std::path::Path;
use std::process::Output;

use opencouch_testkit::FakeHub;
use sha2::{Digest, Sha256};

const REPO: &str = "test-org/tiny-minilm";
const REV: &str = "89abcdef0123456789abcdef0123456789abcdef";
const FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

fn fake_bytes(name: &str) -> Vec<u8> {
    let n = if name == "model.safetensors" {
        300_000
    } else {
        1_000
    };
    (0..n).map(|i| (i * 31 + name.len()) as u8).collect()
}

/// A hub serving the three fake files, and a manifest pinning them.
fn hub_and_manifest(hub: &FakeHub, dir: &Path) -> std::path::PathBuf {
    let mut toml = format!("repo = \"{REPO}\"\nrevision = \"{REV}\"\nsource = \"test\"\n");
    for name in FILES {
        let bytes = fake_bytes(name);
        toml.push_str(&format!(
            "\n[[files]]\nname = \"{name}\"\nsize = {}\nsha256 = \"{}\"\n",
            bytes.len(),
            hex_digest(&bytes)
        ));
        hub.add_file(REPO, REV, name, bytes);
    }
    let path = dir.join("manifest.toml");
    std::fs::write(&path, toml).expect("write manifest");
    path
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The binary with a clean environment: no config, no HF_ENDPOINT, data
/// under `home`.
fn opencouch(home: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::from(common::deterministic(home));
    cmd.stdin(std::process::Stdio::null());
    cmd
}

async fn run(cmd: &mut tokio::process::Command) -> (Output, String, String) {
    let out = cmd.output().await.expect("run opencouch");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_status_and_remove_against_the_fake_hub() {
    let hub = FakeHub::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let manifest = hub_and_manifest(&hub, home.path());
    let data = home.path().join("d");
    let installed = data.join("models").join("all-MiniLM-L6-v2");
    let install = |extra: &[&str]| {
        let mut cmd = opencouch(home.path());
        cmd.arg("--data-dir")
            .arg(&data)
            .args(["models", "install", "--endpoint", &hub.endpoint()])
            .arg("--manifest")
            .arg(&manifest)
            .args(extra);
        cmd
    };

    // Cut the large file midway: the same run resumes it with a Range request.
    hub.cut_next_after("model.safetensors", 100_000);
    let (out, stdout, stderr) = run(&mut install(&[])).await;
    assert!(out.status.success(), "{stderr}\n{stdout}");
    for name in FILES {
        let got = std::fs::read(installed.join(name)).expect("installed file");
        assert_eq!(got, fake_bytes(name), "{name}");
    }
    assert!(stdout.contains("Installed and verified"), "{stdout}");
    // The install created the data directory: owner-only, as the database
    // would have made it (issue 14, item 5).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&data)
            .expect("data dir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    // Not a terminal: plain progress lines, no bar.
    assert!(
        stderr.contains("model.safetensors: downloading"),
        "{stderr}"
    );
    assert!(stderr.contains("retrying"), "{stderr}");
    assert!(
        stderr.contains("model.safetensors: resuming at"),
        "{stderr}"
    );
    let reqs = hub.requests_for("model.safetensors");
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].range.as_deref(), Some("bytes=100000-"));

    // Already installed: nothing downloaded.
    hub.clear_requests();
    let (out, stdout, stderr) = run(&mut install(&[])).await;
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Already installed"), "{stdout}");
    assert!(stderr.contains("already installed"), "{stderr}");
    assert!(hub.requests().is_empty());

    // --force downloads everything again.
    let (out, _, stderr) = run(&mut install(&["--force"])).await;
    assert!(out.status.success(), "{stderr}");
    assert_eq!(hub.requests().len(), 3);

    // Status names the installed copy as the source.
    let (out, stdout, stderr) = run(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["models", "status"]))
    .await;
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("local embedding model: found"), "{stdout}");
    assert!(
        stdout.contains(&format!("directory  {}", installed.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("installed by `opencouch models install`"),
        "{stdout}"
    );
    // `config` reports the same provider.
    let (_, stdout, _) = run(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .arg("config"))
    .await;
    assert!(
        stdout.contains(&installed.display().to_string()),
        "{stdout}"
    );

    // Remove asks first; without a terminal it needs --yes.
    let (out, _, stderr) = run(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["models", "remove"]))
    .await;
    assert!(!out.status.success());
    assert!(stderr.contains("--yes"), "{stderr}");
    assert!(installed.join("model.safetensors").is_file());

    let (out, stdout, stderr) = run(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["models", "remove", "--yes"]))
    .await;
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Deleted"), "{stdout}");
    assert!(!installed.exists());

    let (out, stdout, _) = run(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["models", "list"]))
    .await;
    assert!(out.status.success());
    // Not found, or found elsewhere (the PyPI package on this machine).
    assert!(
        !stdout.contains("installed by `opencouch models install`"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_failures_are_clear_and_install_nothing() {
    let hub = FakeHub::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let manifest = hub_and_manifest(&hub, home.path());
    let target = home.path().join("model");
    let install = || {
        let mut cmd = opencouch(home.path());
        cmd.args(["models", "install", "--endpoint", &hub.endpoint()])
            .arg("--manifest")
            .arg(&manifest)
            .arg("--dir")
            .arg(&target);
        cmd
    };

    hub.remove_file(REPO, REV, "tokenizer.json");
    let (out, _, stderr) = run(&mut install()).await;
    assert!(!out.status.success());
    let url = hub.url(REPO, REV, "tokenizer.json");
    assert!(stderr.contains(&url) && stderr.contains("404"), "{stderr}");
    assert!(!target.join("tokenizer.json").exists());

    hub.add_file(REPO, REV, "tokenizer.json", fake_bytes("tokenizer.json"));
    hub.corrupt("model.safetensors");
    let (out, _, stderr) = run(&mut install()).await;
    assert!(!out.status.success());
    assert!(
        stderr.contains("model.safetensors") && stderr.contains("checksum mismatch"),
        "{stderr}"
    );
    assert!(!target.join("model.safetensors").exists());
    assert!(!target.join("model.safetensors.part").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_and_the_hint_switch() {
    let home = tempfile::tempdir().expect("tempdir");
    for (sub, wanted) in [
        (
            "install",
            &["--dir", "--force", "pinned", "HF_ENDPOINT"][..],
        ),
        ("status", &["found"][..]),
        ("remove", &["--yes"][..]),
    ] {
        let (out, stdout, stderr) =
            run(opencouch(home.path()).args(["models", sub, "--help"])).await;
        assert!(out.status.success(), "{stderr}");
        for w in wanted {
            assert!(
                stdout.contains(w),
                "models {sub} --help lacks {w}:\n{stdout}"
            );
        }
    }
    let (_, stdout, _) = run(opencouch(home.path()).args(["models", "install", "--help"])).await;
    assert!(stdout.contains("--endpoint") && stdout.contains("--manifest"));
    let (_, stdout, _) = run(opencouch(home.path()).arg("--help")).await;
    assert!(stdout.contains("models"), "{stdout}");

    // The hint switch is not mistaken for a setting.
    let (out, _, stderr) = run(opencouch(home.path())
        .env("OPENCOUCH_NO_MODEL_HINT", "1")
        .arg("config"))
    .await;
    assert!(out.status.success(), "{stderr}");
}
