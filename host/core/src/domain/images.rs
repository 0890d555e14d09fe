//! What an uploaded image is, read from its bytes alone (never from its name or the client's header):
//! PNG, JPEG, GIF or WebP, with its width and height, and only when the whole file is that image
//! (docs/behaviour.md#uploads). Each format's structure is walked from its first byte to its last, so
//! a file that starts like an image and goes on as something else (an HTML page, a ZIP or a script
//! after the image's end, or bytes between its blocks) is refused. Every walk moves forward through
//! the input and stops with it: a declared length is compared with what is left, never allocated or
//! trusted, and nothing recurses.

/// A recognised image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    pub content_type: &'static str,
    /// File extension Herald stores and serves it under.
    pub ext: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Why bytes are not taken as an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not one of the four formats.
    Unknown,
    /// Starts like `format` but is not wholly one: `why` says where it stops being one.
    NotWhole { format: &'static str, why: &'static str },
}

impl Refusal {
    /// The refusal in words, for the 415 answer.
    pub fn message(&self) -> String {
        match self {
            Refusal::Unknown => "the file is not a PNG, JPEG, GIF or WebP image".into(),
            Refusal::NotWhole { format, why } => {
                format!("the file starts like a {format} image but is not wholly one: {why}")
            }
        }
    }
}

/// The extensions Herald serves, with their content types.
pub const KINDS: &[(&str, &str)] =
    &[("png", "image/png"), ("jpg", "image/jpeg"), ("gif", "image/gif"), ("webp", "image/webp")];

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?)))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?)))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(3)?)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// `at + len` when that stays within `b` (a declared length never reaches past the input).
fn within(b: &[u8], at: usize, len: usize) -> Option<usize> {
    at.checked_add(len).filter(|&end| end <= b.len())
}

type Walk = Result<ImageInfo, &'static str>;

fn info(content_type: &'static str, ext: &'static str, (width, height): (u32, u32)) -> Walk {
    if width == 0 || height == 0 {
        return Err("it has no width or height");
    }
    Ok(ImageInfo { content_type, ext, width, height })
}

/// The image these bytes wholly are, or why they are not one.
pub fn check(b: &[u8]) -> Result<ImageInfo, Refusal> {
    let (format, walk): (&'static str, fn(&[u8]) -> Walk) = if b.starts_with(PNG_SIGNATURE) {
        ("PNG", png)
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        ("GIF", gif)
    } else if b.len() >= 12 && &b[0..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        ("WebP", webp)
    } else if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        ("JPEG", jpeg)
    } else {
        return Err(Refusal::Unknown);
    };
    walk(b).map_err(|why| Refusal::NotWhole { format, why })
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// PNG: after the signature, chunks (4-byte big-endian length, 4-letter type, data, CRC; the CRC is not
/// checked), IHDR first (13 bytes: width, height, ...), up to IEND, which has no data and ends the file.
fn png(b: &[u8]) -> Walk {
    const CUT: &str = "it is cut inside a chunk";
    let mut at = PNG_SIGNATURE.len();
    let mut size = None;
    loop {
        if at == b.len() {
            return Err("it ends before its IEND chunk");
        }
        let len = be32(b, at).ok_or(CUT)?;
        if len > 0x7FFF_FFFF {
            return Err("a chunk declares a length the format does not allow");
        }
        let kind = b.get(at + 4..at + 8).ok_or(CUT)?;
        if !kind.iter().all(u8::is_ascii_alphabetic) {
            return Err("a chunk type is not four letters");
        }
        let end = within(b, at + 8, len as usize + 4).ok_or("a chunk is longer than the rest of the file")?;
        let data = &b[at + 8..end - 4];
        match (size, kind) {
            (None, b"IHDR") if data.len() == 13 => size = Some((be32(data, 0).ok_or(CUT)?, be32(data, 4).ok_or(CUT)?)),
            (None, _) => return Err("its first chunk is not a 13-byte IHDR"),
            (Some(_), b"IHDR") => return Err("it has a second IHDR chunk"),
            (Some(size), b"IEND") => {
                if !data.is_empty() {
                    return Err("its IEND chunk has data");
                }
                if end != b.len() {
                    return Err("bytes follow its IEND chunk");
                }
                return info("image/png", "png", size);
            }
            _ => {}
        }
        at = end;
    }
}

