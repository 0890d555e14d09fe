//! Open and click tracking (decisions 18 and 20): status precedence, which mail is tracked, and
//! rewriting an HTML body's links and adding the pixel.

/// Rank of an email status in the order a status may only move up:
/// PENDING/SENDING < SENT < DELIVERED < OPENED < CLICKED < BOUNCED < COMPLAINED.
/// FAILED and CANCELLED are final and never move.
pub fn rank(status: &str) -> Option<u8> {
    Some(match status {
        "PENDING" | "SENDING" => 0,
        "SENT" => 1,
        "DELIVERED" => 2,
        "OPENED" => 3,
        "CLICKED" => 4,
        "BOUNCED" => 5,
        "COMPLAINED" => 6,
        _ => return None,
    })
}

/// The status after an observation: never moves down the order.
pub fn advance<'a>(current: &'a str, observed: &'a str) -> &'a str {
    match (rank(current), rank(observed)) {
        (Some(c), Some(o)) if o > c => observed,
        _ => current,
    }
}

/// Whether mail of this kind is tracked under the project's mode (default MARKETING_ONLY).
pub fn tracked(mode: Option<&str>, kind: &str) -> bool {
    match mode.unwrap_or("MARKETING_ONLY") {
        "ENABLED" => true,
        "DISABLED" => false,
        _ => kind == "MARKETING",
    }
}

/// Rewrites every `href="http(s)://..."` through `wrap(url)`, except links to `skip_prefix` (Herald's own
/// pages), and adds the pixel before `</body>` (or at the end).
pub fn instrument(html: &str, skip_prefix: &str, wrap: impl Fn(&str) -> String, pixel_url: &str) -> String {
    let mut out = String::with_capacity(html.len() + 256);
    let mut rest = html;
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(i) = lower.find("href=") else { break };
        let after = &rest[i + 5..];
        let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'');
        let (start, body) = match quote {
            Some(q) => (i + 6, &after[1..after[1..].find(q).map_or(after.len() - 1, |e| e + 1)]),
            None => (i + 5, &after[..after.find([' ', '>']).unwrap_or(after.len())]),
        };
        out.push_str(&rest[..start]);
        let url = body;
        let l = url.to_ascii_lowercase();
        if (l.starts_with("http://") || l.starts_with("https://")) && !url.starts_with(skip_prefix) {
            out.push_str(&wrap(&unescape(url)));
        } else {
            out.push_str(url);
        }
        rest = &rest[start + url.len()..];
    }
    out.push_str(rest);
    let pixel = format!("<img src=\"{pixel_url}\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none\">");
    match out.to_ascii_lowercase().rfind("</body>") {
        Some(i) => out.insert_str(i, &pixel),
        None => out.push_str(&pixel),
    }
    out
}

fn unescape(url: &str) -> String {
    url.replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_only_moves_up() {
        let cases = [
            ("SENT", "OPENED", "OPENED"),
            ("OPENED", "CLICKED", "CLICKED"),
            ("CLICKED", "OPENED", "CLICKED"),
            ("BOUNCED", "OPENED", "BOUNCED"),
            ("DELIVERED", "SENT", "DELIVERED"),
            ("FAILED", "OPENED", "FAILED"),
            ("SENDING", "OPENED", "OPENED"),
            ("COMPLAINED", "BOUNCED", "COMPLAINED"),
        ];
        for (cur, seen, want) in cases {
            assert_eq!(advance(cur, seen), want, "{cur} + {seen}");
        }
    }

    #[test]
    fn tracking_modes() {
        assert!(tracked(None, "MARKETING") && !tracked(None, "TRANSACTIONAL"));
        assert!(tracked(Some("ENABLED"), "TRANSACTIONAL"));
        assert!(!tracked(Some("DISABLED"), "MARKETING"));
    }

    #[test]
    fn links_are_wrapped_and_the_pixel_added() {
        let html = "<body><a href=\"https://a.test/x?y=1&amp;z=2\">A</a> <a href='http://b.test'>B</a> \
                    <a href=\"mailto:x@y.test\">M</a> <a href=\"https://herald.test/unsubscribe/t\">U</a></body>";
        let out = instrument(html, "https://herald.test", |u| format!("W[{u}]"), "PIX");
        assert!(out.contains("href=\"W[https://a.test/x?y=1&z=2]\""), "{out}");
        assert!(out.contains("href='W[http://b.test]'"), "{out}");
        assert!(out.contains("href=\"mailto:x@y.test\""));
        assert!(out.contains("href=\"https://herald.test/unsubscribe/t\""), "own links are left alone");
        assert!(
            out.ends_with("<img src=\"PIX\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none\"></body>"),
            "{out}"
        );
        assert!(instrument("<p>x</p>", "h", |u| u.to_string(), "P").ends_with("style=\"display:none\">"));
    }
}
