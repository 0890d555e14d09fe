//! The whole database as SurrealQL, at one moment, and back (docs/behaviour.md#backups).
//!
//! A snapshot is SurrealDB's own export: every definition and every record, read in one read-only
//! transaction, so it is consistent however busy the writers are. [`RecordCounter`] reads that text
//! as it streams by and counts the records of each table, so the manifest of a backup states what the
//! snapshot holds (a count taken by a query would be of another moment). A restore imports the text
//! into an empty database.

use std::collections::BTreeMap;
use std::path::Path;

use futures_util::{Stream, StreamExt};

use super::{Conn, Store, StoreError, count_of};
use crate::vars;

impl Store {
    /// A snapshot of the whole database as SurrealQL, in pieces as SurrealDB writes them. Only the
    /// engines in this process can be read this way (the embedded one and `mem://`); a SurrealDB server
    /// has `surreal export`.
    pub async fn snapshot(&self) -> Result<impl Stream<Item = Result<Vec<u8>, StoreError>> + use<>, StoreError> {
        let backup = match &self.db {
            Conn::Local(db, _) => db.export(()).await,
            Conn::Any(db) => db.export(()).await,
        };
        let backup = backup.map_err(|e| StoreError::Db(format!("cannot read a snapshot: {e}")))?;
        Ok(backup.map(|piece| piece.map_err(|e| StoreError::Db(format!("the snapshot broke off: {e}")))))
    }

    /// Runs a snapshot's SurrealQL (a file [`Store::snapshot`] wrote) against this database.
    pub async fn import_snapshot(&self, file: &Path) -> Result<(), StoreError> {
        let done = match &self.db {
            Conn::Local(db, _) => db.import(file).await,
            Conn::Any(db) => db.import(file).await,
        };
        done.map_err(|e| StoreError::Db(format!("cannot import {}: {e}", file.display())))
    }

    /// Records in each table of the database, counted now.
    pub async fn table_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let info = self.query("INFO FOR DB", vars! {}).await?.value(0)?;
        let names: Vec<String> =
            info.get("tables").and_then(|t| t.as_object()).map(|t| t.keys().cloned().collect()).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for name in names {
            let sql = "SELECT count() AS n FROM type::table($t) GROUP ALL";
            let n = count_of(self.query(sql, vars! { "t": name.clone() }).await?.value(0)?)?;
            counts.insert(name, n.max(0) as u64);
        }
        Ok(counts)
    }

    /// The newest migration the database has applied.
    pub async fn last_migration(&self) -> Result<Option<String>, StoreError> {
        let sql = "SELECT VALUE name FROM migration ORDER BY name DESC LIMIT 1";
        Ok(self.query(sql, vars! {}).await?.all::<String>(0)?.into_iter().next())
    }

    /// Whether the database holds no table at all (a restore goes only into such a one).
    pub async fn is_empty(&self) -> Result<bool, StoreError> {
        let info = self.query("INFO FOR DB", vars! {}).await?.value(0)?;
        Ok(info.get("tables").and_then(|t| t.as_object()).is_none_or(|t| t.is_empty()))
    }
}

/// Counts the records of each table in the SurrealQL of a snapshot as it streams by, without holding
/// more than its state: which table's data it is in, whether the statement is an `INSERT`, and how
/// deep in brackets and strings it is. A record is an object that opens directly inside an
/// `INSERT [ ... ]` (or `INSERT RELATION [ ... ]`); strings, record ids in `⟨⟩` and names in backticks
/// are skipped with their escapes, so no text inside a value is mistaken for structure.
#[derive(Debug, Default)]
pub struct RecordCounter {
    counts: BTreeMap<String, u64>,
    table: Option<String>,
    /// Inside a string, its closing delimiter; `escaped` when the previous character was a backslash.
    quote: Option<char>,
    escaped: bool,
    /// Inside a `--` comment (to the end of its line), and the comment's text so far.
    comment: Option<String>,
    /// Brackets and braces open in the current statement.
    depth: u32,
    /// The first word of the current statement, while it is read.
    head: String,
    head_done: bool,
    /// Bytes of a character split between two pieces.
    partial: Vec<u8>,
    /// The last character outside strings and comments, for `--`.
    dash: bool,
}

const TABLE_DATA: &str = "TABLE DATA: ";

impl RecordCounter {
    pub fn new() -> RecordCounter {
        RecordCounter::default()
    }

