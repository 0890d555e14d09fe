//! Image uploads (docs/behaviour.md#uploads): stored once by content, served back byte-identical with
//! its type and a long cache lifetime; anything that is not an image by its bytes is refused.

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
