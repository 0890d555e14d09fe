//! CSV import rules (docs/behaviour.md#bulk-changes-and-import): the file's checks, its header, and
//! each row turned into a contact upsert or a reported bad row. Pure: the job reads the file from the
//! store and writes what these rows say.

use serde_json::{Map, Value};

use super::contacts::{RESERVED_KEYS, is_email, normalize_email};

/// Largest `data` a row may carry, serialised (the contact data limit).
const MAX_ROW_DATA: usize = 64 * 1024;
/// Longest column name kept (a longer one is a bad header).
const MAX_COLUMN_NAME: usize = 128;
/// Most columns a file may have.
const MAX_COLUMNS: usize = 500;
/// Characters of a bad row's email kept in its report.
const MAX_REPORTED_EMAIL: usize = 254;

/// What is wrong with a file as a whole (422, naming `file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem(pub String);

/// A checked file: its text without a byte-order mark, its delimiter, its header and its row count.
#[derive(Debug, Clone)]
pub struct Checked {
    pub text: String,
    pub header: Header,
    pub rows: usize,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Header {
    pub delimiter: u8,
    pub columns: Vec<String>,
    /// Index of the `email` column.
    pub email: usize,
    /// Index of the `subscribed` column, when the file has one.
    pub subscribed: Option<usize>,
}

/// One row: a contact to upsert, or why it cannot be.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Contact { line: u64, email: String, subscribed: Option<bool>, data: Map<String, Value> },
    Bad { line: u64, email: String, reason: String },
}

/// Checks a whole file: UTF-8 (a byte-order mark is dropped), a header row with an `email` column,
/// comma or semicolon separated (whichever the header line has more of), every record readable as CSV.
pub fn check(bytes: &[u8]) -> Result<Checked, FileProblem> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FileProblem(format!("the file is not UTF-8 text (invalid byte at offset {})", e.valid_up_to())))?
        .to_string();
    let first = text.lines().next().unwrap_or("");
    if first.trim().is_empty() {
        return Err(FileProblem("the file has no header row".into()));
    }
    let delimiter = if first.matches(';').count() > first.matches(',').count() { b';' } else { b',' };
    let mut reader = reader(&text, delimiter);
    let columns: Vec<String> = reader
        .headers()
        .map_err(|e| FileProblem(format!("the header row is not CSV: {e}")))?
        .iter()
        .map(|c| c.trim().to_string())
        .collect();
    if columns.len() > MAX_COLUMNS {
        return Err(FileProblem(format!("the file has {} columns; at most {MAX_COLUMNS}", columns.len())));
    }
    if let Some(long) = columns.iter().find(|c| c.chars().count() > MAX_COLUMN_NAME) {
        let start: String = long.chars().take(20).collect();
        return Err(FileProblem(format!("column {start:?}… is longer than {MAX_COLUMN_NAME} characters")));
    }
    let find = |name: &str| columns.iter().position(|c| c.eq_ignore_ascii_case(name));
    let Some(email) = find("email") else {
        return Err(FileProblem("the header row has no email column".into()));
    };
    let subscribed = find("subscribed");
    let mut rows = 0;
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => rows += 1,
            Ok(false) => break,
            Err(e) => return Err(FileProblem(format!("the file is not CSV: {e}"))),
        }
    }
    Ok(Checked { header: Header { delimiter, columns, email, subscribed }, text, rows })
}

fn reader(text: &str, delimiter: u8) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).has_headers(true).from_reader(text.as_bytes())
}

/// The rows of a checked file from row `skip` (0-based, after the header) on, lazily.
pub fn rows<'a>(text: &'a str, header: &'a Header, skip: usize) -> impl Iterator<Item = Row> + 'a {
    let mut reader = reader(text, header.delimiter);
    let mut record = csv::StringRecord::new();
    let mut index = 0usize;
    std::iter::from_fn(move || {
        loop {
            match reader.read_record(&mut record) {
                Ok(true) => {}
                Ok(false) => return None,
                // `check` read the whole file; should the text differ, the rest is one bad row.
                Err(e) => {
                    let line = e.position().map(|p| p.line()).unwrap_or(0);
                    return Some(Row::Bad { line, email: String::new(), reason: format!("not CSV: {e}") });
                }
            }
            index += 1;
            if index > skip {
                let line = record.position().map(|p| p.line()).unwrap_or(0);
                return Some(row(header, &record, line));
            }
        }
    })
}