    /// Reads the next piece of the text.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut rest = Vec::new();
        if self.partial.is_empty() {
            let text = split_utf8(bytes, &mut rest);
            self.read(&text);
        } else {
            let mut joined = std::mem::take(&mut self.partial);
            joined.extend_from_slice(bytes);
            let text = split_utf8(&joined, &mut rest);
            self.read(&text);
        }
        self.partial = rest;
    }

    fn read(&mut self, text: &str) {
        for c in text.chars() {
            self.step(c);
        }
    }

    fn step(&mut self, c: char) {
        if let Some(comment) = &mut self.comment {
            if c == '\n' {
                let line = std::mem::take(comment);
                self.comment = None;
                if let Some(name) = line.trim().strip_prefix(TABLE_DATA) {
                    self.counts.entry(name.to_string()).or_insert(0);
                    self.table = Some(name.to_string());
                }
            } else if comment.len() < 1024 {
                comment.push(c);
            }
            return;
        }
        if let Some(close) = self.quote {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == close {
                self.quote = None;
            }
            return;
        }
        let dash = std::mem::replace(&mut self.dash, false);
        match c {
            '\'' | '"' | '`' => self.quote = Some(c),
            '⟨' => self.quote = Some('⟩'),
            '-' if self.depth == 0 && !self.head_done && self.head.is_empty() => {
                if dash {
                    self.comment = Some(String::new());
                } else {
                    self.dash = true;
                }
            }
            '[' | '{' | '(' => {
                if c == '{'
                    && self.depth == 1
                    && self.head == "INSERT"
                    && let Some(t) = &self.table
                {
                    *self.counts.entry(t.clone()).or_insert(0) += 1;
                }
                self.head_done = true;
                self.depth += 1;
            }
            ']' | '}' | ')' => self.depth = self.depth.saturating_sub(1),
            ';' if self.depth == 0 => {
                self.head.clear();
                self.head_done = false;
            }
            c if c.is_whitespace() => {
                if !self.head.is_empty() {
                    self.head_done = true;
                }
            }
            c => {
                if !self.head_done && self.head.len() < 16 {
                    self.head.push(c.to_ascii_uppercase());
                }
            }
        }
    }

    /// Records counted in each table whose data the text held so far.
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }
}

/// The longest valid UTF-8 prefix of `bytes`; the bytes of a character cut at the end go to `rest`.
fn split_utf8<'a>(bytes: &'a [u8], rest: &mut Vec<u8>) -> std::borrow::Cow<'a, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(e) if e.error_len().is_none() => {
            let (good, tail) = bytes.split_at(e.valid_up_to());
            rest.extend_from_slice(tail);
            std::borrow::Cow::Owned(String::from_utf8_lossy(good).into_owned())
        }
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(text: &str, piece: usize) -> BTreeMap<String, u64> {
        let mut c = RecordCounter::new();
        for chunk in text.as_bytes().chunks(piece) {
            c.feed(chunk);
        }
        c.counts().clone()
    }

    #[test]
    fn records_are_counted_per_table_whatever_their_strings_hold_and_however_the_text_is_cut() {
        let text = "OPTION IMPORT;\n\n-- ------------------------------\n-- TABLE: a\n\
            DEFINE TABLE a TYPE NORMAL SCHEMALESS;\nDEFINE FIELD f ON a DEFAULT { x: [1, 2] };\n\
            -- ------------------------------\n-- TABLE DATA: a\n-- ------------------------------\n\n\
            INSERT [ { id: a:⟨we}ird⟩, s: 'it\\'s {not} a [record', t: \"q \\\" } ]\", n: { deep: [{ x: 1 }] } }, \
            { id: a:2, `we{ird`: 'é ü ⟨ -- no comment' } ];\n\
            INSERT [ { id: a:3 } ];\n\
            -- ------------------------------\n-- TABLE DATA: empty\n-- ------------------------------\n\n\
            -- TABLE DATA: r\n\nINSERT RELATION [ { id: r:1, in: a:2, out: a:3 } ];\n";
        let want: BTreeMap<String, u64> = [("a".to_string(), 3), ("empty".to_string(), 0), ("r".to_string(), 1)].into();
        for piece in [1, 2, 3, 7, 64, text.len()] {
            assert_eq!(count(text, piece), want, "cut into pieces of {piece} bytes");
        }
    }

    /// A real snapshot of a migrated database holding awkward values counts what the database counts,
    /// and imports into an empty database with the same counts and the same values.
    #[tokio::test]
    async fn a_snapshot_counts_what_the_database_holds_and_imports_into_an_empty_one() {
        use crate::config::Config;
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        store.create_project("p1", "One ⟩ }", "ph", "sh", None, None, 1).await.unwrap();
        for (i, email) in ["a@example.com", "b'}{@example.com", "c\\\"⟩@example.com"].iter().enumerate() {
            let q = "CREATE contact SET project = 'p1', email = $email, subscribed = true,
                data = { note: $note, list: [1, { x: '] }' }] }, version = 1, created_at = $i, updated_at = 1";
            let note = format!("-- {i} ]}}) '\" \\ ⟨é⟩");
            store.query(q, crate::vars! { "email": email, "note": note, "i": i }).await.unwrap();
        }
        let mut counter = RecordCounter::new();
        let mut text = Vec::new();
        let mut snapshot = store.snapshot().await.unwrap();
        while let Some(piece) = snapshot.next().await {
            let piece = piece.unwrap();
            counter.feed(&piece);
            text.extend_from_slice(&piece);
        }
        let want = store.table_counts().await.unwrap();
        assert_eq!(want.get("contact"), Some(&3));
        assert!(want.get("migration").is_some_and(|n| *n > 40), "{want:?}");
        let counted: BTreeMap<String, u64> = counter.counts().iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(counted, want);

        let file = Config::test_scratch().join(format!("snapshot-{}.surql", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &text).unwrap();
        let other = Store::connect_only(&Config::for_tests()).await.unwrap();
        assert!(other.is_empty().await.unwrap());
        other.import_snapshot(&file).await.unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(other.table_counts().await.unwrap(), want);
        let read = |s: Store| async move {
            let rows: Vec<serde_json::Value> = s
                .query("SELECT email, data, created_at FROM contact ORDER BY created_at", crate::vars! {})
                .await
                .unwrap()
                .all(0)
                .unwrap();
            rows
        };
        assert_eq!(read(other.clone()).await, read(store.clone()).await);
        assert!(crate::store::migrate::plan(&other).await.unwrap().pending.is_empty());
    }
}
