//! Counts as of a moment (`tally:[project, scope]`): a project's contacts, its events, its events of one
//! name. Counting them walks every row (about 15 µs each on SurrealDB 3.3.5), so a total is the count
//! taken at a moment plus the rows created since, an index range over the recent ones. Transactions that
//! delete contacts or events lower the counts of what they delete from before each count's moment
//! ([`LOWER_CONTACTS`], [`LOWER_EVENTS`]).

use super::{Store, StoreError};
use crate::vars;

/// What a tally counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The project's contacts.
    Contacts,
    /// All of the project's events.
    Events,
    /// The project's events of one name.
    EventName(&'a str),
}

impl Scope<'_> {
    /// The scope's part of the record id.
    pub fn key(&self) -> String {
        match self {
            Scope::Contacts => "contacts".into(),
            Scope::Events => "events".into(),
            Scope::EventName(n) => format!("event:{n}"),
        }
    }

    /// The count of the scope's rows, `{cmp}` the moment `$at` (each an index range).
    fn count_sql(&self, cmp: &str) -> String {
        match self {
            Scope::Contacts => {
                format!("SELECT count() FROM contact WHERE project = $p AND created_at {cmp} $at GROUP ALL")
            }
            Scope::Events => {
                format!("SELECT count() FROM event WHERE project = $p AND created_at {cmp} $at GROUP ALL")
            }
            Scope::EventName(_) => format!(
                "SELECT count() FROM event WHERE project = $p AND name = $name AND created_at {cmp} $at GROUP ALL"
            ),
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Scope::EventName(n) => Some(n),
            _ => None,
        }
    }
}

/// Lowers the project's contact tally by the deleted contacts `$gone` (rows as they were) created at or
/// before its moment; those created since are counted live anyway.
pub(crate) const LOWER_CONTACTS: &str = "LET $tally_c = type::record('tally', [$p, 'contacts']);
    LET $counted_c = array::len(array::filter($gone, |$c| $c.created_at <= $tally_c.at));
    IF $counted_c > 0 { UPDATE $tally_c SET n -= $counted_c RETURN NONE; };";

/// Lowers the project's event tallies (all events, and each name's) by the deleted events `$gone_events`
/// (rows as they were) created at or before each tally's moment.
pub(crate) const LOWER_EVENTS: &str = "LET $tally_e = type::record('tally', [$p, 'events']);
    LET $counted_e = array::len(array::filter($gone_events, |$e| $e.created_at <= $tally_e.at));
    IF $counted_e > 0 { UPDATE $tally_e SET n -= $counted_e RETURN NONE; };
    FOR $name IN array::distinct($gone_events.name) {
        LET $tally_n = type::record('tally', [$p, 'event:' + $name]);
        LET $counted_n = array::len(array::filter($gone_events, |$e| $e.name = $name AND $e.created_at <= $tally_n.at));
        IF $counted_n > 0 { UPDATE $tally_n SET n -= $counted_n RETURN NONE; };
    };";

/// A purge step (see [`Store::purge_project_batch`]): the project's tallies, once its contacts and events
/// are gone.
pub(super) const PURGE_TALLIES: &str =
    "LET $r = (SELECT VALUE id FROM tally:[$p, NONE]..[$p, {}] LIMIT $n); DELETE $r RETURN NONE;";

impl Store {
    /// The scope's count as of its last count plus the rows created since, with that count's moment; None
    /// before the first count ([`Store::recount`]).
    pub async fn tally(&self, project: &str, scope: Scope<'_>) -> Result<Option<(i64, i64)>, StoreError> {
        let sql = format!(
            "{{
                LET $t = (SELECT n, at FROM ONLY type::record('tally', [$p, $scope]));
                IF !$t {{ RETURN NONE; }};
                LET $at = $t.at;
                LET $since = ({});
                RETURN {{ n: $t.n + ($since[0].count ?? 0), at: $t.at }};
            }}",
            scope.count_sql(">")
        );
        let v =
            self.query(&sql, vars! { "p": project, "scope": scope.key(), "name": scope.name() }).await?.value_last()?;
        Ok(match (v["n"].as_i64(), v["at"].as_i64()) {
            (Some(n), Some(at)) => Some((n, at)),
            _ => None,
        })
    }

    /// Counts the scope's rows now (a walk over all of them) without keeping the count: what a read answers
    /// when nothing can be written.
    pub async fn count_unkept(&self, project: &str, scope: Scope<'_>) -> Result<i64, StoreError> {
        let sql = format!("{{ LET $c = ({}); RETURN $c[0].count ?? 0; }}", scope.count_sql("<="));
        let vars = vars! { "p": project, "name": scope.name(), "at": i64::MAX };
        Ok(self.query(&sql, vars).await?.value_last()?.as_i64().unwrap_or(0))
    }

    /// Counts the scope's rows created at or before `at` (a walk over all of them) and keeps the count
    /// with that moment, in one transaction. An event name with no events at all keeps nothing: asking
    /// about names nobody tracked must not store a row per name (its count stays a walk over no rows).
    pub async fn recount(&self, project: &str, scope: Scope<'_>, at: i64) -> Result<i64, StoreError> {
        let sql = format!(
            "{{
                LET $c = ({});
                LET $n = $c[0].count ?? 0;
                LET $some = !$named OR $n > 0
                    OR array::len(SELECT VALUE id FROM event WHERE project = $p AND name = $name LIMIT 1) > 0;
                IF $some {{
                    UPSERT type::record('tally', [$p, $scope]) CONTENT {{ n: $n, at: $at }} RETURN NONE;
                }} ELSE {{
                    DELETE type::record('tally', [$p, $scope]) RETURN NONE;
                }};
                RETURN $n;
            }}",
            scope.count_sql("<=")
        );
        let v = self
            .write(|| async {
                let named = scope.name().is_some();
                self.query(
                    &sql,
                    vars! { "p": project, "scope": scope.key(), "name": scope.name(), "named": named, "at": at },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// Forgets the count of one event name (its events were deleted).
    pub async fn forget_tally(&self, project: &str, scope: Scope<'_>) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "DELETE type::record('tally', [$p, $scope]) RETURN NONE",
                vars! { "p": project, "scope": scope.key() },
            )
            .await
            .map(|_| ())
        })
        .await
    }
}
