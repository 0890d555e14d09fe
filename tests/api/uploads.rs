//! Image uploads (docs/behaviour.md#uploads, docs/security.md#uploads): stored once by content, recorded
//! per project within its quota and deleted with the last project that uploaded it, streamed back
//! byte-identical with its type, a long cache lifetime and a sandboxing policy; anything that is not
//! wholly an image by its bytes is refused.

use herald_host::config::Config;
use serde_json::json;

use crate::harness::{Proj, Resp, Server, assert_envelope, proj};

const BOUNDARY: &str = "herald-upload-boundary";

/// The CRC of a PNG chunk (type and data).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut c = (data.len() as u32).to_be_bytes().to_vec();
    c.extend(kind);
    c.extend(data);
    c.extend(crc32(&c[4..]).to_be_bytes());
    c
}

/// A well-formed PNG of this size whose `tEXt` chunk holds `text` (the content differs, the format
/// does not).
fn png(width: u32, height: u32, text: &[u8]) -> Vec<u8> {
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 6, 0, 0, 0]);
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend(chunk(b"IHDR", &ihdr));
    b.extend(chunk(b"tEXt", &[b"Comment\0".as_slice(), text].concat()));
    b.extend(chunk(b"IDAT", &[]));
    b.extend(chunk(b"IEND", &[]));
    b
}

async fn upload(p: &Proj, file: &[u8], filename: &str, content_type: &str) -> Resp {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: {content_type}\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend(format!("\r\n--{BOUNDARY}--\r\n").bytes());
    p.secret.raw("POST", "/uploads/image", body, &format!("multipart/form-data; boundary={BOUNDARY}")).await
}

#[tokio::test]
async fn an_image_is_stored_once_and_served_back_byte_identical() {
    let mut config = Config::for_tests();
    config.public_url = "https://mail.example.com".into();
    let dir = config.uploads_dir.clone();
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "uploads@example.com").await;
    let image = png(640, 480, b"first picture");
    let r = upload(&p, &image, "photo.png", "image/png").await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(
        (&r.json["size"], &r.json["contentType"], &r.json["width"], &r.json["height"]),
        (&json!(image.len()), &json!("image/png"), &json!(640), &json!(480))
    );
    let url = r.json["url"].as_str().unwrap().to_string();
    assert!(url.starts_with("https://mail.example.com/uploads/") && url.ends_with(".png"), "{url}");
    let path = url.trim_start_matches("https://mail.example.com");

    // Served without a key, exactly as uploaded, with its type and a year of caching.
    let got = reqwest::get(format!("{}{path}", s.base)).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "image/png");
    assert!(got.headers()["cache-control"].to_str().unwrap().contains("max-age=31536000"));
    assert_eq!(got.headers()["x-content-type-options"], "nosniff");
    assert_eq!(got.bytes().await.unwrap().to_vec(), image);

    // The same image again (under another name and header) is the same file and URL.
    let again = upload(&p, &image, "copy.jpg", "image/jpeg").await;
    assert_eq!(again.json["url"], json!(url));
    let other = upload(&p, &png(10, 20, b"second picture"), "b.png", "image/png").await;
    assert_ne!(other.json["url"], json!(url));
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| !e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'));
    assert_eq!(files.count(), 2, "one file per distinct image");

    let config = s.client().get("/config").await;
    assert_eq!(config.json["features"]["uploads"], true);
}

