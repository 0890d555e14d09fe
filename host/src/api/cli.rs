//! Administrative actions of the `herald` command line that reuse the API's rules.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::AppState;

/// `herald project create NAME [--owner EMAIL --password PW]`: creates the project (and the owner user
/// when it does not exist yet) and returns `{id, name, public, secret}`.
pub async fn create_project(
    st: &AppState,
    name: &str,
    owner: Option<&str>,
    password: Option<&str>,
) -> Result<Value, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(ApiError::BadRequest("The project name must be 1 to 100 characters".into()));
    }
    let owner_id = match owner {
        None => None,
        Some(email) => {
            let email = email.trim().to_lowercase();
            if !super::body::is_email(&email) {
                return Err(ApiError::BadRequest(format!("{email} is not a valid email address")));
            }
            match st.store.user_by_email(&email).await? {
                Some(u) => Some(u.id),
                None => {
                    let pw = password.ok_or_else(|| {
                        ApiError::BadRequest(format!("User {email} does not exist yet: give --password to create it"))
                    })?;
                    if let Some(problem) = crate::infra::security::password_problem(pw) {
                        return Err(ApiError::BadRequest(problem));
                    }
                    Some(super::auth::create_user(st, &email, pw, None).await?.id)
                }
            }
        }
    };
    let (project, keys) = super::accounts::new_project(st, name, owner_id.as_deref()).await?;
    Ok(json!({ "id": project.id, "name": project.name, "public": keys.public, "secret": keys.secret }))
}
