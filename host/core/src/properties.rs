//! Property tests of the parsers and builders a request feeds (issue 60): thousands of generated inputs
//! each, from fixed seeds (a failure reproduces), checking that nothing panics and that what goes in
//! comes back out: conditions (parse, then compile), templates (check, compile, render), CSV files
//! (check, then read row by row), and MIME messages with encoded headers (build, then parse back).

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

use crate::domain::conditions;
use crate::domain::import;
use crate::domain::templating::{Engine, Mode};

const CASES: usize = 2_000;

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.random_range(0..from.len())]
}

/// A string of pieces that mean something to the parser under test, and some that do not.
fn soup(rng: &mut StdRng, pieces: &[&str], max: usize) -> String {
    let n = rng.random_range(0..max);
    (0..n).map(|_| pick(rng, pieces)).collect()
}

/// A JSON value built from condition words, up to `depth` deep.
fn condition_json(rng: &mut StdRng, depth: usize) -> Value {
    const KEYS: &[&str] = &["logic", "groups", "filters", "field", "operator", "value", "unit", "conditions", "x"];
    const WORDS: &[&str] = &[
        "AND",
        "OR",
        "data.plan",
        "email",
        "subscribed",
        "event.signup",
        "segment.s1",
        "equals",
        "notEquals",
        "contains",
        "greaterThan",
        "lessThan",
        "exists",
        "notExists",
        "within",
        "olderThan",
        "days",
        "hours",
        "",
        "data.",
        "event.",
        "data.a.b",
        "created_at",
        "in",
        "triggered",
        "notTriggered",
        "between",
    ];
    match rng.random_range(0..if depth == 0 { 4 } else { 7 }) {
        0 => Value::String(pick(rng, WORDS).into()),
        1 => json!(rng.random_range(-5i64..100_000)),
        2 => Value::Bool(rng.random()),
        3 => Value::Null,
        4 | 5 => {
            let mut m = Map::new();
            for _ in 0..rng.random_range(0..5) {
                m.insert(pick(rng, KEYS).into(), condition_json(rng, depth - 1));
            }
            Value::Object(m)
        }
        _ => Value::Array((0..rng.random_range(0..4)).map(|_| condition_json(rng, depth - 1)).collect()),
    }
}

#[test]
fn any_json_parses_as_a_condition_or_is_refused_and_what_parses_compiles_or_is_refused() {
    let mut rng = StdRng::seed_from_u64(60);
    let mut parsed = 0;
    for _ in 0..CASES * 5 {
        let v = condition_json(&mut rng, 5);
        if let Ok(tree) = conditions::parse(&v, &|name| name == "plugin.op") {
            parsed += 1;
            let _ = crate::store::segments::compile(&tree, &HashMap::new(), 1_800_000_000_000);
            let _ = (tree.data_keys(), tree.events(), tree.segments(), tree.filters().len());
        }
    }
    // Well-formed trees are generated too, not only refusals.
    let mut rng = StdRng::seed_from_u64(61);
    for _ in 0..CASES {
        let filter = conditions::filter_json(
            pick(&mut rng, &["data.plan", "email", "subscribed", "data.age"]),
            pick(&mut rng, &["equals", "notEquals", "contains", "exists"]),
            json!(soup(&mut rng, &["a", "é", "%", "_", "'", "\\", " "], 8)),
            None,
        );
        let tree = json!({ "logic": "AND", "groups": [{ "filters": [filter] }] });
        if let Ok(t) = conditions::parse(&tree, &|_| false) {
            parsed += 1;
            assert_eq!(t.filters().len(), 1);
            let _ = crate::store::segments::compile(&t, &HashMap::new(), 1_800_000_000_000);
        }
    }
    assert!(parsed > CASES / 2, "only {parsed} trees parsed");
}

#[test]
fn any_template_is_refused_or_renders_within_its_limit_and_a_literal_renders_as_itself() {
    const PIECES: &[&str] = &[
        "{{",
        "}}",
        "{{{",
        "}}}",
        "{{#if a}}",
        "{{/if}}",
        "{{#each items}}",
        "{{/each}}",
        "{{else}}",
        "{{> p}}",
        "{{!--",
        "--}}",
        "{{!",
        "\\{{",
        "name",
        "items",
        "this",
        "@index",
        "../",
        " ",
        "<p>",
        "</p>",
        "é",
        "\n",
        "{{lookup",
        "(",
        ")",
        "\"",
        "{{#with a}}",
        "{{/with}}",
        "{{{{raw}}}}",
        "{{{{/raw}}}}",
        "{{~",
        "~}}",
        "=",
    ];
    let engine = Engine::new();
    let vars = json!({ "name": "Ann", "a": true, "items": [1, 2, 3], "p": "x" });
    let mut rng = StdRng::seed_from_u64(62);
    let mut rendered = 0;
    for _ in 0..CASES * 2 {
        let src = soup(&mut rng, PIECES, 24);
        for mode in [Mode::Html, Mode::Text] {
            if let Ok(p) = engine.prepare(&src, mode)
                && let Ok(out) = engine.render_prepared(&p, &vars, 64 * 1024)
            {
                rendered += 1;
                assert!(out.len() <= 64 * 1024);
            }
        }
        let text: String = soup(&mut rng, PIECES, 24);
        for mode in [Mode::Html, Mode::Text] {
            let p = engine.literal(&text, mode);
            assert_eq!(engine.render_prepared(&p, &vars, 1 << 20).unwrap(), text);
        }
    }
    assert!(rendered > CASES / 4, "only {rendered} templates rendered");
}