#[tokio::test]
async fn a_file_that_is_not_an_image_by_its_bytes_is_refused() {
    let s = Server::start().await;
    let p = proj(&s, "uploads-bad@example.com").await;
    // Named and labelled as a PNG, but an HTML page (an SVG or script would be refused the same way).
    let disguised = upload(&p, b"<html><script>alert(1)</script></html>", "cat.png", "image/png").await;
    assert_envelope(&disguised, 415, "UNSUPPORTED_MEDIA_TYPE");
    let svg = upload(&p, b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>", "x.svg", "image/svg+xml").await;
    assert_envelope(&svg, 415, "UNSUPPORTED_MEDIA_TYPE");
    let cut = upload(&p, &png(640, 480, b"")[..18], "cut.png", "image/png").await;
    assert_envelope(&cut, 415, "UNSUPPORTED_MEDIA_TYPE");
    let big = png(100, 100, &vec![7u8; 5 * 1024 * 1024 + 1]);
    assert_envelope(&upload(&p, &big, "big.png", "image/png").await, 413, "PAYLOAD_TOO_LARGE");
    let no_file = p.secret.post("/uploads/image", json!({ "file": "x" })).await;
    assert_envelope(&no_file, 422, "VALIDATION_ERROR");
    let anonymous = s.client().raw("POST", "/uploads/image", png(1, 1, b""), "image/png").await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(p.public.raw("POST", "/uploads/image", png(1, 1, b""), "image/png").await.status, 401);
    for name in ["../Cargo.toml", "x.png", &format!("{}.exe", "a".repeat(64)), &format!("{}.png", "0".repeat(64))] {
        let r = s.client().get(&format!("/uploads/{}", name.replace('/', "%2F"))).await;
        assert_eq!(r.status, 404, "{name}: {}", r.json);
    }
}

/// A GIF89a of 2×2: a global colour table, one image with its LZW data, the trailer.
fn gif() -> Vec<u8> {
    let mut b = b"GIF89a\x02\x00\x02\x00\x80\x00\x00".to_vec();
    b.extend([0, 0, 0, 255, 255, 255]);
    b.extend([0x2C, 0, 0, 0, 0, 0x02, 0x00, 0x02, 0x00, 0x00]);
    b.extend([0x02, 0x02, 0x44, 0x01, 0x00]);
    b.push(0x3B);
    b
}

/// A baseline JPEG of 3×2: APP0, a frame, a scan whose data holds a stuffed 0xFF00 and a restart
/// marker, EOI.
fn jpeg() -> Vec<u8> {
    let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
    b.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    b.extend([0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x02, 0x00, 0x03, 0x01, 0x01, 0x11, 0x00]);
    b.extend([0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00]);
    b.extend([0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]);
    b.extend([0xFF, 0xD9]);
    b
}

#[tokio::test]
async fn an_image_followed_by_html_a_zip_or_other_data_is_refused() {
    let s = Server::start().await;
    let p = proj(&s, "polyglot@example.com").await;
    let html = b"<html><body><script>alert(document.cookie)</script></body></html>";
    let zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    let cases = [
        ("page.png", "image/png", png(16, 16, b"a picture"), html.as_slice()),
        ("archive.gif", "image/gif", gif(), zip.as_slice()),
        ("photo.jpg", "image/jpeg", jpeg(), b"data after the end of the image".as_slice()),
    ];
    for (name, content_type, image, tail) in cases {
        // The image alone is taken...
        let whole = upload(&p, &image, name, content_type).await;
        assert_eq!(whole.status, 201, "{name}: {}", whole.json);
        assert_eq!(whole.json["contentType"], content_type);
        // ...followed by anything, it is not.
        let polyglot = upload(&p, &[image.as_slice(), tail].concat(), name, content_type).await;
        assert_envelope(&polyglot, 415, "UNSUPPORTED_MEDIA_TYPE");
        let message = polyglot.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("is not wholly one"), "{name}: {message}");
    }
    s.stop().await;
}

/// Bytes that do not repeat within a chunk, so a chunk sent twice, out of order or not at all shows.
fn varied(len: usize) -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Fetches an upload's URL (as a mail client would: no key) on this server.
async fn fetch(s: &Server, url: &str) -> reqwest::Response {
    let path = &url[url.find("/uploads/").expect("an upload URL")..];
    reqwest::get(format!("{}{path}", s.base)).await.unwrap()
}