/// The bytes of a GIF colour table whose presence and size a packed field gives (3 × 2^(n+1)).
fn colour_table(packed: u8) -> usize {
    if packed & 0x80 == 0 { 0 } else { 3 << ((packed & 0x07) + 1) }
}

/// GIF data sub-blocks from `at` (a size byte, that many bytes, ..., a zero size): where they end.
fn sub_blocks(b: &[u8], mut at: usize) -> Result<usize, &'static str> {
    loop {
        let n = *b.get(at).ok_or("it is cut inside a block's data")? as usize;
        at += 1;
        if n == 0 {
            return Ok(at);
        }
        at = within(b, at, n).ok_or("a data sub-block is longer than the rest of the file")?;
    }
}

/// GIF: header, logical screen descriptor (width, height, packed field) and its global colour table,
/// then extensions (a label and sub-blocks) and images (a descriptor, its local colour table, the LZW
/// minimum code size and sub-blocks), up to the trailer 0x3B as the last byte.
fn gif(b: &[u8]) -> Walk {
    let size = (le16(b, 6).ok_or("it is cut inside its header")?, le16(b, 8).ok_or("it is cut inside its header")?);
    let packed = *b.get(10).ok_or("it is cut inside its header")?;
    let mut at = 13 + colour_table(packed);
    loop {
        match b.get(at) {
            None => return Err("it ends before its trailer"),
            Some(0x3B) if at + 1 == b.len() => return info("image/gif", "gif", size),
            Some(0x3B) => return Err("bytes follow its trailer"),
            Some(0x21) => {
                if at + 1 >= b.len() {
                    return Err("it is cut inside an extension");
                }
                at = sub_blocks(b, at + 2)?;
            }
            Some(0x2C) => {
                let packed = *b.get(at + 9).ok_or("it is cut inside an image descriptor")?;
                at += 10 + colour_table(packed);
                match b.get(at) {
                    None => return Err("it is cut inside an image"),
                    Some(1..=11) => at = sub_blocks(b, at + 1)?,
                    Some(_) => return Err("an image has an LZW code size the format does not allow"),
                }
            }
            Some(_) => return Err("a block is neither an extension, an image nor the trailer"),
        }
    }
}

/// Start-of-frame markers (C0 to CF but DHT C4, JPG C8 and DAC CC): precision, height, width.
fn is_frame(marker: u8) -> bool {
    (0xC0..=0xCF).contains(&marker) && !matches!(marker, 0xC4 | 0xC8 | 0xCC)
}

/// JPEG: after SOI, marker segments (0xFF, fill 0xFF bytes, the marker, a big-endian length that counts
/// itself), a frame (SOF) before the first scan (SOS), each scan followed by its entropy-coded data
/// (where 0xFF is followed by a stuffed 0x00 or is a restart marker RSTn), up to EOI as the last two
/// bytes.
fn jpeg(b: &[u8]) -> Walk {
    let mut at = 2;
    let (mut size, mut scanned) = (None, false);
    loop {
        match b.get(at) {
            None => return Err("it ends before its EOI marker"),
            Some(0xFF) => {}
            Some(_) => return Err("bytes between its segments are not a marker"),
        }
        while b.get(at + 1) == Some(&0xFF) {
            at += 1;
        }
        let marker = *b.get(at + 1).ok_or("it ends before its EOI marker")?;
        match marker {
            0xD9 => {
                let size = size.ok_or("it has no frame (SOF)")?;
                if !scanned {
                    return Err("it has no scan (SOS)");
                }
                if at + 2 != b.len() {
                    return Err("bytes follow its EOI marker");
                }
                return info("image/jpeg", "jpg", size);
            }
            0x00 | 0xD8 => return Err("a marker stands where the format does not allow it"),
            // Standalone markers, without a length.
            0x01 | 0xD0..=0xD7 => at += 2,
            _ => {
                let len = be16(b, at + 2).ok_or("it is cut inside a segment")? as usize;
                if len < 2 {
                    return Err("a segment declares a length shorter than its length field");
                }
                let end = within(b, at + 2, len).ok_or("a segment is longer than the rest of the file")?;
                if is_frame(marker) && size.is_none() {
                    if len < 8 {
                        return Err("its frame header is too short");
                    }
                    size = Some((be16(b, at + 7).ok_or("")?, be16(b, at + 5).ok_or("")?));
                }
                at = end;
                if marker == 0xDA {
                    if size.is_none() {
                        return Err("a scan comes before any frame");
                    }
                    scanned = true;
                    at = entropy_coded(b, at)?;
                }
            }
        }
    }
}

