//! Tests of the fake Hugging Face hub through a real HTTP client on loopback.

use opencouch_testkit::FakeHub;

const REPO: &str = "org/tiny-model";
const REV: &str = "0123456789abcdef0123456789abcdef01234567";

async fn get(url: &str, range: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(url);
    if let Some(r) = range {
        req = req.header("range", r);
    }
    req.send().await.expect("request to the fake hub")
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn serves_files_and_honours_ranges() {
    let hub = FakeHub::start().await;
    hub.add_file(REPO, REV, "weights.bin", b"0123456789".to_vec());
    let url = hub.url(REPO, REV, "weights.bin");
    assert_eq!(
        url,
        format!("{}/{REPO}/resolve/{REV}/weights.bin", hub.endpoint())
    );

    let resp = get(&url, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(&resp.bytes().await.expect("body")[..], b"0123456789");

    let resp = get(&url, Some("bytes=4-")).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        header(&resp, "content-range").as_deref(),
        Some("bytes 4-9/10")
    );
    assert_eq!(&resp.bytes().await.expect("body")[..], b"456789");

    let resp = get(&url, Some("bytes=10-")).await;
    assert_eq!(resp.status(), 416);
    assert_eq!(
        header(&resp, "content-range").as_deref(),
        Some("bytes */10")
    );

    let requests = hub.requests_for("weights.bin");
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].range, None);
    assert_eq!(requests[1].range.as_deref(), Some("bytes=4-"));

    hub.ignore_ranges("weights.bin");
    let resp = get(&url, Some("bytes=4-")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(&resp.bytes().await.expect("body")[..], b"0123456789");
}

#[tokio::test]
async fn unknown_files_are_404_and_faults_apply() {
    let hub = FakeHub::start().await;
    hub.add_file(REPO, REV, "a.json", b"abc".to_vec());

    let resp = get(&hub.url(REPO, REV, "missing.json"), None).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(
        header(&resp, "x-error-code").as_deref(),
        Some("EntryNotFound")
    );
    // The right file at another revision is not there either.
    let other = "f".repeat(40);
    assert_eq!(
        get(&hub.url(REPO, &other, "a.json"), None).await.status(),
        404
    );

    let url = hub.url(REPO, REV, "a.json");
    hub.fail_next("a.json", 503, 2);
    assert_eq!(get(&url, None).await.status(), 503);
    assert_eq!(get(&url, None).await.status(), 503);
    assert_eq!(get(&url, None).await.status(), 200);

    hub.corrupt("a.json");
    let body = get(&url, None).await.bytes().await.expect("body");
    assert_eq!(body.len(), 3);
    assert_ne!(&body[..], b"abc");

    hub.clear_faults();
    hub.fail_always("a.json", 500);
    for _ in 0..3 {
        assert_eq!(get(&url, None).await.status(), 500);
    }
}

#[tokio::test]
async fn a_cut_connection_delivers_a_partial_body_once() {
    let hub = FakeHub::start().await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    hub.add_file(REPO, REV, "big.bin", data.clone());
    hub.cut_next_after("big.bin", 1000);
    let url = hub.url(REPO, REV, "big.bin");

    let resp = get(&url, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-length").as_deref(), Some("100000"));
    assert!(
        resp.bytes().await.is_err(),
        "reading a cut body must fail, not end cleanly"
    );

    // One-shot: the next request is whole.
    let body = get(&url, Some("bytes=1000-"))
        .await
        .bytes()
        .await
        .expect("body");
    assert_eq!(&body[..], &data[1000..]);
}

#[tokio::test]
async fn redirected_files_are_served_from_the_cdn_path_with_ranges() {
    let hub = FakeHub::start().await;
    hub.add_file(REPO, REV, "weights.bin", b"0123456789".to_vec());
    hub.redirect("weights.bin");
    let url = hub.url(REPO, REV, "weights.bin");
    // reqwest follows the redirect and keeps the Range header.
    let resp = get(&url, Some("bytes=6-")).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(&resp.bytes().await.expect("body")[..], b"6789");
    let requests = hub.requests_for("weights.bin");
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].path,
        format!("/{REPO}/resolve/{REV}/weights.bin")
    );
    assert_eq!(
        requests[1].path,
        format!("/_cdn/{REPO}/resolve/{REV}/weights.bin")
    );
    assert_eq!(requests[1].range.as_deref(), Some("bytes=6-"));
}
