//! Backups and restores through the binary (docs/behaviour.md#backups): `herald backup` while
//! `herald serve` takes writes, `herald restore` into a new data directory, what a restore refuses, a
//! server killed in the middle of a backup, and scheduled backups.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::binary::{Killable, free_port, get_json, serve, signal, wait_until_up};

/// A Killable whose uploads are in its own folder.
fn scratch(name: &str) -> Killable {
    let k = Killable::new(name);
    let uploads = k.dir.join("uploads");
    k.env("HERALD_UPLOADS_DIR", uploads)
}

fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A refusal: exit code 2 and one line on stderr that says `what`.
fn refused(out: &Output, what: &str) {
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "one line: {said}");
    assert!(said.contains(what), "{said}");
}

/// Names in `dir` that start with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

async fn track(http: &reqwest::Client, base: &str, key: &str, email: &str, pad: usize) -> bool {
    let body = json!({ "email": email, "event": "visit", "data": { "n": email, "pad": "x".repeat(pad) } });
    let r = http.post(format!("{base}/v1/track")).bearer_auth(key).json(&body).send().await;
    r.is_ok_and(|r| r.status().is_success())
}

/// The contact with `email` as the API shows it (its id, email, data and subscription).
async fn contact(http: &reqwest::Client, base: &str, key: &str, email: &str) -> Value {
    let page = get_json(http, &format!("{base}/contacts?search={email}&limit=5"), key).await;
    let found = page["contacts"].as_array().or(page["data"].as_array()).cloned().unwrap_or_default();
    let one = found.into_iter().find(|c| c["email"] == email).unwrap_or_else(|| panic!("{email} in {page}"));
    json!({ "id": one["id"], "email": one["email"], "data": one["data"], "subscribed": one["subscribed"] })
}

async fn total(http: &reqwest::Client, base: &str, key: &str) -> u64 {
    get_json(http, &format!("{base}/contacts?limit=1"), key).await["total"].as_u64().unwrap()
}