#[tokio::test]
async fn a_served_upload_is_sandboxed_by_its_content_security_policy() {
    let s = Server::start().await;
    let p = proj(&s, "csp@example.com").await;
    for (image, content_type) in [(png(4, 4, b"csp"), "image/png"), (gif(), "image/gif"), (jpeg(), "image/jpeg")] {
        let r = upload(&p, &image, "x", "application/octet-stream").await;
        assert_eq!(r.status, 201, "{}", r.json);
        let got = fetch(&s, r.json["url"].as_str().unwrap()).await;
        assert_eq!(got.status(), 200);
        let h = got.headers();
        assert_eq!(h["content-security-policy"], "default-src 'none'; sandbox", "{content_type}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["content-type"], content_type);
        assert_eq!(got.bytes().await.unwrap().to_vec(), image);
    }
    s.stop().await;
}

#[tokio::test]
async fn an_upload_larger_than_one_read_is_streamed_back_byte_identical() {
    let mut config = Config::for_tests();
    let dir = config.uploads_dir.clone();
    config.upload_max_bytes = 8 << 20;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "large@example.com").await;
    // Several 64 KiB reads' worth, and not a multiple of one.
    let image = png(2000, 1000, &varied(3 * 1024 * 1024 + 12_345));
    let r = upload(&p, &image, "large.png", "image/png").await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["size"], json!(image.len()));
    let got = fetch(&s, r.json["url"].as_str().unwrap()).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-length"], image.len().to_string().as_str());
    assert_eq!(got.headers()["content-security-policy"], "default-src 'none'; sandbox");
    let body = got.bytes().await.unwrap();
    assert_eq!(body.len(), image.len());
    assert!(body.as_ref() == image.as_slice(), "the bytes served are the bytes uploaded");

    // A file stored before uploads were recorded per project (no row names it) is served the same way.
    let legacy = png(30, 20, &varied(200_000));
    let name = format!("{}.png", "ab".repeat(32));
    std::fs::write(dir.join(&name), &legacy).unwrap();
    let got = fetch(&s, &format!("/uploads/{name}")).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-security-policy"], "default-src 'none'; sandbox");
    assert!(got.bytes().await.unwrap().as_ref() == legacy.as_slice());
    s.stop().await;
}

/// The name an image is stored and served under.
fn stored_name(image: &[u8]) -> String {
    use sha2::Digest;
    format!("{}.png", hex::encode(sha2::Sha256::digest(image)))
}

#[tokio::test]
async fn a_projects_uploads_stop_at_its_quota_and_the_same_image_counts_once() {
    let mut config = Config::for_tests();
    config.uploads_quota_bytes = 10_000;
    let s = Server::start_with(config, None).await;
    let (p, q) = (proj(&s, "quota@example.com").await, proj(&s, "quota-other@example.com").await);
    let (a, b, c) = (png(10, 10, &[1; 4000]), png(10, 10, &[2; 4500]), png(10, 10, &[3; 4001]));
    assert!(a.len() + b.len() <= 10_000 && a.len() + b.len() + c.len() > 10_000);
    for image in [&a, &a, &a, &b] {
        let r = upload(&p, image, "a.png", "image/png").await;
        assert_eq!(r.status, 201, "the same image again counts once: {}", r.json);
    }
    let over = upload(&p, &c, "c.png", "image/png").await;
    assert_envelope(&over, 403, "QUOTA_EXCEEDED");
    let message = over.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("quota of 10000 bytes") && message.contains("HERALD_UPLOADS_QUOTA_MB"), "{message}");
    assert_eq!(
        over.json["error"]["details"],
        json!({ "quota": "uploads", "setting": "HERALD_UPLOADS_QUOTA_MB", "limit": 10_000,
            "used": a.len() + b.len(), "requested": c.len() })
    );
    let refused = s.client().get(&format!("/uploads/{}", stored_name(&c))).await;
    assert_eq!(refused.status, 404, "a refused image is not stored");
    // What the project already stored is still taken (it counts nothing more).
    assert_eq!(upload(&p, &b, "b.png", "image/png").await.status, 201);

    // Another project has a quota of its own; an image both store counts once for each.
    assert_eq!(upload(&q, &c, "c.png", "image/png").await.status, 201, "another project is not held by p's use");
    assert_eq!(upload(&q, &a, "a.png", "image/png").await.status, 201);
    let r = upload(&q, &b, "b.png", "image/png").await;
    assert_envelope(&r, 403, "QUOTA_EXCEEDED");
    assert_eq!(r.json["error"]["details"]["used"], json!(c.len() + a.len()));
    s.stop().await;
}

/// A server whose job worker the test steps, with its uploads folder.
async fn stepped() -> (Server, std::path::PathBuf) {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    let dir = config.uploads_dir.clone();
    let clock = herald_host::infra::clock::ManualClock::new(1_800_000_000_000);
    (Server::start_with(config, Some(clock)).await, dir)
}

