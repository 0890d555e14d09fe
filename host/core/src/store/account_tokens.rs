//! Single-use tokens sent by email: a sign-up waiting for its address, email verification, password
//! reset and project invitations. The record id is the token's SHA-256 (the token itself is only in the
//! mail); taking a token deletes it in the transaction that applies it, so it works once.

use serde::Deserialize;

use super::{Store, StoreError};
use crate::vars;

/// What a token is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A sign-up: the account is created when its link is followed (docs/security.md#sessions).
    Signup,
    Verify,
    Reset,
    Invite,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Signup => "signup",
            Purpose::Verify => "verify",
            Purpose::Reset => "reset",
            Purpose::Invite => "invite",
        }
    }
}

/// A token as stored (without the token).
#[derive(Debug, Clone, Deserialize)]
pub struct AccountToken {
    pub purpose: String,
    #[serde(default)]
    pub user: Option<String>,
    pub email: String,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub invited_by: Option<String>,
    /// A sign-up's password hash and name.
    #[serde(default)]
    pub password_hash: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A token to store.
pub struct NewToken<'a> {
    pub digest: &'a str,
    pub purpose: Purpose,
    pub user: Option<&'a str>,
    pub email: &'a str,
    pub project: Option<&'a str>,
    pub role: Option<&'a str>,
    pub invited_by: Option<&'a str>,
    /// A sign-up's password hash and name.
    pub password_hash: Option<&'a str>,
    pub name: Option<&'a str>,
    pub expires_at: i64,
}

/// What taking a token found: the token as it was (it is gone now), or nothing.
pub type Taken = Option<AccountToken>;

const TOKEN_FIELDS: &str =
    "purpose, user, email, project, role, invited_by, password_hash, name, created_at, expires_at";

impl Store {
    /// Stores a token and deletes the older ones it supersedes (the same purpose for the same address,
    /// and for an invitation the same project), in one transaction.
    pub async fn issue_token(&self, t: &NewToken<'_>, now: i64) -> Result<(), StoreError> {
        let doc = super::jobs::strip_nulls(vars! {
            "purpose": t.purpose.as_str(), "user": t.user, "email": t.email, "project": t.project,
            "role": t.role, "invited_by": t.invited_by, "password_hash": t.password_hash, "name": t.name,
            "created_at": now, "expires_at": t.expires_at,
        });
        let supersede = match t.project {
            Some(_) => "DELETE account_token WHERE purpose = $purpose AND email = $email AND project = $project",
            None => "DELETE account_token WHERE purpose = $purpose AND email = $email",
        };
        self.write(|| async {
            self.query(
                &format!(
                    "BEGIN TRANSACTION;
                     {supersede} RETURN NONE;
                     CREATE type::record('account_token', $id) CONTENT $doc RETURN NONE;
                     COMMIT TRANSACTION;"
                ),
                vars! {
                    "id": t.digest, "doc": doc.clone(), "purpose": t.purpose.as_str(), "email": t.email,
                    "project": t.project,
                },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// The token with this digest, if it is stored (expired or not).
    pub async fn token(&self, digest: &str) -> Result<Option<AccountToken>, StoreError> {
        self.query(
            &format!("SELECT {TOKEN_FIELDS} FROM ONLY type::record('account_token', $id)"),
            vars! { "id": digest },
        )
        .await?
        .first(0)
    }

    /// Takes a verification token: deletes it and, when it has not expired, marks its user's email
    /// (still the address it was sent to) verified.
    pub async fn take_verify_token(&self, digest: &str, now: i64) -> Result<Taken, StoreError> {
        self.take(
            digest,
            Purpose::Verify,
            "IF $t.expires_at > $now {
                UPDATE type::record('user', $t.user) SET email_verified_at = $now, updated_at = $now
                    WHERE email = $t.email AND email_verified_at = NONE RETURN NONE;
             };",
            vars! { "now": now },
        )
        .await
    }

    /// Takes a sign-up token: deletes it and, when it has not expired, creates the user `id` it asked for
    /// with its address counted as verified. An address that has an account by now is a conflict (the
    /// unique index on the address), and the token stays.
    pub async fn take_signup_token(&self, digest: &str, id: &str, now: i64) -> Result<Taken, StoreError> {
        self.take(
            digest,
            Purpose::Signup,
            "IF $t.expires_at > $now {
                CREATE type::record('user', $uid) CONTENT {
                    email: $t.email, name: $t.name, password_hash: $t.password_hash, email_verified_at: $now,
                    created_at: $now, updated_at: $now,
                } RETURN NONE;
             };",
            vars! { "now": now, "uid": id },
        )
        .await
    }

    /// Takes a password-reset token: deletes it and, when it has not expired, sets the password and raises
    /// the user's session epoch (every session issued before ends).
    pub async fn take_reset_token(&self, digest: &str, password_hash: &str, now: i64) -> Result<Taken, StoreError> {
        self.take(
            digest,
            Purpose::Reset,
            "IF $t.expires_at > $now {
                UPDATE type::record('user', $t.user)
                    SET password_hash = $hash, session_epoch = (session_epoch ?? 0) + 1, updated_at = $now
                    WHERE email = $t.email RETURN NONE;
             };",
            vars! { "now": now, "hash": password_hash },
        )
        .await
    }

    /// Takes an invitation for `user` (whose address it must be): deletes it and, when it has not expired
    /// and the project still exists, adds the user with the invited role unless they are a member already,
    /// and marks their email verified (they followed a link sent to it).
    pub async fn take_invite_token(
        &self,
        digest: &str,
        user: &str,
        email: &str,
        now: i64,
    ) -> Result<Taken, StoreError> {
        self.take(
            digest,
            Purpose::Invite,
            "IF $t.expires_at > $now AND $t.email = $email AND record::exists(type::record('project', $t.project)) {
                IF array::len(SELECT id FROM membership WHERE project = $t.project AND user = $user) = 0 {
                    CREATE membership SET project = $t.project, user = $user, role = $t.role, created_at = $now
                        RETURN NONE;
                };
                UPDATE type::record('user', $user) SET email_verified_at = $now, updated_at = $now
                    WHERE email_verified_at = NONE RETURN NONE;
             };",
            vars! { "now": now, "user": user, "email": email },
        )
        .await
    }