fn row(header: &Header, record: &csv::StringRecord, line: u64) -> Row {
    let email = record.get(header.email).map(|e| normalize_email(e.trim())).unwrap_or_default();
    // A report names the email as far as an address can be long, whatever the cell held.
    let bad = |reason: String| Row::Bad { line, email: email.chars().take(MAX_REPORTED_EMAIL).collect(), reason };
    if record.len() != header.columns.len() {
        return bad(format!("expected {} columns, found {}", header.columns.len(), record.len()));
    }
    if email.is_empty() {
        return bad("no email".into());
    }
    if !is_email(&email) {
        return bad("invalid email".into());
    }
    let subscribed = match header.subscribed.and_then(|i| record.get(i)).map(str::trim) {
        None | Some("") => None,
        Some(v) => match parse_bool(v) {
            Some(b) => Some(b),
            None => return bad(format!("subscribed must be true or false, got {v:?}")),
        },
    };
    let mut data = Map::new();
    for (i, value) in record.iter().enumerate() {
        let name = &header.columns[i];
        if i == header.email || Some(i) == header.subscribed || name.is_empty() || is_reserved(name) {
            continue;
        }
        let value = value.trim();
        if !value.is_empty() {
            data.insert(name.clone(), typed(value));
        }
    }
    if serde_json::to_vec(&data).map(|b| b.len()).unwrap_or(usize::MAX) > MAX_ROW_DATA {
        return bad(format!("the row's data is over {} KB", MAX_ROW_DATA / 1024));
    }
    Row::Contact { line, email, subscribed, data }
}

fn is_reserved(column: &str) -> bool {
    RESERVED_KEYS.iter().any(|k| k.eq_ignore_ascii_case(column))
}

fn parse_bool(v: &str) -> Option<bool> {
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// A cell's value: `true`/`false` a boolean, a finite decimal number a number (integers stay integers;
/// a leading zero such as a postcode `01234` stays text), anything else the text itself.
pub fn typed(v: &str) -> Value {
    if let Some(b) = parse_bool(v) {
        return Value::Bool(b);
    }
    let digits = v.strip_prefix('-').unwrap_or(v);
    let leading_zero = digits.len() > 1 && digits.starts_with('0') && !digits.starts_with("0.");
    let numeric = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.');
    if numeric && !leading_zero {
        if let Ok(i) = v.parse::<i64>() {
            return Value::from(i);
        }
        if let Some(n) = v.parse::<f64>().ok().filter(|f| f.is_finite()).and_then(serde_json::Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_file_is_checked_whole_and_its_header_found() {
        let ok = check(b"\xEF\xBB\xBFName;EMAIL;plan\nAda;ada@x.test;pro\n").unwrap();
        assert_eq!((ok.header.delimiter, ok.header.email, ok.rows), (b';', 1, 1));
        assert_eq!(ok.header.columns, ["Name", "EMAIL", "plan"]);
        assert!(check(b"name,plan\nAda,pro\n").unwrap_err().0.contains("no email column"));
        assert!(check(b"email\n\xFF\n").unwrap_err().0.contains("not UTF-8"));
        assert!(check(b"").unwrap_err().0.contains("no header"));
    }

    #[test]
    fn rows_carry_their_line_numbers_types_and_problems() {
        let text = "email,age,vip,zip,note,plunk_id,subscribed\n\
                    Ada@X.test,36,TRUE,01234,\"two\nlines\",p1,false\n\
                    ,1,true,1,x,p,\n\
                    bad-address,1,true,1,x,p,\n\
                    bo@x.test,1\n\
                    cy@x.test,2.5,false,,,,yes\n\
                    di@x.test,-7,no,0,,,\n";
        let c = check(text.as_bytes()).unwrap();
        assert_eq!(c.rows, 6);
        let rows: Vec<Row> = rows(&c.text, &c.header, 0).collect();
        assert_eq!(
            rows[0],
            Row::Contact {
                line: 2,
                email: "ada@x.test".into(),
                subscribed: Some(false),
                data: json!({ "age": 36, "vip": true, "zip": "01234", "note": "two\nlines" })
                    .as_object()
                    .unwrap()
                    .clone(),
            }
        );
        let bad = |r: &Row| match r {
            Row::Bad { line, reason, .. } => (*line, reason.clone()),
            other => panic!("{other:?}"),
        };
        assert_eq!(bad(&rows[1]), (4, "no email".to_string()), "the quoted newline moved the line count");
        assert_eq!(bad(&rows[2]), (5, "invalid email".to_string()));
        assert_eq!(bad(&rows[3]).0, 6);
        assert!(bad(&rows[3]).1.contains("expected 7 columns, found 2"));
        assert!(bad(&rows[4]).1.contains("subscribed must be true or false"));
        match &rows[5] {
            Row::Contact { data, subscribed, .. } => {
                assert_eq!(Value::Object(data.clone()), json!({ "age": -7, "vip": "no", "zip": 0 }));
                assert_eq!(*subscribed, None);
            }
            other => panic!("{other:?}"),
        }
        let long = format!("email\n{}\n", "x".repeat(10_000));
        let c2 = check(long.as_bytes()).unwrap();
        match super::rows(&c2.text, &c2.header, 0).next() {
            Some(Row::Bad { email, .. }) => {
                assert_eq!(email.chars().count(), 254, "a report keeps an address's length")
            }
            other => panic!("{other:?}"),
        }
        let rest: Vec<Row> = super::rows(&c.text, &c.header, 4).collect();
        assert_eq!(rest.len(), 2, "skipping resumes after the rows already done");
    }
}
