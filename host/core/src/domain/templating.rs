//! Template syntax and rendering (docs/behaviour.md#templates): Handlebars, where `{{var}}` is
//! HTML-escaped in bodies and `{{{var}}}` is raw, unknown variables render empty, and
//! `{{var ?? "fallback"}}` gives a default. Subjects render without HTML escaping. Partials and decorators
//! are refused (a template could recurse through them without end), and rendering stops at an output size
//! limit, so a hostile template cannot stall the host.

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

/// Deepest nesting a template may have: blocks inside blocks, and sub-expressions or literals inside
/// one tag. The parser and the renderer recurse once per level, so this bounds their stack.
pub const MAX_NESTING: usize = 32;

/// Elements one render may evaluate: every pass of an `{{#each}}` costs the elements of its block (and
/// copying a computed item costs about one step per 64 bytes), so nested loops over large arrays stop
/// with an error instead of working for minutes.
pub const MAX_RENDER_STEPS: u64 = 2_000_000;

fn issue_at(src: &str, byte: usize, message: impl Into<String>) -> TemplateIssue {
    let before = &src[..byte.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    TemplateIssue { line: Some(line), column: Some(column), message: message.into() }
}

/// Bytes of source compiled at a time: Handlebars computes each element's line and column by counting
/// from the start of its source (pest's `Position::line_col`), so one compile costs the source's length
/// times its elements (a 1.5 MB body with 10,000 variables took 26 s). Cut into segments of this size,
/// each segment's share is small (at 16 KB segments the same body still took 0.3 s), and the whole is
/// close to linear.
const SEGMENT_BYTES: usize = 1024;

/// Scans a template's source before the parser sees it. Refuses nesting deeper than [`MAX_NESTING`]
/// (conservatively: it may count a level the parser would not, never one less), and answers the byte
/// offsets where the source may be cut into separately compiled segments without changing what it
/// renders: just after a newline outside any tag, block, comment or raw block, with text (not only
/// whitespace) on the line before it after the last tag, and text starting the line after it. Standalone
/// lines and whitespace control (`~`) only ever reach across whitespace, so neither spans such a cut.
fn scan(src: &str) -> Result<Vec<usize>, TemplateIssue> {
    let b = src.as_bytes();
    let mut blocks = 0usize;
    let mut cuts = Vec::new();
    // Text other than whitespace since the last newline and the last tag.
    let mut line_has_text = false;
    let mut i = 0;
    while i < b.len() {
        if !(b[i] == b'{' && b.get(i + 1) == Some(&b'{')) {
            if b[i] == b'\n' {
                let next_is_text = b.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace() && *c != b'{');
                if blocks == 0 && line_has_text && next_is_text {
                    cuts.push(i + 1);
                }
                line_has_text = false;
            } else if !b[i].is_ascii_whitespace() {
                line_has_text = true;
            }
            i += 1;
            continue;
        }
        // One backslash before `{{` escapes it (text); two or more are text and the tag is real.
        if b[..i].iter().rev().take_while(|c| **c == b'\\').count() == 1 {
            i += if b[i + 2..].starts_with(b"{{") { 4 } else { 2 };
            line_has_text = true;
            continue;
        }
        let tag = i;
        line_has_text = false;
        // A raw block: its content runs to the next `{{{{` (its end tag), unparsed.
        if b[i..].starts_with(b"{{{{") && b.get(i + 4) != Some(&b'/') {
            let end = find_from(b, i + 4, b"}}}}")
                .and_then(|e| find_from(b, e + 4, b"{{{{"))
                .and_then(|s| find_from(b, s + 4, b"}}}}"));
            i = end.map_or(b.len(), |e| e + 4);
            continue;
        }
        let mut j = i + 2;
        // Comments: the parser takes `{{!-- ... --}}` when it is closed, else `{{! ... }}`.
        if let Some(end) = b[j..].starts_with(b"!--").then(|| find_from(b, j, b"--}}")).flatten() {
            i = end + 4;
            continue;
        }
        if b.get(j) == Some(&b'!') {
            i = find_from(b, j, b"}}").map_or(b.len(), |e| e + 2);
            continue;
        }
        while j < b.len() && (b[j] == b'{' || b[j] == b'~' || b[j].is_ascii_whitespace()) {
            j += 1;
        }
        match b.get(j) {
            Some(b'#') => {
                blocks += 1;
                if blocks > MAX_NESTING {
                    return Err(issue_at(src, tag, format!("blocks are nested deeper than {MAX_NESTING} levels")));
                }
            }
            Some(b'/') => blocks = blocks.saturating_sub(1),
            _ => {}
        }
        // The rest of the tag, up to a `}}` outside brackets and strings.
        let mut depth = 0usize;
        let mut quote: Option<u8> = None;
        while j < b.len() {
            let c = b[j];
            match quote {
                Some(_) if c == b'\\' => j += 1,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    b'"' | b'\'' => quote = Some(c),
                    b'}' if depth == 0 && b.get(j + 1) == Some(&b'}') => break,
                    b'(' | b'[' | b'{' => {
                        depth += 1;
                        if depth > MAX_NESTING {
                            return Err(issue_at(
                                src,
                                tag,
                                format!("expressions are nested deeper than {MAX_NESTING} levels"),
                            ));
                        }
                    }
                    b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
            j += 1;
        }
        i = j + 2;
    }
    Ok(cuts)
}

fn find_from(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// Refuses partials, inline partials, partial blocks and decorators, in whatever spelling the parser
/// accepted (whitespace control, newlines, dynamic names): a template could recurse through them
/// without end. Decided on the compiled template, not on its text.
fn refuse_partials(t: &Template) -> Result<(), TemplateIssue> {
    use handlebars::template::{Parameter, TemplateElement as E};
    fn params(h: &handlebars::template::HelperTemplate) -> Result<(), TemplateIssue> {
        for p in h.params.iter().chain(h.hash.values()).chain(std::iter::once(&h.name)) {
            if let Parameter::Subexpression(s) = p {
                element(&s.element, None)?;
            }
        }
        for t in [&h.template, &h.inverse].into_iter().flatten() {
            refuse_partials(t)?;
        }
        Ok(())
    }
    fn element(e: &E, pos: Option<(usize, usize)>) -> Result<(), TemplateIssue> {
        match e {
            E::DecoratorExpression(_) | E::DecoratorBlock(_) | E::PartialExpression(_) | E::PartialBlock(_) => {
                Err(TemplateIssue {
                    line: pos.map(|p| p.0),
                    column: pos.map(|p| p.1),
                    message: "partials and decorators are not allowed in templates".into(),
                })
            }
            E::HtmlExpression(h) | E::Expression(h) | E::HelperBlock(h) => params(h),
            E::RawString(_) | E::Comment(_) => Ok(()),
            // An element kind a later Handlebars adds is refused until it is known to be safe.
            _ => Err(TemplateIssue {
                line: pos.map(|p| p.0),
                column: pos.map(|p| p.1),
                message: "this template construct is not supported".into(),
            }),
        }
    }
    for (i, e) in t.elements.iter().enumerate() {
        element(e, t.mapping.get(i).map(|m| (m.0, m.1)))?;
    }
    Ok(())
}

thread_local! {
    /// Steps left to the render running on this thread (rendering is synchronous: set, render, read).
    static STEPS_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

fn charge(steps: u64) -> Result<(), handlebars::RenderError> {
    STEPS_LEFT.with(|left| {
        let now = left.get();
        if now < steps {
            left.set(0);
            return Err(handlebars::RenderErrorReason::Other(format!(
                "the template does more than {MAX_RENDER_STEPS} steps of work"
            ))
            .into());
        }
        left.set(now - steps);
        Ok(())
    })
}

/// About one step per 64 bytes of a JSON value, counted up to `cap` steps.
fn weight(v: &Value, cap: u64) -> u64 {
    let mut stack = vec![v];
    let mut bytes = 0u64;
    while let Some(v) = stack.pop() {
        bytes += match v {
            Value::String(s) => s.len() as u64 + 8,
            Value::Array(a) => {
                stack.extend(a.iter());
                8
            }
            Value::Object(o) => {
                stack.extend(o.iter().map(|(k, v)| {
                    bytes += k.len() as u64;
                    v
                }));
                8
            }
            _ => 8,
        };
        if bytes / 64 >= cap {
            break;
        }
    }
    bytes / 64
}

/// `{{#each}}` as Handlebars has it (`@index`, `@first`, `@last`, `@key`, block parameters, `{{else}}`),
/// charging every pass against the render's step budget.
struct BoundedEach;

impl handlebars::HelperDef for BoundedEach {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &handlebars::Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> handlebars::HelperResult {
        use handlebars::{BlockContext, BlockParams, RenderErrorReason, to_json};
        let value = h.param(0).ok_or(RenderErrorReason::ParamNotFoundForIndex("each", 0))?;
        let Some(t) = h.template() else { return Ok(()) };
        let per_pass = 1 + t.elements.len() as u64;
        let items: Vec<(Option<&String>, &Value)> = match value.value() {
            Value::Array(list) if !list.is_empty() || h.inverse().is_none() => list.iter().map(|v| (None, v)).collect(),
            Value::Object(obj) if !obj.is_empty() || h.inverse().is_none() => {
                obj.iter().map(|(k, v)| (Some(k), v)).collect()
            }
            _ => {
                return match h.inverse() {
                    Some(inverse) => inverse.render(r, ctx, rc, out),
                    None if r.strict_mode() => Err(handlebars::RenderError::strict_error(value.relative_path())),
                    None => Ok(()),
                };
            }
        };
        let base_path = value.context_path();
        let mut block = BlockContext::new();
        match base_path {
            Some(p) => block.base_path_mut().clone_from(p),
            None => block.set_base_value(value.value().clone()),
        }
        rc.push_block(block);
        let len = items.len();
        for (i, (key, v)) in items.into_iter().enumerate() {
            charge(per_pass)?;
            if let Some(block) = rc.block_mut() {
                block.set_local_var("first", to_json(i == 0));
                block.set_local_var("last", to_json(i + 1 == len));
                block.set_local_var("index", to_json(i));
                if let Some(k) = key {
                    block.set_local_var("key", to_json(k));
                }
                let segment = key.cloned().unwrap_or_else(|| i.to_string());
                match base_path {
                    Some(p) if i == 0 => {
                        let mut path = p.clone();
                        path.push(segment);
                        *block.base_path_mut() = path;
                    }
                    Some(_) => {
                        if let Some(last) = block.base_path_mut().last_mut() {
                            *last = segment;
                        }
                    }
                    None => {
                        charge(weight(v, MAX_RENDER_STEPS))?;
                        block.set_base_value(v.clone());
                    }
                }
                let key_json = key.map_or_else(|| to_json(i), to_json);
                let mut params = BlockParams::new();
                let mut any = false;
                if let Some(name) = h.block_param() {
                    add_item(&mut params, name, base_path.is_some(), v)?;
                    any = true;
                } else if let Some((name, key_name)) = h.block_param_pair() {
                    add_item(&mut params, name, base_path.is_some(), v)?;
                    params.add_value(key_name, key_json)?;
                    any = true;
                }
                if any {
                    block.set_block_params(params);
                }
            }
            t.render(r, ctx, rc, out)?;
        }
        rc.pop_block();
        Ok(())
    }
}

fn add_item<'a>(
    params: &mut handlebars::BlockParams<'a>,
    name: &'a str,
    has_path: bool,
    v: &Value,
) -> Result<(), handlebars::RenderError> {
    if has_path { params.add_path(name, Vec::with_capacity(0)) } else { params.add_value(name, v.clone()) }
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
        html.register_helper("each", Box::new(BoundedEach));
        let mut text = Handlebars::new();
        text.register_helper("herald_default", Box::new(fallback));
        text.register_helper("each", Box::new(BoundedEach));
        text.register_escape_fn(handlebars::no_escape);
        Engine { html, text }
    }

    /// Checks a template: its syntax, its nesting, and that it has no partials or decorators.
    pub fn check(&self, src: &str) -> Result<(), TemplateIssue> {
        compile(src).map(|_| ())
    }

    /// Renders a template with variables, stopping at `max_bytes` of output.
    pub fn render(&self, src: &str, vars: &Value, mode: Mode, max_bytes: usize) -> Result<String, TemplateIssue> {
        let prepared = self.prepare(src, mode)?;
        self.render_prepared(&prepared, vars, max_bytes)
    }

    /// Checks and compiles a template once, for rendering it many times (a campaign's batch).
    pub fn prepare(&self, src: &str, mode: Mode) -> Result<Prepared, TemplateIssue> {
        Ok(Prepared { template: compile(src)?, mode })
    }

    /// Text that renders as itself, whatever `{{` it holds (a message relayed over SMTP is the caller's,
    /// not a template).
    pub fn literal(&self, text: &str, mode: Mode) -> Prepared {
        // One text element (a compiled one-character template gives the shape and its position map).
        let mut template = Template::compile("x").unwrap_or_default();
        template.elements = vec![handlebars::template::TemplateElement::RawString(text.to_string())];
        Prepared { template, mode }
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
        STEPS_LEFT.with(|left| left.set(MAX_RENDER_STEPS));
        let rendered = p.template.render(hb, &ctx, &mut rc, &mut out);
        STEPS_LEFT.with(|left| left.set(u64::MAX));
        rendered.map_err(failed)?;
        String::from_utf8(out.buf).map_err(|_| TemplateIssue {
            line: None,
            column: None,
            message: "invalid UTF-8 output".into(),
        })
    }
}

/// Compiles a template after the checks that keep the parser and renderer bounded.
fn compile(src: &str) -> Result<Template, TemplateIssue> {
    compile_in_segments(&preprocess(src), SEGMENT_BYTES)
}

/// Compiles `source` in segments of about `segment` bytes cut where [`scan`] allows, and joins their
/// elements into one template (line numbers counted from the start of the whole source).
fn compile_in_segments(source: &str, segment: usize) -> Result<Template, TemplateIssue> {
    let cuts = scan(source)?;
    let mut bounds = vec![0];
    for cut in cuts {
        if cut - bounds[bounds.len() - 1] >= segment && cut < source.len() {
            bounds.push(cut);
        }
    }
    bounds.push(source.len());
    let mut whole: Option<Template> = None;
    let mut lines_before = 0;
    for pair in bounds.windows(2) {
        let part = &source[pair[0]..pair[1]];
        let mut t = Template::compile(part).map_err(|e| {
            let (line, column) = e.pos().map_or((None, None), |(l, c)| (Some(l + lines_before), Some(c)));
            TemplateIssue { line, column, message: e.reason().to_string() }
        })?;
        shift_lines(&mut t, lines_before);
        match whole.as_mut() {
            None => whole = Some(t),
            Some(w) => {
                w.elements.extend(t.elements);
                w.mapping.extend(t.mapping);
            }
        }
        lines_before += part.matches('\n').count();
    }
    let template = whole.unwrap_or_default();
    refuse_partials(&template)?;
    Ok(template)
}

/// Adds `lines` to every line number of a compiled segment, its blocks' templates included.
fn shift_lines(t: &mut Template, lines: usize) {
    use handlebars::template::TemplateElement as E;
    if lines == 0 {
        return;
    }
    for m in &mut t.mapping {
        m.0 += lines;
    }
    for e in &mut t.elements {
        if let E::HelperBlock(h) = e {
            for inner in [&mut h.template, &mut h.inverse].into_iter().flatten() {
                shift_lines(inner, lines);
            }
        }
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
    fn a_literal_renders_as_itself_in_both_modes() {
        let e = Engine::new();
        let text = "Hi {{name}} {{> x}} \\{{y}} <b>&</b>";
        for mode in [Mode::Html, Mode::Text] {
            let p = e.literal(text, mode);
            assert_eq!(e.render_prepared(&p, &json!({"name": "Ann"}), 1 << 20).unwrap(), text);
        }
    }

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
        assert!(e.check("{{#each items}}{{this}}{{/each}}").is_ok());
    }

    #[test]
    fn partials_and_decorators_are_refused_in_every_spelling() {
        let e = Engine::new();
        let crash = "{{~#*inline \"a\"}}{{\n> b}}{{/inline}}{{~#*inline \"b\"}}{{\n> a}}{{/inline}}{{\n> a}}";
        let refused = [
            crash,
            "{{> a}}",
            "{{~> a}}",
            "{{\n>\na}}",
            "{{ ~ > a ~ }}",
            "{{#> layout}}x{{/layout}}",
            "{{~#>\tlayout}}x{{/layout}}",
            "{{#*inline \"x\"}}{{/inline}}",
            "{{~ #*inline 'x'}}{{/inline}}",
            "{{*decorator}}",
            "{{~*decorator~}}",
            "{{> (lookup . \"name\")}}",
            "{{#if x}}{{#each y}}{{\n  > deep}}{{/each}}{{/if}}",
            "{{#if x}}a{{else}}{{> b}}{{/if}}",
        ];
        for src in refused {
            let err = e.check(src).expect_err(src);
            assert!(err.message.contains("partials") || err.line.is_some(), "{src}: {err:?}");
            assert!(e.render(src, &json!({}), Mode::Html, 10_000).is_err(), "{src}");
        }
        let err = e.check("ok\n{{> evil}}").unwrap_err();
        assert_eq!((err.line, err.message.contains("partials")), (Some(2), true), "{err:?}");
        // Text that merely looks like one stays text.
        for src in ["a > b", "{{!-- {{> x}} --}}", "\\{{> x}}", "{{{{raw}}}}{{> x}}{{{{/raw}}}}"] {
            e.check(src).unwrap_or_else(|err| panic!("{src}: {err:?}"));
        }
    }

    #[test]
    fn nesting_is_bounded_before_parsing() {
        let e = Engine::new();
        let nested = |n: usize| format!("{}x{}", "{{#if a}}".repeat(n), "{{/if}}".repeat(n));
        assert_eq!(e.render(&nested(MAX_NESTING), &json!({"a": true}), Mode::Html, 100).unwrap(), "x");
        for n in [MAX_NESTING + 1, 10_000, 200_000] {
            let err = e.check(&nested(n)).unwrap_err();
            assert!(err.message.contains("nested deeper"), "{err:?}");
        }
        let parens = |n: usize| format!("{{{{lookup {}this \"a\"{}}}}}", "(lookup ".repeat(n), ")".repeat(n));
        e.check(&parens(3)).unwrap_or_else(|err| panic!("{}: {err:?}", parens(3)));
        for n in [MAX_NESTING + 1, 100_000] {
            assert!(e.check(&parens(n)).unwrap_err().message.contains("nested deeper"));
        }
        let arrays = format!("{{{{x {}}}}}", "[".repeat(100_000));
        assert!(e.check(&arrays).is_err());
        // Closers the parser reads as text (escaped, or inside a raw block) do not lower the count.
        for fake in ["{{#if a}}\\{{/if}}", "{{#if a}}{{{{raw}}}}{{/if}}{{{{/raw}}}}"] {
            let err = e.check(&fake.repeat(100_000)).unwrap_err();
            assert!(err.message.contains("nested deeper"), "{fake}: {err:?}");
        }
        // An unclosed `{{!--` comment is the short form to the parser, so the scan does not skip the rest.
        assert!(e.check(&format!("{{{{!-- }}}}{}", nested(MAX_NESTING + 1))).is_err());
    }

    #[test]
    fn loops_stop_at_the_step_budget() {
        let e = Engine::new();
        let vars = json!({ "a": (0..700).collect::<Vec<_>>() });
        let src = "{{#each a}}{{#each ../a}}{{#each ../../a}}{{/each}}{{/each}}{{/each}}";
        let err = e.render(src, &vars, Mode::Html, 1_000_000).unwrap_err();
        assert!(err.message.contains("steps of work"), "{err:?}");
        // Each keeps what Handlebars gives a loop.
        let vars = json!({ "xs": ["a", "b"], "o": {"k": 1, "l": 2}, "n": [] });
        let cases = [
            ("{{#each xs}}{{@index}}{{this}}{{#if @first}}F{{/if}}{{#if @last}}L{{/if}},{{/each}}", "0aF,1bL,"),
            ("{{#each o}}{{@key}}={{this}};{{/each}}", "k=1;l=2;"),
            ("{{#each xs as |x i|}}{{i}}:{{x}} {{/each}}", "0:a 1:b "),
            ("{{#each n}}x{{else}}empty{{/each}}", "empty"),
            ("{{#each missing}}x{{else}}none{{/each}}", "none"),
            ("{{#each xs}}{{../o.k}}{{/each}}", "11"),
            ("{{#each (lookup this \"xs\")}}[{{this}}]{{/each}}", "[a][b]"),
        ];
        for (src, want) in cases {
            assert_eq!(e.render(src, &vars, Mode::Html, 1_000).unwrap(), want, "{src}");
        }
    }

    /// Property: any template built from Handlebars' pieces (blocks, partial syntax, whitespace control,
    /// comments, raw blocks, brackets) is either refused when checked or renders within the limits.
    /// Never a crash.
    #[test]
    fn generated_templates_are_refused_or_rendered_within_limits() {
        use rand::{Rng, SeedableRng};
        const PIECES: &[&str] = &[
            "{{",
            "}}",
            "{{~",
            "~}}",
            "{{{",
            "}}}",
            "#",
            "/",
            ">",
            "*",
            "#>",
            "#*inline \"a\"",
            "{{/inline}}",
            "{{> a}}",
            "{{#> a}}",
            "{{/a}}",
            "{{*d}}",
            "{{#each xs}}",
            "{{/each}}",
            "{{#if x}}",
            "{{/if}}",
            "{{else}}",
            "{{#with o}}",
            "{{/with}}",
            "{{x}}",
            "{{{x}}}",
            "{{x ?? \"d\"}}",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "lookup",
            " ",
            "\n",
            "\t",
            "~",
            "a",
            "b",
            "x",
            "xs",
            "@index",
            "this",
            "../",
            "{{!--",
            "--}}",
            "{{!",
            "\\{{",
            "{{{{raw}}}}",
            "{{{{/raw}}}}",
            "\"",
            "'",
            "as |v i|",
            "=",
        ];
        let e = Engine::new();
        let vars = json!({ "x": "<b>", "xs": (0..5).collect::<Vec<_>>(), "o": {"a": 1} });
        let mut rng = rand::rngs::StdRng::seed_from_u64(29);
        let (mut refused, mut rendered) = (0, 0);
        for round in 0..20_000 {
            let n = rng.random_range(1..40);
            let mut src: String = (0..n).map(|_| PIECES[rng.random_range(0..PIECES.len())]).collect();
            if round % 50 == 0 {
                // Deep nesting, sometimes past the limit, sometimes far past what the parser's stack holds.
                let depth = if round % 1000 == 0 { 200_000 } else { rng.random_range(1..80) };
                src = format!("{}{src}{}", "{{#if x}}".repeat(depth), "{{/if}}".repeat(depth));
            }
            if round % 100 == 1 {
                // Partials that call each other, with the generated noise between them.
                src = format!(
                    "{{{{~#*inline \"a\"}}}}{{{{\n> b}}}}{{{{/inline}}}}{src}{{{{~#*inline \"b\"}}}}{{{{\n> a}}}}{{{{/inline}}}}{{{{\n> a}}}}"
                );
            }
            match e.check(&src) {
                Err(_) => refused += 1,
                Ok(()) => {
                    for mode in [Mode::Html, Mode::Text] {
                        if let Ok(out) = e.render(&src, &vars, mode, 100_000) {
                            assert!(out.len() <= 100_000);
                        }
                    }
                    rendered += 1;
                }
            }
        }
        assert!(refused > 1_000 && rendered > 1_000, "refused {refused}, rendered {rendered}");
    }

    /// Property: a template compiled in segments (cut at every place `scan` allows) renders exactly what
    /// one compilation of the whole renders, whitespace control and standalone lines included.
    #[test]
    fn segmented_compilation_renders_like_one_compilation() {
        use rand::{Rng, SeedableRng};
        const LEAVES: &[&str] = &[
            "\n",
            "\n",
            "\n\n",
            "  ",
            "\t",
            "x",
            "{{x}}",
            "{{{x}}}",
            "{{~x}}",
            "{{x~}}",
            "{{~x~}}",
            "{{@index}}",
            "{{!-- c --}}",
            "{{! c }}",
            "\n{{!-- c --}}\n",
            "{{{{raw}}}}{{x}}\n{{{{/raw}}}}",
            "\\{{x}}",
            "\\\\{{x}}",
            "{{x ?? \"d\"}}",
            "<p>",
            "{{#with o}}{{a}}{{/with}}",
            " \n ",
        ];
        const BLOCKS: &[(&str, &str)] =
            &[("if x", "if"), ("unless x", "unless"), ("each xs", "each"), ("with o", "with"), ("if missing", "if")];
        fn generate(rng: &mut rand::rngs::StdRng, depth: usize) -> String {
            let mut out = String::new();
            for _ in 0..rng.random_range(1..6) {
                if depth < 3 && rng.random_bool(0.3) {
                    let (open, close) = BLOCKS[rng.random_range(0..BLOCKS.len())];
                    let t = |rng: &mut rand::rngs::StdRng| if rng.random_bool(0.3) { "~" } else { "" };
                    let ws = |rng: &mut rand::rngs::StdRng| ["", "\n", "  \n", "\n  "][rng.random_range(0..4)];
                    out.push_str(ws(rng));
                    out.push_str(&format!("{{{{{}#{open}{}}}}}", t(rng), t(rng)));
                    out.push_str(ws(rng));
                    out.push_str(&generate(rng, depth + 1));
                    if rng.random_bool(0.3) {
                        out.push_str(&format!("{}{{{{{}else{}}}}}{}", ws(rng), t(rng), t(rng), ws(rng)));
                        out.push_str(&generate(rng, depth + 1));
                    }
                    out.push_str(ws(rng));
                    out.push_str(&format!("{{{{{}/{close}{}}}}}", t(rng), t(rng)));
                    out.push_str(ws(rng));
                } else {
                    out.push_str(LEAVES[rng.random_range(0..LEAVES.len())]);
                }
            }
            out
        }
        let e = Engine::new();
        let vars = json!({ "x": "<b>", "xs": [1, 2], "o": {"a": 1} });
        let mut rng = rand::rngs::StdRng::seed_from_u64(16);
        let mut compared = 0;
        for _ in 0..3_000 {
            let src = generate(&mut rng, 0);
            let source = preprocess(&src);
            let Ok(one) = Template::compile(&source) else { continue };
            let cut = compile_in_segments(&source, 1)
                .unwrap_or_else(|err| panic!("{src:?} compiles whole but not in segments: {err:?}"));
            for mode in [Mode::Html, Mode::Text] {
                let render = |t: &Template| {
                    e.render_prepared(&Prepared { template: t.clone(), mode }, &vars, 100_000).map_err(|i| i.message)
                };
                assert_eq!(render(&cut), render(&one), "{src:?}");
            }
            compared += 1;
        }
        assert!(compared > 1_000, "compared {compared}");
    }

    #[test]
    fn a_large_template_with_many_variables_compiles_in_segments() {
        let body: String = (0..5_000).map(|i| format!("<p>{{{{name}}}} {i} {}</p>\n", "x".repeat(100))).collect();
        let e = Engine::new();
        let out = e.render(&body, &json!({"name": "Ada"}), Mode::Html, 10_000_000).unwrap();
        assert_eq!(out.matches("Ada").count(), 5_000);
        // Errors name the line of the whole source, not of a segment.
        let bad = format!("{body}{{{{#if x}}}}");
        assert_eq!(e.check(&bad).unwrap_err().line, Some(5_001));
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
