//! Image uploads (docs/behaviour.md#uploads): stored once by content, served back byte-identical with
//! its type and a long cache lifetime; anything that is not an image by its bytes is refused.

use herald_host::config::Config;
use serde_json::json;

use crate::harness::{Proj, Resp, Server, assert_envelope, proj};

const BOUNDARY: &str = "herald-upload-boundary";

/// A PNG header of this size with `tail` after it (the content differs, the format does not).
fn png(width: u32, height: u32, tail: &[u8]) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(width.to_be_bytes());
    b.extend(height.to_be_bytes());
    b.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(tail);
    b.extend(b"\0\0\0\0IEND\xae\x42\x60\x82");
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
