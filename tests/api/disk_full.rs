//! A disk that fills up while Herald runs (issue 60): requests that need to write are answered 503
//! `STORAGE_FULL` with `Retry-After`, never 500, and once space returns the same process takes
//! writes again with nothing it accepted lost (docs/behaviour.md#errors). The database lives on a small
//! tmpfs the test mounts; where mounting is not permitted the test says so and does nothing.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::binary::{get_json, herald, project_with, serve, wait_until_up};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: std::path::PathBuf, mb: u32) -> Option<Tmpfs> {
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }

    /// Writes a file until the filesystem is full; answers its path.
    fn fill(&self) -> std::path::PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_answers_503_and_the_process_takes_writes_again_when_space_returns() {
    let dir = Config::test_scratch().join(format!("disk-full-{}", uuid::Uuid::new_v4()));
    let Some(fs) = Tmpfs::mount(dir.clone(), 48) else {
        eprintln!("disk_full: mounting a tmpfs is not permitted here; nothing tested");
        return;
    };
    let port = crate::binary::free_port();
    let cmd = || {
        let mut c = herald(&dir.join("db"), port);
        c.env("HERALD_SECRET", "a test secret of the disk suite");
        c
    };
    let (_, key) = project_with(cmd, None);
    let base = format!("http://127.0.0.1:{port}");
    let _server = serve(cmd());
    assert!(wait_until_up(&base).await);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let track = |email: String| {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        async move {
            let r = http
                .post(format!("{base}/v1/track"))
                .bearer_auth(&key)
                .json(&json!({ "email": email, "event": "visit", "data": { "pad": "x".repeat(2_000) } }))
                .send()
                .await
                .expect("an answer, not a hang");
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            (status, retry, body)
        }
    };
    let mut accepted = 0;
    for i in 0..20 {
        assert_eq!(track(format!("before{i}@example.org")).await.0, 200);
        accepted += 1;
    }

    let filler = fs.fill();
    // The engine may still have room in a file it reserved: writes go on until it needs more.
    let mut refused = 0;
    for i in 0..60 {
        let (status, retry, body) = track(format!("full{i}@example.org")).await;
        match status {
            200 => accepted += 1,
            503 => {
                assert_eq!(body["error"]["code"], "STORAGE_FULL", "{body}");
                assert!(body["error"]["suggestion"].as_str().is_some_and(|s| s.contains("disk")), "{body}");
                assert_eq!(retry.as_deref(), Some("30"));
                refused += 1;
            }
            other => panic!("a full disk answered {other}: {body}"),
        }
    }
    assert!(refused > 0, "the disk filled up");
    assert_eq!(http.get(format!("{base}/health")).send().await.unwrap().status(), 200, "the process keeps serving");
    // Reads go on while nothing can be written.
    let listed = get_json(&http, &format!("{base}/contacts?limit=1"), &key).await;
    assert!(listed["total"].as_u64().is_some_and(|n| n >= 20), "contacts read while the disk is full: {listed}");
    for read in [
        "/events?limit=1",
        "/events/stats",
        "/activity?limit=1",
        "/analytics/top-events",
        "/templates",
        "/segments",
        "/campaigns",
        "/workflows",
    ] {
        let r = http.get(format!("{base}{read}")).bearer_auth(&key).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {read} while the disk is full: {}", r.text().await.unwrap_or_default());
    }

    std::fs::remove_file(filler).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..20 {
        let (status, _, body) = track(format!("after{i}@example.org")).await;
        assert_eq!(status, 200, "writes are taken again once space returns: {body}");
        accepted += 1;
    }
    // Every accepted event made its contact; nothing refused did.
    let contacts = get_json(&http, &format!("{base}/contacts?limit=1"), &key).await;
    assert_eq!(contacts["total"], json!(accepted), "{contacts}");
}