/// How many rows of `table` belong to `project`.
async fn rows(s: &Server, table: &str, project: &str) -> i64 {
    let sql = format!("SELECT count() AS n FROM {table} WHERE project = $p GROUP ALL");
    let v = s.state.store.query(&sql, json!({ "p": project })).await.unwrap().value(0).unwrap();
    v[0]["n"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn deleting_a_project_deletes_its_uploads_but_not_files_another_project_uploaded() {
    let (s, dir) = stepped().await;
    let (p, q) = (proj(&s, "gone@example.com").await, proj(&s, "stays@example.com").await);
    let (mine, shared, theirs) = (png(8, 8, b"only p"), png(8, 8, b"p and q"), png(8, 8, b"only q"));
    // Files stored before uploads were recorded per project: one that p uploads again, one nobody does.
    let (old_again, old_alone) = (png(8, 8, b"stored before rows, uploaded again"), png(8, 8, b"stored before rows"));
    std::fs::create_dir_all(&dir).unwrap();
    for old in [&old_again, &old_alone] {
        std::fs::write(dir.join(stored_name(old)), old).unwrap();
    }
    for image in [&mine, &shared, &old_again] {
        assert_eq!(upload(&p, image, "p.png", "image/png").await.status, 201);
    }
    for image in [&shared, &theirs] {
        assert_eq!(upload(&q, image, "q.png", "image/png").await.status, 201);
    }

    let r = p.session.delete(&format!("/users/@me/projects/{}", p.id)).await;
    assert_eq!(r.status, 200, "{}", r.json);
    crate::workflow_kit::drain(&s).await;
    let served = |image: &Vec<u8>| {
        let url = format!("{}/uploads/{}", s.base, stored_name(image));
        async move { reqwest::get(url).await.unwrap().bytes().await.unwrap().to_vec() }
    };
    assert!(!dir.join(stored_name(&mine)).exists(), "the file only the deleted project uploaded is deleted");
    assert_eq!(s.client().get(&format!("/uploads/{}", stored_name(&mine))).await.status, 404);
    for image in [&shared, &theirs, &old_again, &old_alone] {
        assert_eq!(&served(image).await, image, "still served");
    }
    for table in ["upload", "upload_usage", "upload_sweep"] {
        assert_eq!(rows(&s, table, &p.id).await, 0, "{table} rows of the deleted project are gone");
    }
    assert_eq!(rows(&s, "upload", &q.id).await, 2, "the other project keeps its rows");

    // Once the last project that uploaded it goes, the shared file goes; older files stay for good.
    let r = q.session.delete(&format!("/users/@me/projects/{}", q.id)).await;
    assert_eq!(r.status, 200, "{}", r.json);
    crate::workflow_kit::drain(&s).await;
    assert!(!dir.join(stored_name(&shared)).exists() && !dir.join(stored_name(&theirs)).exists());
    for old in [&old_again, &old_alone] {
        assert_eq!(&served(old).await, old, "a file stored before rows existed is never deleted");
    }
    let left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(left.len(), 2, "nothing else is left in the folder: {left:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_reset_deletes_the_projects_uploads_and_gives_its_quota_back() {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.uploads_quota_bytes = 6_000;
    let dir = config.uploads_dir.clone();
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "reset@example.com").await;
    let (first, second) = (png(8, 8, &[1; 4000]), png(8, 8, &[2; 4000]));
    assert_eq!(upload(&p, &first, "a.png", "image/png").await.status, 201);
    assert_envelope(&upload(&p, &second, "b.png", "image/png").await, 403, "QUOTA_EXCEEDED");

    let r = p.session.post(&format!("/users/@me/projects/{}/reset", p.id), json!({ "confirm": "P" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    crate::workflow_kit::drain(&s).await;
    assert_eq!(rows(&s, "upload", &p.id).await, 0);
    assert!(!dir.join(stored_name(&first)).exists(), "its file is deleted");
    // The project lives on with its whole quota.
    assert_eq!(upload(&p, &second, "b.png", "image/png").await.status, 201);
    s.stop().await;
}
