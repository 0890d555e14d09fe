//! Template syntax and rendering (decision 15): Handlebars, where `{{var}}` is HTML-escaped in bodies and
//! `{{{var}}}` is raw, unknown variables render empty, and `{{var ?? "fallback"}}` gives a default.
//! Subjects render without HTML escaping. Partials and decorators are refused (a template could recurse
//! through them without end), and rendering stops at an output size limit, so a hostile template cannot
//! stall the host.

use handlebars::{Context, Handlebars, Output, RenderContext, Renderable, Template, handlebars_helper};
use serde_json::Value;

/// A problem in a template, with its position when known (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateIssue {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for TemplateIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}: {}", self.message),
            (Some(l), None) => write!(f, "line {l}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

handlebars_helper!(fallback: |v: Json, d: Json| {
    let empty = v.is_null() || v.as_str().is_some_and(str::is_empty);
    if empty { d.clone() } else { v.clone() }
});

/// Rewrites `{{ expr ?? "x" }}` (and the triple-brace form) into `{{herald_default expr "x"}}`.
pub fn preprocess(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let triple = after.starts_with("{{{");
        let open = if triple { "{{{" } else { "{{" };
        let close = if triple { "}}}" } else { "}}" };
        let Some(end) = after[open.len()..].find(close) else {
            out.push_str(after);
            return out;
        };
        let inner = &after[open.len()..open.len() + end];
        match split_fallback(inner) {
            Some((expr, default)) if !inner.trim_start().starts_with(['#', '/', '!', '>', '^', '*']) => {
                out.push_str(&format!("{open}herald_default {} {}{close}", expr.trim(), default.trim()));
            }
            _ => out.push_str(&after[..open.len() + end + close.len()]),
        }
        rest = &after[open.len() + end + close.len()..];
    }
    out.push_str(rest);
    out
}

/// Splits `a ?? b` at the first `??` outside quotes.
fn split_fallback(inner: &str) -> Option<(&str, &str)> {
    let mut quote: Option<char> = None;
    let bytes: Vec<char> = inner.chars().collect();
    let mut byte_pos = 0;
    for (i, c) in bytes.iter().enumerate() {
        match quote {
            Some(q) if *c == q => quote = None,
            Some(_) => {}
            None if *c == '"' || *c == '\'' => quote = Some(*c),
            None if *c == '?' && bytes.get(i + 1) == Some(&'?') => {
                return Some((&inner[..byte_pos], &inner[byte_pos + 2..]));
            }
            None => {}
        }
        byte_pos += c.len_utf8();
    }
    None
}

/// Refuses partials and decorators, which could recurse without end.
fn refuse_recursion(src: &str) -> Result<(), TemplateIssue> {
    for (n, line) in src.lines().enumerate() {
        let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        for bad in ["{{>", "{{#>", "{{~>", "{{#*", "{{*", "{{{>"] {
            if let Some(col) = compact.find(bad) {
                return Err(TemplateIssue {
                    line: Some(n + 1),
                    column: Some(col + 1),
                    message: "partials and decorators are not allowed in templates".into(),
                });
            }
        }
    }
    Ok(())
}

pub struct Engine {
    html: Handlebars<'static>,
    text: Handlebars<'static>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// HTML bodies: `{{x}}` is escaped.
    Html,
    /// Subjects and plain text: nothing is escaped.
    Text,
}

/// An io::Write into a String that refuses to grow past a limit.
struct Limited {
    buf: Vec<u8>,
    max: usize,
}

impl Output for Limited {
    fn write(&mut self, seg: &str) -> std::io::Result<()> {
        if self.buf.len() + seg.len() > self.max {
            return Err(std::io::Error::other("output too large"));
        }
        self.buf.extend_from_slice(seg.as_bytes());
        Ok(())
    }
}

impl Engine {
    pub fn new() -> Engine {
        let mut html = Handlebars::new();
        html.register_helper("herald_default", Box::new(fallback));
        let mut text = Handlebars::new();
        text.register_helper("herald_default", Box::new(fallback));
        text.register_escape_fn(handlebars::no_escape);
        Engine { html, text }
    }

    /// Checks a template's syntax.
    pub fn check(&self, src: &str) -> Result<(), TemplateIssue> {
        refuse_recursion(src)?;
        Template::compile(&preprocess(src)).map(|_| ()).map_err(|e| {
            let (line, column) = e.pos().map_or((None, None), |(l, c)| (Some(l), Some(c)));
            TemplateIssue { line, column, message: e.reason().to_string() }
        })
    }