#[test]
fn any_file_is_checked_or_refused_and_written_rows_read_back_the_same() {
    const PIECES: &[&str] =
        &["email", ",", ";", "\"", "\n", "\r\n", "a@b.co", "x", "é", " ", "plan", "\"\"", "\u{feff}"];
    let mut rng = StdRng::seed_from_u64(63);
    for _ in 0..CASES * 2 {
        let mut bytes = if rng.random() { b"email,plan\n".to_vec() } else { Vec::new() };
        bytes.extend(soup(&mut rng, PIECES, 40).bytes());
        if rng.random_range(0..10) == 0 {
            bytes.push(0xff);
        }
        if let Ok(checked) = import::check(&bytes) {
            let rows = import::rows(&checked.text, &checked.header, 0).count();
            assert_eq!(rows, checked.rows, "{:?}", String::from_utf8_lossy(&bytes));
        }
    }
    // Written by a CSV writer, read back value for value.
    let mut rng = StdRng::seed_from_u64(64);
    for case in 0..CASES {
        let values: Vec<String> = (0..rng.random_range(1..6))
            .map(|_| soup(&mut rng, &["a", "\"", ",", ";", "\n", "é", " x", "1"], 6))
            .collect();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(["email", "note"]).unwrap();
        for (i, v) in values.iter().enumerate() {
            w.write_record([format!("p{case}-{i}@example.org").as_str(), v.as_str()]).unwrap();
        }
        let bytes = w.into_inner().unwrap();
        let checked = import::check(&bytes).unwrap_or_else(|e| panic!("{e:?}: {:?}", String::from_utf8_lossy(&bytes)));
        let rows: Vec<import::Row> = import::rows(&checked.text, &checked.header, 0).collect();
        assert_eq!(rows.len(), values.len());
        for (row, v) in rows.iter().zip(&values) {
            let import::Row::Contact { data, .. } = row else { panic!("{row:?}") };
            let got = data.get("note").cloned().unwrap_or(Value::Null);
            let want = import::typed(v.trim());
            assert!(got == want || (v.trim().is_empty() && got == Value::Null), "{v:?}: {got:?} != {want:?}");
        }
    }
}

#[test]
fn any_subject_and_sender_name_survive_the_message_and_come_back_from_a_parser() {
    const PIECES: &[&str] = &[
        "Hello",
        " ",
        "é",
        "ü",
        "日本",
        "😀",
        "=?utf-8?q?x?=",
        ":",
        ";",
        "\"",
        "<",
        ">",
        ",",
        "(",
        ")",
        "\\",
        "@",
        "_",
        "=",
        "?",
        "\t",
        "long-word-without-spaces-that-goes-on-and-on-and-on",
    ];
    let mut rng = StdRng::seed_from_u64(65);
    for _ in 0..CASES {
        let subject = soup(&mut rng, PIECES, 30).trim().to_string();
        let name = soup(&mut rng, PIECES, 8).replace(['\t'], " ").trim().to_string();
        let e = crate::store::emails::EmailRow {
            id: uuid::Uuid::now_v7().to_string(),
            project: "p".into(),
            contact: String::new(),
            recipient: "a@example.org".into(),
            recipient_name: None,
            from: "hi@shop.test".into(),
            from_name: (!name.is_empty()).then(|| name.clone()),
            reply_to: None,
            subject: subject.clone(),
            html: "<p>Hi</p>".into(),
            text: "Hi".into(),
            headers: serde_json::to_string(&[["X-Note", subject.as_str()]]).unwrap(),
            attachments: std::sync::Arc::from("[]"),
            kind: "TRANSACTIONAL".into(),
            template: None,
            campaign: None,
            message_id: "<m@shop.test>".into(),
            status: crate::domain::status::EmailStatus::Pending,
            error: None,
            sent_at: None,
            created_at: 0,
            updated_at: 0,
            depth: None,
            attempts: None,
            next_attempt_at: None,
            resent_at: None,
        };
        let Ok(raw) = crate::services::delivery::build_message(&e, 1_800_000_000_000) else { continue };
        let m = mail_parser::MessageParser::default().parse(&raw).expect("a message Herald built parses");
        let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(norm(m.subject().unwrap_or("")), norm(&subject), "{}", String::from_utf8_lossy(&raw));
        if !name.is_empty() {
            let got = m.from().and_then(|a| a.first()).and_then(|a| a.name()).unwrap_or("");
            assert_eq!(norm(got), norm(&name), "{}", String::from_utf8_lossy(&raw));
        }
        assert!(raw.split(|&b| b == b'\n').all(|l| l.len() <= 1000), "a line over 998 characters");
    }
}
