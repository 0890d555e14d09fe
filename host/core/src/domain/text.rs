//! The plain-text alternative of an HTML body: tags dropped, block ends as line breaks, links as
//! `text (url)`, common entities decoded, whitespace collapsed.

/// Converts HTML to readable plain text, in one pass over the body (the lowercase copy that finds
/// closing tags is made once; ASCII lowercasing keeps every byte offset).
pub fn html_to_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len());
    let mut pos = 0;
    let mut pending_href: Vec<Option<String>> = Vec::new();
    while let Some(lt) = html[pos..].find('<').map(|i| pos + i) {
        out.push_str(&html[pos..lt]);
        let Some(gt) = html[lt..].find('>').map(|i| lt + i) else {
            out.push_str(&html[lt..]);
            pos = html.len();
            break;
        };
        let tag = &html[lt + 1..gt];
        let tag_lower = lower[lt + 1..gt].trim();
        pos = gt + 1;
        let closing = tag_lower.starts_with('/');
        let name = tag_lower.trim_start_matches('/');
        let name = &name[..name.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(name.len())];
        match name {
            "script" | "style" | "head" if !closing => {
                let end = format!("</{name}");
                pos = match lower[pos..].find(&end) {
                    Some(i) => html[pos + i..].find('>').map_or(html.len(), |g| pos + i + g + 1),
                    None => html.len(),
                };
            }
            "br" => out.push('\n'),
            // Paragraphs and headings end with a blank line; other blocks start on a line of their own.
            "p" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" if closing => out.push_str("\n\n"),
            "p" | "div" | "li" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "ul" | "ol" | "table"
            | "blockquote"
                if !out.ends_with('\n') =>
            {
                out.push('\n')
            }
            "a" if !closing => pending_href.push(href(tag)),
            "a" => {
                if let Some(Some(url)) = pending_href.pop() {
                    out.push_str(&format!(" ({url})"));
                }
            }
            _ => {}
        }
    }
    out.push_str(&html[pos..]);
    let decoded = decode_entities(&out);
    let mut lines: Vec<String> = Vec::new();
    for line in decoded.lines() {
        let collapsed = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if collapsed.is_empty() && lines.last().is_some_and(String::is_empty) {
            continue;
        }
        lines.push(collapsed);
    }
    lines.join("\n").trim().to_string()
}

fn href(tag: &str) -> Option<String> {
    let i = tag.to_ascii_lowercase().find("href=")?;
    let v = &tag[i + 5..];
    let (q, v) = match v.chars().next()? {
        '"' => ('"', &v[1..]),
        '\'' => ('\'', &v[1..]),
        _ => (' ', v),
    };
    let end = v.find(q).unwrap_or(v.len());
    Some(v[..end].to_string()).filter(|u| !u.is_empty() && !u.starts_with('#'))
}

fn decode_entities(s: &str) -> String {
    s.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The name of a copy: `<name> (Copy)`, cut to its last `max_chars` characters when longer (so the
/// " (Copy)" mark always shows).
pub fn copy_name(name: &str, max_chars: usize) -> String {
    let copy = format!("{name} (Copy)");
    let len = copy.chars().count();
    if len <= max_chars { copy } else { copy.chars().skip(len - max_chars).collect() }
}

#[cfg(test)]
mod tests {
    use super::{copy_name, html_to_text};

    #[test]
    fn a_copy_name_keeps_its_mark_within_the_limit() {
        assert_eq!(copy_name("Welcome", 200), "Welcome (Copy)");
        let long = "é".repeat(200);
        let copy = copy_name(&long, 200);
        assert_eq!(copy.chars().count(), 200);
        assert!(copy.ends_with("é (Copy)"));
    }

    #[test]
    fn html_to_text_table() {
        let cases = [
            ("<p>Hello <b>Ada</b></p><p>Bye</p>", "Hello Ada\n\nBye"),
            ("<div>a</div><div>b</div>", "a\nb"),
            ("<h1>Title</h1><p>Text</p>", "Title\n\nText"),
            ("Line<br>two<br/>three", "Line\ntwo\nthree"),
            ("<a href=\"https://x.test/a?b=1\">Open</a>", "Open (https://x.test/a?b=1)"),
            ("<style>p{color:red}</style><p>Hi &amp; bye &lt;3</p>", "Hi & bye <3"),
            ("<ul><li>one</li><li>two</li></ul>", "one\ntwo"),
            ("plain   text", "plain text"),
            ("<P>Big</P><SCRIPT>x<y</SCRIPT>z", "Big\n\nz"),
            ("<a İİ href=\"https://x.test/İ\">İ</a>", "İ (https://x.test/İ)"),
            ("<style>a</style><style>b", ""),
            ("a <b", "a <b"),
        ];
        for (html, want) in cases {
            assert_eq!(html_to_text(html), want, "{html}");
        }
    }
}