    /// Renders a template with variables, stopping at `max_bytes` of output.
    pub fn render(&self, src: &str, vars: &Value, mode: Mode, max_bytes: usize) -> Result<String, TemplateIssue> {
        let prepared = self.prepare(src, mode)?;
        self.render_prepared(&prepared, vars, max_bytes)
    }

    /// Checks and compiles a template once, for rendering it many times (a campaign's batch).
    pub fn prepare(&self, src: &str, mode: Mode) -> Result<Prepared, TemplateIssue> {
        self.check(src)?;
        let template = Template::compile(&preprocess(src)).map_err(|e| TemplateIssue {
            line: e.pos().map(|p| p.0),
            column: e.pos().map(|p| p.1),
            message: e.reason().to_string(),
        })?;
        Ok(Prepared { template, mode })
    }

    /// Renders a prepared template, stopping at `max_bytes` of output.
    pub fn render_prepared(&self, p: &Prepared, vars: &Value, max_bytes: usize) -> Result<String, TemplateIssue> {
        let hb = if p.mode == Mode::Html { &self.html } else { &self.text };
        let mut out = Limited { buf: Vec::new(), max: max_bytes };
        let failed = |e: handlebars::RenderError| TemplateIssue {
            line: e.line_no,
            column: e.column_no,
            message: if e.to_string().contains("output too large") {
                format!("the rendered output exceeds {max_bytes} bytes")
            } else {
                e.to_string()
            },
        };
        let ctx = Context::wraps(vars).map_err(failed)?;
        let mut rc = RenderContext::new(None);
        p.template.render(hb, &ctx, &mut rc, &mut out).map_err(failed)?;
        String::from_utf8(out.buf).map_err(|_| TemplateIssue {
            line: None,
            column: None,
            message: "invalid UTF-8 output".into(),
        })
    }
}

/// A checked and compiled template.
pub struct Prepared {
    template: Template,
    mode: Mode,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rendering_table() {
        let e = Engine::new();
        let vars = json!({ "name": "Ada <3", "plan": "", "nested": { "city": "Paris" }, "n": 3 });
        let cases = [
            ("Hi {{name}}", Mode::Html, "Hi Ada &lt;3"),
            ("Hi {{{name}}}", Mode::Html, "Hi Ada <3"),
            ("Hi {{name}}", Mode::Text, "Hi Ada <3"),
            ("[{{missing}}]", Mode::Html, "[]"),
            ("{{missing ?? \"friend\"}}", Mode::Html, "friend"),
            ("{{ plan ?? 'free' }}", Mode::Html, "free"),
            ("{{name ?? \"x\"}}", Mode::Html, "Ada &lt;3"),
            ("{{{name ?? \"x\"}}}", Mode::Html, "Ada <3"),
            ("{{nested.city}}", Mode::Html, "Paris"),
            ("{{#if n}}yes{{/if}}", Mode::Html, "yes"),
            ("a ?? b {{n}}", Mode::Html, "a ?? b 3"),
            ("{{missing ?? \"a ?? b\"}}", Mode::Html, "a ?? b"),
        ];
        for (src, mode, want) in cases {
            assert_eq!(e.render(src, &vars, mode, 10_000).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = Engine::new();
        let err = e.check("line one\nline two {{#if x}}\nno close").unwrap_err();
        assert!(err.line.is_some(), "{err:?}");
        let err = e.check("ok\n{{> evil}}").unwrap_err();
        assert_eq!(err.line, Some(2));
        assert!(err.message.contains("partials"));
        assert!(e.check("{{#*inline \"x\"}}{{/inline}}").is_err());
        assert!(e.check("{{#each items}}{{this}}{{/each}}").is_ok());
    }

    #[test]
    fn output_is_bounded() {
        let e = Engine::new();
        let vars = json!({ "items": vec!["x".repeat(100); 1000] });
        let err = e.render("{{#each items}}{{this}}{{/each}}", &vars, Mode::Html, 10_000).unwrap_err();
        assert!(err.message.contains("exceeds"), "{err:?}");
        assert!(e.render("{{#each items}}{{this}}{{/each}}", &vars, Mode::Html, 200_000).is_ok());
    }
}