/// Where a scan's entropy-coded data from `at` ends: at the first 0xFF that starts a marker (not a
/// stuffed 0xFF00, not a restart marker RSTn).
fn entropy_coded(b: &[u8], mut at: usize) -> Result<usize, &'static str> {
    const CUT: &str = "it ends inside a scan's data";
    loop {
        at += b.get(at..).and_then(|rest| rest.iter().position(|&x| x == 0xFF)).ok_or(CUT)?;
        match b.get(at + 1) {
            None => return Err(CUT),
            Some(0x00 | 0xD0..=0xD7) => at += 2,
            // Fill bytes or a marker: the marker walk reads them.
            Some(_) => return Ok(at),
        }
    }
}

/// WebP: a RIFF file whose size field is the file's length minus 8, filled exactly by chunks (a
/// FourCC, a little-endian size, the data and a pad byte when the size is odd); the first chunk is the
/// image's (VP8, VP8L or VP8X) and holds its size.
fn webp(b: &[u8]) -> Walk {
    let riff = le32(b, 4).ok_or("it is cut inside its header")? as usize;
    if riff.checked_add(8) != Some(b.len()) {
        return Err("its RIFF size is not the file's length");
    }
    let mut at = 12;
    let mut size = None;
    while at < b.len() {
        let fourcc = b.get(at..at + 4).ok_or("it is cut inside a chunk header")?;
        if !fourcc.iter().all(|c| c.is_ascii_alphanumeric() || *c == b' ') {
            return Err("a chunk's FourCC is not letters, digits or spaces");
        }
        let len = le32(b, at + 4).ok_or("it is cut inside a chunk header")? as usize;
        let data_end = within(b, at + 8, len).ok_or("a chunk is longer than the rest of the file")?;
        if size.is_none() {
            size = Some(webp_size(fourcc, &b[at + 8..data_end])?);
        }
        at = within(b, data_end, len & 1).ok_or("a chunk's pad byte is missing")?;
    }
    info("image/webp", "webp", size.ok_or("it has no chunks")?)
}