    /// Deletes the token (of `purpose`) and runs `apply` with it as `$t` in the same transaction.
    async fn take(
        &self,
        digest: &str,
        purpose: Purpose,
        apply: &str,
        mut vars: serde_json::Value,
    ) -> Result<Taken, StoreError> {
        vars["id"] = digest.into();
        vars["purpose"] = purpose.as_str().into();
        let sql = format!(
            "BEGIN TRANSACTION;
             LET $t = (DELETE type::record('account_token', $id) WHERE purpose = $purpose RETURN BEFORE)[0];
             IF $t != NONE {{ {apply} }};
             RETURN $t;
             COMMIT TRANSACTION;"
        );
        let v = self.write(|| async { self.query(&sql, vars.clone()).await?.value_last() }).await?;
        if !v.is_object() {
            return Ok(None);
        }
        let mut v = v;
        if let Some(o) = v.as_object_mut() {
            o.remove("id");
        }
        serde_json::from_value(v).map(Some).map_err(|e| StoreError::Decode(e.to_string()))
    }

    /// A project's invitations that have not expired, oldest first.
    pub async fn invitations(&self, project: &str, now: i64) -> Result<Vec<AccountToken>, StoreError> {
        self.query(
            &format!(
                "SELECT {TOKEN_FIELDS} FROM account_token
                 WHERE project = $p AND purpose = 'invite' AND expires_at > $now ORDER BY created_at ASC LIMIT 1000"
            ),
            vars! { "p": project, "now": now },
        )
        .await?
        .all(0)
    }

    /// Withdraws a project's invitation of an address; whether there was one.
    pub async fn withdraw_invitation(&self, project: &str, email: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "RETURN array::len(DELETE account_token WHERE project = $p AND purpose = 'invite' AND email = $e
                        RETURN BEFORE);",
                    vars! { "p": project, "e": email },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_u64().unwrap_or(0) > 0)
    }
}
