//! What each project role may do: an action names the least role that may take it.
//!
//! Must not import: salvo, surrealdb.

use crate::error::Error;
use crate::store::accounts::Role;

/// Refuses an action below its role: `min` is the least role that may do `what`.
pub fn need(role: Role, min: Role, what: &str) -> Result<(), Error> {
    if role >= min {
        Ok(())
    } else {
        Err(Error::Forbidden(format!(
            "Only a project {} can {what}",
            if min == Role::Owner { "OWNER" } else { "OWNER or ADMIN" }
        )))
    }
}