/// The canvas size in the first chunk of a WebP file.
fn webp_size(fourcc: &[u8], d: &[u8]) -> Result<(u32, u32), &'static str> {
    const SHORT: &str = "its image chunk is too short";
    match fourcc {
        // Lossy: a frame tag, the start code 9D 01 2A, 14-bit sizes.
        b"VP8 " => {
            if d.get(3..6) != Some(&[0x9D, 0x01, 0x2A]) {
                return Err("its VP8 chunk has no start code");
            }
            Ok((le16(d, 6).ok_or(SHORT)? & 0x3FFF, le16(d, 8).ok_or(SHORT)? & 0x3FFF))
        }
        // Lossless: signature 0x2F, then 14-bit width-1 and height-1.
        b"VP8L" => {
            if d.first() != Some(&0x2F) {
                return Err("its VP8L chunk has no signature");
            }
            let bits = le32(d, 1).ok_or(SHORT)?;
            Ok(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        // Extended: flags, then 24-bit canvas width-1 and height-1.
        b"VP8X" => Ok((le24(d, 4).ok_or(SHORT)? + 1, le24(d, 7).ok_or(SHORT)? + 1)),
        _ => Err("its first chunk is not VP8, VP8L or VP8X"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sniff(b: &[u8]) -> Option<ImageInfo> {
        check(b).ok()
    }

    /// The CRC of a PNG chunk (type and data), so the samples are well-formed (Herald does not check it).
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
    /// does not; not a decodable picture: its IDAT is empty).
    pub(crate) fn png(width: u32, height: u32, text: &[u8]) -> Vec<u8> {
        let mut ihdr = width.to_be_bytes().to_vec();
        ihdr.extend(height.to_be_bytes());
        ihdr.extend([8, 6, 0, 0, 0]);
        let mut b = PNG_SIGNATURE.to_vec();
        b.extend(chunk(b"IHDR", &ihdr));
        b.extend(chunk(b"tEXt", &[b"Comment\0".as_slice(), text].concat()));
        b.extend(chunk(b"IDAT", &[]));
        b.extend(chunk(b"IEND", &[]));
        b
    }

    /// A GIF89a of 800×600: a global colour table of two colours, a graphic control extension, a comment
    /// holding `comment`, one image with a local colour table and two data sub-blocks, the trailer.
    pub(crate) fn gif(comment: &[u8]) -> Vec<u8> {
        let mut b = b"GIF89a\x20\x03\x58\x02\x80\x00\x00".to_vec();
        b.extend([0, 0, 0, 255, 255, 255]);
        b.extend([0x21, 0xF9, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00]);
        b.extend([0x21, 0xFE]);
        for part in comment.chunks(255) {
            b.push(part.len() as u8);
            b.extend(part);
        }
        b.push(0);
        b.extend([0x2C, 0, 0, 0, 0, 0x20, 0x03, 0x58, 0x02, 0x80, 0, 0, 0, 255, 255, 255]);
        b.extend([0x02, 0x02, 0x44, 0x01, 0x01, 0x3B, 0x00]);
        b.push(0x3B);
        b
    }

    /// A baseline JPEG of 400×300: APP0, a frame, a scan whose data holds a stuffed 0xFF00 and a
    /// restart marker, a second scan after a fill byte, EOI.
    pub(crate) fn jpeg() -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        b.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        b.extend([0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0x2C, 0x01, 0x90, 0x03]);
        b.extend([0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01]);
        let sos = [0xFF, 0xDA, 0x00, 0x0C, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3F, 0x00];
        b.extend(sos);
        b.extend([0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xD9, 0xFF, 0x00]);
        b.push(0xFF);
        b.extend(sos);
        b.extend([0x78, 0x9A]);
        b.extend([0xFF, 0xD9]);
        b
    }

    /// A RIFF file of these chunks, its size field right.
    fn riff(chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut body = b"WEBP".to_vec();
        for (fourcc, data) in chunks {
            body.extend(*fourcc);
            body.extend((data.len() as u32).to_le_bytes());
            body.extend(*data);
            if data.len() % 2 == 1 {
                body.push(0);
            }
        }
        let mut b = b"RIFF".to_vec();
        b.extend((body.len() as u32).to_le_bytes());
        b.extend(body);
        b
    }

    const VP8: &[u8] = &[0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A, 0x40, 0x01, 0xF0, 0x00];

    fn vp8l(width: u32, height: u32) -> Vec<u8> {
        let mut d = vec![0x2F];
        d.extend(((width - 1) | ((height - 1) << 14)).to_le_bytes());
        d
    }

    fn webp_samples() -> [Vec<u8>; 3] {
        let lossless = riff(&[(b"VP8L", &vp8l(100, 50))]);
        let extended = riff(&[
            (b"VP8X", &[0, 0, 0, 0, 0x0F, 0x00, 0x00, 0x07, 0x00, 0x00]),
            (b"VP8L", &vp8l(16, 8)),
            (b"EXIF", b"odd"),
        ]);
        [riff(&[(b"VP8 ", VP8)]), lossless, extended]
    }

    fn size(b: &[u8]) -> Option<(&'static str, u32, u32)> {
        sniff(b).map(|i| (i.content_type, i.width, i.height))
    }

    #[test]
    fn each_format_is_known_by_its_bytes_with_its_size() {
        let p = sniff(&png(640, 480, b"a picture")).unwrap();
        assert_eq!((p.content_type, p.ext, p.width, p.height), ("image/png", "png", 640, 480));
        assert_eq!(sniff(&gif(b"made by hand")).map(|i| (i.ext, i.width, i.height)), Some(("gif", 800, 600)));
        // The smallest GIF: header, screen descriptor, trailer.
        assert_eq!(size(b"GIF87a\x01\x00\x01\x00\x00\x00\x00;"), Some(("image/gif", 1, 1)));
        assert_eq!(size(&jpeg()), Some(("image/jpeg", 400, 300)));
        let [lossy, lossless, extended] = webp_samples();
        assert_eq!(sniff(&lossy).map(|i| (i.ext, i.width, i.height)), Some(("webp", 320, 240)));
        assert_eq!(size(&lossless), Some(("image/webp", 100, 50)));
        assert_eq!(size(&extended), Some(("image/webp", 16, 8)));
    }

    /// Every well-formed sample, whole.
    fn samples() -> Vec<(&'static str, Vec<u8>)> {
        let [lossy, lossless, extended] = webp_samples();
        vec![
            ("png", png(640, 480, b"text")),
            ("gif", gif(&[7; 600])),
            ("jpeg", jpeg()),
            ("webp lossy", lossy),
            ("webp lossless", lossless),
            ("webp extended", extended),
        ]
    }

    #[test]
    fn an_image_cut_anywhere_or_followed_by_anything_is_refused() {
        for (name, good) in samples() {
            assert!(sniff(&good).is_some(), "{name}");
            for cut in 0..good.len() {
                assert_eq!(sniff(&good[..cut]), None, "{name} cut after {cut} bytes");
            }
            for tail in [&b"\0"[..], b"<html><script>alert(1)</script></html>", b"PK\x03\x04", &[0xFF, 0xD9]] {
                assert_eq!(sniff(&[good.as_slice(), tail].concat()), None, "{name} followed by {tail:?}");
            }
        }
    }

    /// A sample with bytes spliced in: `at` (from the start; negative from the end), `cut` bytes removed,
    /// `put` inserted.
    fn edit(mut b: Vec<u8>, at: isize, cut: usize, put: &[u8]) -> Vec<u8> {
        let at = if at < 0 { (b.len() as isize + at) as usize } else { at as usize };
        b.splice(at..at + cut, put.iter().copied());
        b
    }

    #[test]
    fn files_that_are_not_wholly_their_format_are_refused_with_the_reason() {
        let zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        let html = b"<html><body><script>alert(document.cookie)</script></body></html>";
        let p = || png(640, 480, b"text");
        let [lossy, _, extended] = webp_samples();
        // The size field set to the length, whatever the chunks say.
        let resized = |mut b: Vec<u8>| {
            let size = (b.len() as u32 - 8).to_le_bytes();
            b.splice(4..8, size);
            b
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            // PNG
            ("png + html", [p(), html.to_vec()].concat(), "bytes follow its IEND chunk"),
            ("png + zip", [p(), zip.to_vec()].concat(), "bytes follow its IEND chunk"),
            ("png, bytes between chunks", edit(p(), 33, 0, b"<script>"), "a chunk type is not four letters"),
            ("png without IEND", edit(p(), -12, 12, b""), "it ends before its IEND chunk"),
            ("png cut in IHDR", p()[..20].to_vec(), "a chunk is longer than the rest of the file"),
            ("png cut in a length", p()[..35].to_vec(), "it is cut inside a chunk"),
            ("png, IEND with data", edit(p(), -12, 4, &[0, 0, 0, 1]), "a chunk is longer than the rest of the file"),
            ("png, huge chunk", edit(p(), 33, 4, &[0xFF, 0xFF, 0xFF, 0xF0]), "a length the format does not allow"),
            ("png, long chunk", edit(p(), 33, 4, &[0x7F, 0xFF, 0xFF, 0xF0]), "longer than the rest of the file"),
            ("png, IDAT first", edit(p(), 12, 4, b"IDAT"), "its first chunk is not a 13-byte IHDR"),
            ("png, no size", png(0, 480, b""), "it has no width or height"),
            ("png, two IHDR", edit(p(), 33, 0, &chunk(b"IHDR", &[0; 13])), "it has a second IHDR chunk"),
            // GIF
            ("gif + zip", [gif(b"c"), zip.to_vec()].concat(), "bytes follow its trailer"),
            ("gif + html", [gif(b"c"), html.to_vec()].concat(), "bytes follow its trailer"),
            ("gif without trailer", edit(gif(b"c"), -1, 1, b""), "it ends before its trailer"),
            ("gif, trailer then html", edit(gif(b"c"), 19, 0, b";<html>"), "bytes follow its trailer"),
            ("gif, unknown block", edit(gif(b"c"), 19, 0, b"<"), "neither an extension, an image nor the trailer"),
            ("gif, long sub-block", edit(gif(b"c"), 29, 1, &[0xFF]), "a data sub-block is longer"),
            ("gif, huge colour table", b"GIF89a\x01\x00\x01\x00\xF7\x00\x00;".to_vec(), "it ends before its trailer"),
            ("gif, bad code size", edit(gif(b"c"), -8, 1, &[0x0C]), "an LZW code size the format does not allow"),
            ("gif cut in header", b"GIF89a\x01\x00".to_vec(), "it is cut inside its header"),
            // JPEG
            ("jpeg + data", [jpeg(), b"data".to_vec()].concat(), "bytes follow its EOI marker"),
            ("jpeg + zip", [jpeg(), zip.to_vec()].concat(), "bytes follow its EOI marker"),
            ("jpeg + html", [jpeg(), html.to_vec()].concat(), "bytes follow its EOI marker"),
            ("jpeg without EOI", edit(jpeg(), -2, 2, b""), "it ends inside a scan's data"),
            ("jpeg, junk between segments", edit(jpeg(), 20, 0, b"<"), "bytes between its segments are not a marker"),
            ("jpeg, huge segment", edit(jpeg(), 4, 2, &[0xFF, 0xFF]), "a segment is longer than the rest of the file"),
            ("jpeg, short length", edit(jpeg(), 4, 2, &[0x00, 0x01]), "shorter than its length field"),
            ("jpeg, scan first", edit(jpeg(), 20, 19, b""), "a scan comes before any frame"),
            ("jpeg, second SOI", edit(jpeg(), 20, 0, &[0xFF, 0xD8]), "does not allow it"),
            ("jpeg, no scan", [&jpeg()[..39], &[0xFF, 0xD9]].concat(), "it has no scan (SOS)"),
            ("jpeg, only EOI", vec![0xFF, 0xD8, 0xFF, 0xD9], "it has no frame (SOF)"),
            ("jpeg, fill to the end", [&[0xFF, 0xD8][..], &[0xFF; 100_000]].concat(), "it ends before its EOI"),
            // WebP
            ("webp + html", [lossy.clone(), html.to_vec()].concat(), "its RIFF size is not the file's length"),
            ("webp, riff counts html", resized([lossy.clone(), html.to_vec()].concat()), "a chunk's FourCC is not"),
            ("webp cut", lossy[..lossy.len() - 1].to_vec(), "its RIFF size is not the file's length"),
            ("webp, huge chunk", edit(lossy.clone(), 16, 4, &[0xFF; 4]), "a chunk is longer than the rest of the file"),
            ("webp, huge riff", edit(lossy.clone(), 4, 4, &[0xFF; 4]), "its RIFF size is not the file's length"),
            ("webp, no pad byte", resized(edit(extended, -1, 1, b"")), "a chunk's pad byte is missing"),
            ("webp, short image chunk", riff(&[(b"VP8 ", &VP8[..9])]), "its image chunk is too short"),
            ("webp, other first chunk", riff(&[(b"EXIF", b"x"), (b"VP8 ", VP8)]), "its first chunk is not VP8"),
            ("webp, no chunks", riff(&[]), "it has no chunks"),
            ("webp, no start code", riff(&[(b"VP8 ", &[0; 10])]), "its VP8 chunk has no start code"),
        ];
        for (name, bytes, why) in cases {
            match check(&bytes) {
                Err(Refusal::NotWhole { why: got, .. }) => assert!(got.contains(why), "{name}: {got:?}, not {why:?}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let refusal = check(&[p(), html.to_vec()].concat()).unwrap_err();
        assert_eq!(
            refusal.message(),
            "the file starts like a PNG image but is not wholly one: bytes follow its IEND chunk"
        );
    }

    #[test]
    fn anything_else_is_not_an_image() {
        for other in
            [&b"<svg xmlns='http://www.w3.org/2000/svg'/>"[..], b"%PDF-1.7", b"", b"PK\x03\x04", b"RIFF\0\0\0\0WAVE"]
        {
            assert_eq!(check(other), Err(Refusal::Unknown), "{other:?}");
        }
    }
}
