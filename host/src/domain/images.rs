//! What an uploaded image is, read from its bytes alone (never from its name or the client's header):
//! PNG, JPEG, GIF or WebP, with its width and height. Every read is bounded by the input; a file that
//! only starts like an image but has no readable size is not taken.

/// A recognised image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    pub content_type: &'static str,
    /// File extension Herald stores and serves it under.
    pub ext: &'static str,
    pub width: u32,
    pub height: u32,
}

/// The extensions Herald serves, with their content types.
pub const KINDS: &[(&str, &str)] =
    &[("png", "image/png"), ("jpg", "image/jpeg"), ("gif", "image/gif"), ("webp", "image/webp")];

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?)))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?)))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn info(content_type: &'static str, ext: &'static str, width: u32, height: u32) -> Option<ImageInfo> {
    (width > 0 && height > 0).then_some(ImageInfo { content_type, ext, width, height })
}

/// The image these bytes are, or None.
pub fn sniff(b: &[u8]) -> Option<ImageInfo> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        // The first chunk is IHDR: width and height, big-endian.
        if b.get(12..16)? != b"IHDR" {
            return None;
        }
        return info("image/png", "png", be32(b, 16)?, be32(b, 20)?);
    }
    if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        return info("image/gif", "gif", le16(b, 6)?, le16(b, 8)?);
    }
    if b.len() >= 12 && &b[0..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        return webp(b);
    }
    if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return jpeg(b);
    }
    None
}

fn webp(b: &[u8]) -> Option<ImageInfo> {
    match b.get(12..16)? {
        // Lossy: the frame header after the start code 9D 01 2A, 14-bit sizes.
        b"VP8 " => {
            if b.get(23..26)? != [0x9D, 0x01, 0x2A] {
                return None;
            }
            info("image/webp", "webp", le16(b, 26)? & 0x3FFF, le16(b, 28)? & 0x3FFF)
        }
        // Lossless: signature 0x2F, then 14-bit width-1 and height-1.
        b"VP8L" => {
            if *b.get(20)? != 0x2F {
                return None;
            }
            let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
            info("image/webp", "webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        }
        // Extended: 24-bit canvas width-1 and height-1.
        b"VP8X" => info("image/webp", "webp", le24(b, 24)? + 1, le24(b, 27)? + 1),
        _ => None,
    }
}

fn jpeg(b: &[u8]) -> Option<ImageInfo> {
    // Walk the marker segments to the first start-of-frame; each step moves forward, so the walk ends.
    let mut at = 2;
    while at + 4 <= b.len() {
        if b[at] != 0xFF {
            return None;
        }
        let marker = b[at + 1];
        match marker {
            // Fill bytes, and standalone markers without a length.
            0xFF => at += 1,
            0x01 | 0xD0..=0xD7 => at += 2,
            // Start of frame (not DHT C4, JPG C8, DAC CC): precision, height, width.
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                return info("image/jpeg", "jpg", be16(b, at + 7)?, be16(b, at + 5)?);
            }
            // Start of scan or end of image before any frame: no size.
            0xDA | 0xD9 => return None,
            _ => {
                let len = be16(b, at + 2)? as usize;
                if len < 2 {
                    return None;
                }
                at += 2 + len;
            }
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A PNG header of this size (enough for `sniff`; not a decodable picture).
    pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend(width.to_be_bytes());
        b.extend(height.to_be_bytes());
        b.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b.extend(b"\0\0\0\0IEND\xae\x42\x60\x82");
        b
    }

    #[test]
    fn each_format_is_known_by_its_bytes_with_its_size() {
        let p = sniff(&png(640, 480)).unwrap();
        assert_eq!((p.content_type, p.ext, p.width, p.height), ("image/png", "png", 640, 480));

        let gif = b"GIF89a\x20\x03\x58\x02\x00\x00\x00;";
        assert_eq!(sniff(gif).map(|i| (i.ext, i.width, i.height)), Some(("gif", 800, 600)));

        // JPEG: SOI, an APP0 segment to walk over, then SOF0 with height 300 and width 400.
        let mut jpg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        jpg.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        jpg.extend([0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0x2C, 0x01, 0x90, 0x03]);
        jpg.extend([0; 12]);
        assert_eq!(sniff(&jpg).map(|i| (i.content_type, i.width, i.height)), Some(("image/jpeg", 400, 300)));

        let mut lossy = b"RIFF\0\0\0\0WEBPVP8 \0\0\0\0".to_vec();
        lossy.extend([0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A, 0x40, 0x01, 0xF0, 0x00]);
        assert_eq!(sniff(&lossy).map(|i| (i.ext, i.width, i.height)), Some(("webp", 320, 240)));
        let mut lossless = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2F".to_vec();
        let bits: u32 = (99) | (49 << 14);
        lossless.extend(bits.to_le_bytes());
        assert_eq!(sniff(&lossless).map(|i| (i.width, i.height)), Some((100, 50)));
        let mut extended = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        extended.extend([0x0F, 0x00, 0x00, 0x07, 0x00, 0x00]);
        assert_eq!(sniff(&extended).map(|i| (i.width, i.height)), Some((16, 8)));
    }

    #[test]
    fn anything_else_or_a_truncated_image_is_not_taken() {
        assert_eq!(sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/>"), None);
        assert_eq!(sniff(b"%PDF-1.7"), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(&png(640, 480)[..20]), None, "cut inside IHDR");
        assert_eq!(sniff(&png(0, 480)), None, "no size");
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01]), None, "a segment shorter than its length field");
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 0, 0, 0]), None, "scan before any frame");
        // A long run of fill bytes ends with the input.
        let mut fill = vec![0xFF, 0xD8];
        fill.extend(std::iter::repeat_n(0xFF, 100_000));
        assert_eq!(sniff(&fill), None);
    }
}
