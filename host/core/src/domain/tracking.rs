//! Open and click tracking (docs/behaviour.md#tracking-and-unsubscribe): status precedence, which mail is
//! tracked, and rewriting an HTML body's links and adding the pixel.

use super::status::EmailStatus;

/// The statuses that rank below `status` (those an observation of `status` may move up), for a
/// conditional write; none for a status outside the order ([`EmailStatus::rank`]).
pub fn below(status: EmailStatus) -> Vec<EmailStatus> {
    let Some(r) = status.rank() else { return vec![] };
    EmailStatus::ALL.iter().copied().filter(|s| s.rank().is_some_and(|x| x < r)).collect()
}

/// The status after an observation: never moves down the order.
pub fn advance(current: EmailStatus, observed: EmailStatus) -> EmailStatus {
    match (current.rank(), observed.rank()) {
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
/// pages), and adds the pixel before `</body>` (or at the end). One pass over the body: the lowercase
/// copy that finds `href=` is made once (ASCII lowercasing keeps every byte offset).
pub fn instrument(html: &str, skip_prefix: &str, wrap: impl Fn(&str) -> String, pixel_url: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() + 256);
    let mut pos = 0;
    while let Some(found) = lower[pos..].find("href=") {
        let i = pos + found;
        let after = &html[i + 5..];
        let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'');
        let (start, url) = match quote {
            Some(q) => (i + 6, &after[1..after[1..].find(q).map_or(after.len() - 1, |e| e + 1)]),
            None => (i + 5, &after[..after.find([' ', '>']).unwrap_or(after.len())]),
        };
        out.push_str(&html[pos..start]);
        let l = &lower[start..start + url.len()];
        if (l.starts_with("http://") || l.starts_with("https://")) && !url.starts_with(skip_prefix) {
            out.push_str(&wrap(&unescape(url)));
        } else {
            out.push_str(url);
        }
        pos = start + url.len();
    }
    let body_end = lower[pos..].rfind("</body>").map(|i| pos + i);
    let pixel = format!("<img src=\"{pixel_url}\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none\">");
    match body_end {
        Some(i) => {
            out.push_str(&html[pos..i]);
            out.push_str(&pixel);
            out.push_str(&html[i..]);
        }
        None => {
            out.push_str(&html[pos..]);
            out.push_str(&pixel);
        }
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
    fn below_lists_the_lower_ranks() {
        use EmailStatus::*;
        assert_eq!(below(Opened), vec![Pending, Sending, Deferred, Sent, Uncertain, Delivered]);
        assert_eq!(below(Sent), vec![Pending, Sending, Deferred]);
        assert!(below(Failed).is_empty());
    }

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
            ("UNCERTAIN", "DELIVERED", "DELIVERED"),
            ("UNCERTAIN", "SENT", "UNCERTAIN"),
            ("COMPLAINED", "BOUNCED", "COMPLAINED"),
        ];
        for (cur, seen, want) in cases {
            let p = |s: &str| EmailStatus::parse(s).unwrap();
            assert_eq!(advance(p(cur), p(seen)), p(want), "{cur} + {seen}");
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
        // Non-ASCII text around links keeps its bytes; the pixel goes before the last `</body>`.
        let out = instrument("<BODY>İ<A HREF=\"HTTPS://x.test/İ\">é</A></Body>", "h", |u| format!("W[{u}]"), "P");
        assert!(out.starts_with("<BODY>İ<A HREF=\"W[HTTPS://x.test/İ]\">é</A><img src=\"P\""), "{out}");
        assert!(out.ends_with("</Body>"), "{out}");
    }
}
