//! The plain-text alternative of an HTML body: tags dropped, block ends as line breaks, links as
//! `text (url)`, common entities decoded, whitespace collapsed.

/// Converts HTML to readable plain text.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    let mut pending_href: Vec<Option<String>> = Vec::new();
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let Some(gt) = rest[lt..].find('>') else {
            out.push_str(&rest[lt..]);
            rest = "";
            break;
        };
        let tag = &rest[lt + 1..lt + gt];
        rest = &rest[lt + gt + 1..];
        let lower = tag.trim().to_lowercase();
        let name: String = lower.trim_start_matches('/').chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        let closing = lower.starts_with('/');
        match name.as_str() {
            "script" | "style" | "head" if !closing => {
                let end = format!("</{name}");
                match rest.to_lowercase().find(&end) {
                    Some(i) => {
                        let after = &rest[i..];
                        rest = after.find('>').map_or("", |g| &after[g + 1..]);
                    }
                    None => rest = "",
                }
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
    out.push_str(rest);
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
    let lower = tag.to_lowercase();
    let i = lower.find("href=")?;
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

#[cfg(test)]
mod tests {
    use super::html_to_text;

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
        ];
        for (html, want) in cases {
            assert_eq!(html_to_text(html), want, "{html}");
        }
    }
}
