//! What a project has set up so far: existence reads (each stops at the first row it finds).

use serde::Deserialize;

use super::{Store, StoreError};
use crate::vars;

/// Which steps of the onboarding a project has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct SetupState {
    pub verified_domain: bool,
    pub template: bool,
    pub contacts: bool,
    pub sent_email: bool,
    pub campaign: bool,
    pub workflow: bool,
}

impl Store {
    pub async fn setup_state(&self, project: &str) -> Result<SetupState, StoreError> {
        let any = |table: &str, filter: &str| {
            format!("array::len((SELECT VALUE id FROM {table} WHERE project = $p{filter} LIMIT 1)) > 0")
        };
        let sql = format!(
            "RETURN {{ verified_domain: {}, template: {}, contacts: {}, sent_email: {}, campaign: {}, workflow: {} }};",
            any("domain", " AND status = 'VERIFIED'"),
            any("template", ""),
            any("contact", ""),
            any("email", " AND sent_at != NONE"),
            any("campaign", ""),
            any("workflow", ""),
        );
        let v = self.query(&sql, vars! { "p": project }).await?.value(0)?;
        serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
    }
}
