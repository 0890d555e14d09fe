//! What the per-project and per-user ceilings count (docs/security.md#quotas): each a count over an
//! index of the owner's rows.

use super::{Store, StoreError, count_of};
use crate::vars;

impl Store {
    /// Projects the user owns (is an OWNER of).
    pub async fn count_owned_projects(&self, user: &str) -> Result<i64, StoreError> {
        let sql = "SELECT count() AS n FROM membership WHERE user = $u AND role = 'OWNER' GROUP ALL";
        count_of(self.query(sql, vars! { "u": user }).await?.value(0)?)
    }

    /// The project's workflows.
    pub async fn count_workflows(&self, project: &str) -> Result<i64, StoreError> {
        let sql = "SELECT count() AS n FROM workflow WHERE project = $p GROUP ALL";
        count_of(self.query(sql, vars! { "p": project }).await?.value(0)?)
    }

    /// The project's segments.
    pub async fn count_segments(&self, project: &str) -> Result<i64, StoreError> {
        let sql = "SELECT count() AS n FROM segment WHERE project = $p GROUP ALL";
        count_of(self.query(sql, vars! { "p": project }).await?.value(0)?)
    }
}