#[tokio::test]
async fn a_backup_taken_under_writes_restores_the_records_of_its_moment() {
    let k = scratch("backup-load");
    let (_, key) = k.project(None);
    let server = k.serve().await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    for i in 0..50 {
        assert!(track(&http, &k.base, &key, &format!("early{i}@example.org"), 100).await);
    }
    let socket = PathBuf::from(format!("{}.sock", k.db().display()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only Herald's user may ask for a backup");
    }

    // Writers go on while the backup is taken.
    let (stop, written) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (http, base, key, stop, written) =
            (http.clone(), k.base.clone(), key.clone(), stop.clone(), written.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                if track(&http, &base, &key, &format!("load{w}-{i}@example.org"), 500).await {
                    written.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dest = k.dir.join("backups").join("first");
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let mut c = k.cmd();
    c.arg("backup").arg(&dest);
    let manifest = json_of(&tokio::task::spawn_blocking(move || run(c)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert!(written.load(Ordering::Relaxed) > 0, "writes went on during the backup");
    let at_backup = manifest["tables"]["contact"].as_u64().unwrap();
    let at_end = total(&http, &k.base, &key).await;
    assert!(at_backup >= 50 && at_backup < at_end, "the backup holds its moment: {at_backup} of {at_end}");
    let last = herald_host::store::migrate::MIGRATIONS.last().unwrap().0;
    assert_eq!(manifest["lastMigration"], last, "{manifest}");
    assert_eq!(manifest["dataSha256"].as_str().unwrap().len(), 64);
    assert!(manifest["tables"]["event"].as_u64().unwrap() >= at_backup, "{manifest}");
    assert_eq!(entries(dest.parent().unwrap(), "."), Vec::<String>::new(), "no partial folder is left");
    let mut c = k.cmd();
    c.arg("backup").arg(&dest);
    refused(&run(c), "already exists");
    drop(server);

    // Restored into a new directory, a server on it shows the records of the backup's moment.
    let restored = k.dir.join("restored");
    let mut c = k.cmd();
    c.arg("restore").arg(&dest).arg("--data").arg(&restored);
    let out = json_of(&run(c));
    assert_eq!(out["tables"], manifest["tables"], "{out}");
    assert_eq!(out["migrated"], json!([]));
    assert!(out.get("note").is_none(), "HERALD_SECRET is set: {out}");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut c = k.cmd();
    c.env("HERALD_DB", format!("surrealkv://{}", restored.display())).env("HERALD_LISTEN", format!("127.0.0.1:{port}"));
    let _again = serve(c);
    assert!(wait_until_up(&base).await);
    assert_eq!(total(&http, &base, &key).await, at_backup, "the old key works and every contact is back");
    let original = k.serve().await;
    for email in ["early0@example.org", "early49@example.org", "load0-0@example.org"] {
        assert_eq!(contact(&http, &base, &key, email).await, contact(&http, &k.base, &key, email).await);
    }
    drop(original);
}

#[tokio::test]
async fn a_restore_refuses_a_folder_in_use_a_newer_schema_and_a_damaged_backup() {
    let k = scratch("backup-refusals");
    let (_, key) = k.project(None);
    {
        let _server = k.serve().await;
        let http = reqwest::Client::new();
        assert!(track(&http, &k.base, &key, "one@example.org", 10).await);
    }
    // No server runs: the command opens the database itself.
    let good = k.dir.join("good");
    let mut c = k.cmd();
    c.arg("backup").arg(&good);
    let manifest = json_of(&run(c));
    assert_eq!(manifest["tables"]["contact"], 1, "{manifest}");

    let restore = |src: &Path, data: &Path| {
        let mut c = k.cmd();
        c.arg("restore").arg(src).arg("--data").arg(data);
        run(c)
    };
    let used = k.dir.join("used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("something"), "x").unwrap();
    refused(&restore(&good, &used), "is not empty");
    assert_eq!(entries(&used, ""), vec!["something".to_string()], "the folder is left as it was");

    let copy = |name: &str| {
        let to = k.dir.join(name);
        std::fs::create_dir_all(&to).unwrap();
        for f in ["manifest.json", "data.surql"] {
            std::fs::copy(good.join(f), to.join(f)).unwrap();
        }
        to
    };
    let newer = copy("newer");
    let mut m: Value = serde_json::from_slice(&std::fs::read(newer.join("manifest.json")).unwrap()).unwrap();
    m["lastMigration"] = json!("9999_from_the_future.surql");
    std::fs::write(newer.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    refused(&restore(&newer, &k.dir.join("fresh")), "newer schema");

    let damaged = copy("damaged");
    let mut data = std::fs::read(damaged.join("data.surql")).unwrap();
    let at = data.len() / 2;
    data[at] ^= 1;
    std::fs::write(damaged.join("data.surql"), data).unwrap();
    refused(&restore(&damaged, &k.dir.join("fresh")), "damaged");
    refused(&restore(&k.dir.join("nothing"), &k.dir.join("fresh")), "not a Herald backup");
    assert!(!k.dir.join("fresh").exists(), "a refused restore makes nothing");
    assert_eq!(entries(&k.dir, ".fresh"), Vec::<String>::new());

    // Without HERALD_SECRET and with no secret file beside the new data, the restore says what to copy.
    let mut c = k.cmd();
    c.env_remove("HERALD_SECRET").arg("restore").arg(&good).arg("--data").arg(k.dir.join("fresh"));
    let out = json_of(&run(c));
    assert!(out["note"].as_str().is_some_and(|n| n.contains("fresh.secret")), "{out}");
}

#[tokio::test]
async fn a_server_killed_during_a_backup_leaves_nothing_under_the_backups_name() {
    let k = scratch("backup-kill");
    let (_, key) = k.project(None);
    let mut server = k.serve().await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let mut writes = Vec::new();
    for w in 0..4 {
        let (http, base, key) = (http.clone(), k.base.clone(), key.clone());
        writes.push(tokio::spawn(async move {
            for i in 0..150 {
                assert!(track(&http, &base, &key, &format!("big{w}-{i}@example.org"), 20_000).await);
            }
        }));
    }
    for w in writes {
        w.await.unwrap();
    }
    let parent = k.dir.join("backups");
    std::fs::create_dir_all(&parent).unwrap();
    let dest = parent.join("interrupted");
    let mut c = k.cmd();
    c.arg("backup").arg(&dest);
    let cli = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut seen = false;
    for _ in 0..20_000 {
        if !entries(&parent, ".interrupted.partial-").is_empty() {
            seen = true;
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    signal(&mut server, "-KILL");
    let out = tokio::task::spawn_blocking(move || cli.wait_with_output().unwrap()).await.unwrap();
    assert!(seen, "the backup started ({})", String::from_utf8_lossy(&out.stderr));
    assert!(!dest.exists(), "nothing under the final name: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("before it answered"), "{out:?}");

    // The next server starts on the same data, and the next backup is whole.
    let _server = k.serve().await;
    let mut c = k.cmd();
    c.arg("backup").arg(&dest);
    let manifest = json_of(&run(c));
    assert_eq!(manifest["tables"]["contact"], 600, "{manifest}");
}

#[tokio::test]
async fn scheduled_backups_are_written_every_period_and_the_oldest_beyond_the_kept_are_deleted() {
    let k = scratch("backup-schedule");
    let dir = k.dir.join("scheduled");
    let k = k.env("HERALD_BACKUP_DIR", &dir).env("HERALD_BACKUP_EVERY_HOURS", "0.0003").env("HERALD_BACKUP_KEEP", "2");
    let (_, key) = k.project(None);
    let _server = k.serve().await;
    let http = reqwest::Client::new();
    assert!(track(&http, &k.base, &key, "sched@example.org", 10).await);
    let mut kept = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        kept = entries(&dir, "herald-backup-");
        if kept.len() == 2 && kept.iter().all(|n| dir.join(n).join("manifest.json").is_file()) {
            break;
        }
    }
    assert_eq!(kept.len(), 2, "{kept:?}");
    // A few more periods: still two, and newer ones.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let later = entries(&dir, "herald-backup-");
    assert_eq!(later.len(), 2, "{later:?}");
    assert!(later[0] > kept[1], "{kept:?} then {later:?}");
    let m: Value = serde_json::from_slice(&std::fs::read(dir.join(&later[1]).join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["tables"]["contact"], 1, "{m}");
}
