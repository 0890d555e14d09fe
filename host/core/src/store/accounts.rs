//! Users, projects, memberships and server settings.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError};
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    pub password_hash: String,
    /// When the user followed a verification link (or an invitation) sent to `email`.
    #[serde(default)]
    pub email_verified_at: Option<i64>,
    /// Raised by a password reset: sessions issued under an older epoch are refused.
    #[serde(default)]
    pub session_epoch: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub public_key_hash: String,
    pub secret_key_hash: String,
    pub disabled: bool,
    /// Open and click tracking: ENABLED, DISABLED or MARKETING_ONLY (None: the default, MARKETING_ONLY).
    #[serde(default)]
    pub tracking: Option<String>,
    /// Delivery transport (`smtp`, `file` or a transport plugin); None: the server's default.
    #[serde(default)]
    pub transport: Option<String>,
    /// Monthly limits per category (docs/behaviour.md#billing); None: all unlimited.
    #[serde(default)]
    pub billing_limits: Option<crate::domain::billing::Limits>,
    /// Set while the project is suspended (docs/behaviour.md#project-setup-and-security).
    #[serde(default)]
    pub suspended: Option<Suspended>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Why and since when a project is suspended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspended {
    pub at: i64,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "UPPERCASE")]
pub enum Role {
    Member,
    Admin,
    Owner,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "OWNER" => Some(Role::Owner),
            "ADMIN" => Some(Role::Admin),
            "MEMBER" => Some(Role::Member),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "OWNER",
            Role::Admin => "ADMIN",
            Role::Member => "MEMBER",
        }
    }
    /// OWNER and ADMIN manage members and keys.
    pub fn can_manage(self) -> bool {
        self >= Role::Admin
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Membership {
    pub project: String,
    pub user: String,
    pub role: Role,
    pub created_at: i64,
}

/// A member of a project with the user's public fields.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub user: String,
    pub role: Role,
    pub created_at: i64,
    pub email: Option<String>,
    pub name: Option<String>,
}

/// A project of a user, with the user's role in it.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectWithRole {
    pub role: Role,
    pub project: Project,
}

const USER_FIELDS: &str =
    "record::id(id) AS id, email, name, password_hash, email_verified_at, session_epoch, created_at, updated_at";
const PROJECT_FIELDS: &str = "record::id(id) AS id, name, public_key_hash, secret_key_hash, disabled, tracking, transport, billing_limits, suspended, created_at, updated_at";

impl Store {
    // ---- settings ----

    /// Reads a server setting.
    pub async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let v = self
            .query("RETURN (SELECT VALUE value FROM ONLY type::record('setting', $key))", vars! { "key": key })
            .await?
            .value(0)?;
        Ok(v.as_str().map(str::to_string))
    }

    pub async fn delete_setting(&self, key: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE type::record('setting', $key) RETURN NONE", vars! { "key": key }).await
        })
        .await
        .map(|_| ())
    }

    /// Returns the setting, creating it with `make()` if it does not exist yet. Safe when several
    /// processes race: the first writer wins and everyone reads its value.
    pub async fn setting_or_init(&self, key: &str, make: impl Fn() -> String) -> Result<String, StoreError> {
        if let Some(v) = self.setting(key).await? {
            return Ok(v);
        }
        let candidate = make();
        let _ = self
            .write(|| {
                self.query(
                    "IF record::exists(type::record('setting', $key)) == false {
                        CREATE type::record('setting', $key) SET value = $value;
                     }",
                    vars! { "key": key, "value": candidate },
                )
            })
            .await;
        self.setting(key).await?.ok_or_else(|| StoreError::Db(format!("setting {key} could not be stored")))
    }

    /// Marks every process's API-key cache stale (keys were regenerated or a project deleted).
    pub async fn bump_keys_epoch(&self) -> Result<(), StoreError> {
        self.bump_epoch("keys_epoch").await
    }

    /// Gives the shared setting `key` a new random value: the processes that cache what it guards
    /// notice the change and read again.
    pub async fn bump_epoch(&self, key: &str) -> Result<(), StoreError> {
        let epoch = uuid::Uuid::new_v4().to_string();
        self.write(|| async {
            self.query("UPSERT type::record('setting', $k) SET value = $v RETURN NONE", vars! { "k": key, "v": epoch })
                .await
        })
        .await
        .map(|_| ())
    }

    // ---- users ----

    pub async fn create_user(
        &self,
        id: &str,
        email: &str,
        name: Option<&str>,
        password_hash: &str,
        now: i64,
    ) -> Result<User, StoreError> {
        let doc = super::jobs::strip_nulls(
            vars! { "email": email, "name": name, "password_hash": password_hash, "created_at": now, "updated_at": now },
        );
        self.write(|| async {
            self.query(
                "CREATE type::record('user', $id) CONTENT $doc RETURN NONE",
                vars! { "id": id, "doc": doc.clone() },
            )
            .await
        })
        .await?;
        self.user(id).await?.ok_or_else(|| StoreError::Db("user vanished after create".into()))
    }

    pub async fn user(&self, id: &str) -> Result<Option<User>, StoreError> {
        self.query(&format!("SELECT {USER_FIELDS} FROM ONLY type::record('user', $id)"), vars! { "id": id })
            .await?
            .first(0)
    }

    /// Marks a user's email verified (the operator created the user, or a link proved the address).
    pub async fn set_email_verified(&self, id: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('user', $id) SET email_verified_at = $now WHERE email_verified_at = NONE
                 RETURN NONE",
                vars! { "id": id, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Gives an account whose address was never verified to whoever just proved the address (an OAuth
    /// provider vouched for it): the address counts as verified, the password nobody proved is replaced
    /// by `password_hash` (an unusable one) and every earlier session ends. Nothing for a verified user.
    pub async fn take_over_unverified(&self, id: &str, password_hash: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('user', $id) SET email_verified_at = $now, password_hash = $hash,
                    session_epoch = (session_epoch ?? 0) + 1, updated_at = $now
                 WHERE email_verified_at = NONE RETURN NONE",
                vars! { "id": id, "hash": password_hash, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
        self.query(&format!("SELECT {USER_FIELDS} FROM user WHERE email = $email LIMIT 1"), vars! { "email": email })
            .await?
            .first(0)
    }

    // ---- projects ----

    /// Creates a project with the billing limits it starts with and, when `owner` is given, its OWNER
    /// membership, in one transaction.
    #[allow(clippy::too_many_arguments)] // the fields of one new row
    pub async fn create_project(
        &self,
        id: &str,
        name: &str,
        public_key_hash: &str,
        secret_key_hash: &str,
        owner: Option<&str>,
        limits: Option<&crate::domain::billing::Limits>,
        now: i64,
    ) -> Result<Project, StoreError> {
        let mut doc = vars! {
            "name": name, "public_key_hash": public_key_hash, "secret_key_hash": secret_key_hash,
            "disabled": false, "created_at": now, "updated_at": now,
        };
        if let Some(l) = limits {
            doc["billing_limits"] =
                super::jobs::strip_nulls(serde_json::to_value(l).map_err(|e| StoreError::Decode(e.to_string()))?);
        }
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 CREATE type::record('project', $id) CONTENT $doc RETURN NONE;
                 IF $owner != NONE AND $owner != NULL {
                    CREATE membership SET project = $id, user = $owner, role = 'OWNER', created_at = $now RETURN NONE;
                 };
                 COMMIT TRANSACTION;",
                vars! { "id": id, "doc": doc.clone(), "owner": owner, "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(id);
        self.project(id).await?.ok_or_else(|| StoreError::Db("project vanished after create".into()))
    }

    pub async fn project(&self, id: &str) -> Result<Option<Project>, StoreError> {
        self.query(&format!("SELECT {PROJECT_FIELDS} FROM ONLY type::record('project', $id)"), vars! { "id": id })
            .await?
            .first(0)
    }

    /// The project whose public or secret key has this digest, and which kind matched.
    pub async fn project_by_key_hash(&self, digest: &str) -> Result<Option<(Project, bool)>, StoreError> {
        let mut rows = self
            .query(
                &format!(
                    "SELECT {PROJECT_FIELDS} FROM project WHERE secret_key_hash = $d LIMIT 1;
                     SELECT {PROJECT_FIELDS} FROM project WHERE public_key_hash = $d LIMIT 1;"
                ),
                vars! { "d": digest },
            )
            .await?;
        if let Some(p) = rows.first::<Project>(0)? {
            return Ok(Some((p, true)));
        }
        Ok(rows.first::<Project>(1)?.map(|p| (p, false)))
    }

    pub async fn rename_project(&self, id: &str, name: &str, now: i64) -> Result<Option<Project>, StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('project', $id) SET name = $name, updated_at = $now WHERE id != NONE RETURN NONE",
                vars! { "id": id, "name": name, "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(id);
        self.project(id).await
    }

    pub async fn set_project_tracking(&self, id: &str, mode: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('project', $id) SET tracking = $m, updated_at = $now RETURN NONE",
                vars! { "id": id, "m": mode, "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(id);
        Ok(())
    }

    /// Sets (or, with None, clears) a project's delivery transport.
    pub async fn set_project_transport(&self, id: &str, transport: Option<&str>, now: i64) -> Result<(), StoreError> {
        let sql = match transport {
            Some(_) => "UPDATE type::record('project', $id) SET transport = $t, updated_at = $now RETURN NONE",
            None => "UPDATE type::record('project', $id) SET transport = NONE, updated_at = $now RETURN NONE",
        };
        self.write(|| async { self.query(sql, vars! { "id": id, "t": transport, "now": now }).await }).await?;
        self.forget_project(id);
        Ok(())
    }

    pub async fn set_project_keys(
        &self,
        id: &str,
        public_key_hash: &str,
        secret_key_hash: &str,
        now: i64,
    ) -> Result<Option<Project>, StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('project', $id) SET public_key_hash = $p, secret_key_hash = $s, updated_at = $now
                 RETURN NONE",
                vars! { "id": id, "p": public_key_hash, "s": secret_key_hash, "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(id);
        self.project(id).await
    }

    /// Deletes a project and everything scoped to it.
    /// Deletes a project: its row, memberships and sender domains at once (its keys stop working and its
    /// domain names are free for others), and queues `purge` (a job that deletes the rest of its data in
    /// batches, see [`Store::purge_project_batch`]) in the same transaction, so a crash cannot leave the
    /// data without the job that removes it.
    pub async fn delete_project(&self, id: &str, purge: &super::jobs::NewJob, now: i64) -> Result<(), StoreError> {
        let job = purge.doc(now);
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 DELETE membership WHERE project = $id;
                 DELETE domain WHERE project = $id;
                 DELETE domain_claim WHERE project = $id;
                 DELETE account_token WHERE project = $id;
                 DELETE type::record('project', $id);
                 INSERT INTO job [$job] RETURN NONE;
                 COMMIT TRANSACTION;",
                vars! { "id": id, "job": job.clone() },
            )
            .await
        })
        .await?;
        self.forget_project(id);
        Ok(())
    }

    /// Deletes up to `batch` rows of a deleted project's data in one transaction, table by table (the
    /// emails with their bodies, segment memberships, events, campaign milestones, contact jobs, contacts,
    /// campaigns with their batch markers, workflows and their contacts' hourly budgets, segments,
    /// templates, idempotency keys, upload rows, analytics counters, suspensions, the suppression list),
    /// and gives its queued jobs up. A `reset` keeps the hourly counters, the suppression list and
    /// the suspensions, which the suspension check reads (docs/behaviour.md#project-setup-and-security).
    /// Returns how many rows it deleted: 0 when nothing is left.
    pub async fn purge_project_batch(
        &self,
        project: &str,
        batch: usize,
        reset: bool,
        now: i64,
    ) -> Result<usize, StoreError> {
        const STEPS: &[&str] = &[
            "LET $r = (SELECT VALUE record::id(id) FROM email WHERE project = $p LIMIT $n);
             DELETE array::map($r, |$i| type::record('email', $i)) RETURN NONE;
             DELETE array::map($r, |$i| type::record('email_body', $i)) RETURN NONE;
             DELETE array::map($r, |$i| type::record('provider_message', $i)) RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM segment_track:[$p, NONE]..[$p, {}] LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM workflow_budget:[$p, NONE]..[$p, {}] LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM segment_member WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM event WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM milestone WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE record::id(id) FROM contact_job WHERE project = $p LIMIT $n);
             DELETE array::map($r, |$i| type::record('contact_job_file', $i)) RETURN NONE;
             DELETE array::map($r, |$i| type::record('contact_job', $i)) RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM contact WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            // After the contacts and events they count.
            super::tallies::PURGE_TALLIES,
            "LET $c = (SELECT VALUE record::id(id) FROM campaign WHERE project = $p);
             LET $r = (SELECT VALUE id FROM campaign_batch WHERE campaign IN $c LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM campaign_gate WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM campaign WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM workflow_execution WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM workflow_entry WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM workflow WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM segment WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM template WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM idempotency WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM attachment_set WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            // Its upload rows (the files themselves are the service's: `services::uploads::sweep`).
            super::uploads::PURGE_UPLOADS,
            super::webhooks::PURGE_DELIVERIES,
            super::uploads::PURGE_UPLOAD_USAGE,
            // The counters last: an event dispatched meanwhile is counted before its event is gone.
            "LET $r = (SELECT VALUE id FROM stat_campaign WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM stat_event_day WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM job WHERE status IN ['queued', 'held'] AND string::contains(payload, $needle)
                LIMIT $n);
             UPDATE $r SET status = 'dead', last_error = 'the project was deleted', finished_at = $now,
                updated_at = $now RETURN NONE;",
        ];
        // The sending record (what the suspension check reads, and the suppression list) and the webhook
        // endpoints (settings, like keys and domains): kept by a reset, so it does not wipe a sender's
        // record or its integrations.
        const RECORD: &[&str] = &[
            "LET $r = (SELECT VALUE id FROM stat_hour WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            "LET $r = (SELECT VALUE id FROM suspension WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;",
            super::suppressions::PURGE_SUPPRESSIONS,
            super::webhooks::PURGE_WEBHOOKS,
        ];
        let needle = format!("\"project\":{}", Value::String(project.to_string()));
        let record: &[&str] = if reset { &[] } else { RECORD };
        for step in STEPS.iter().chain(record) {
            let n = self
                .write(|| async {
                    self.query(
                        // One block: one transaction.
                        &format!("{{ {step} RETURN array::len($r); }}"),
                        vars! { "p": project, "n": batch, "needle": needle, "now": now },
                    )
                    .await?
                    .value_last()
                })
                .await?;
            let n = n.as_u64().unwrap_or(0) as usize;
            if n > 0 {
                return Ok(n);
            }
        }
        Ok(0)
    }

    // ---- memberships ----

    pub async fn membership(&self, project: &str, user: &str) -> Result<Option<Membership>, StoreError> {
        self.query(
            "SELECT project, user, role, created_at FROM membership WHERE project = $p AND user = $u LIMIT 1",
            vars! { "p": project, "u": user },
        )
        .await?
        .first(0)
    }

    pub async fn projects_of_user(&self, user: &str) -> Result<Vec<ProjectWithRole>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                &format!(
                    "SELECT role, created_at, (SELECT {PROJECT_FIELDS} FROM ONLY type::record('project', $parent.project)) AS project
                     FROM membership WHERE user = $u ORDER BY created_at DESC"
                ),
                vars! { "u": user },
            )
            .await?
            .all(0)?;
        rows.into_iter()
            .filter(|r| r.get("project").is_some_and(|p| p.is_object()))
            .map(|r| serde_json::from_value(r).map_err(|e| StoreError::Decode(e.to_string())))
            .collect()
    }

    pub async fn members(&self, project: &str) -> Result<Vec<Member>, StoreError> {
        self.query(
            "SELECT user, role, created_at,
                    (SELECT VALUE email FROM ONLY type::record('user', $parent.user)) AS email,
                    (SELECT VALUE name FROM ONLY type::record('user', $parent.user)) AS name
             FROM membership WHERE project = $p ORDER BY created_at ASC",
            vars! { "p": project },
        )
        .await?
        .all(0)
    }

    pub async fn add_member(&self, project: &str, user: &str, role: Role, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "CREATE membership SET project = $p, user = $u, role = $r, created_at = $now RETURN NONE",
                vars! { "p": project, "u": user, "r": role.as_str(), "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Changes a member's role, refusing (Conflict) to leave the project without an OWNER. The check and
    /// the write are one transaction, so two concurrent demotions cannot both pass.
    pub async fn set_member_role(&self, project: &str, user: &str, role: Role) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 UPDATE membership SET role = $r WHERE project = $p AND user = $u RETURN NONE;
                 IF count(SELECT * FROM membership WHERE project = $p AND role = 'OWNER') == 0 {
                    THROW 'LAST_OWNER';
                 };
                 COMMIT TRANSACTION;",
                vars! { "p": project, "u": user, "r": role.as_str() },
            )
            .await
        })
        .await
        .map(|_| ())
        .map_err(last_owner)
    }

    /// Removes a member, refusing (Conflict) to remove the last OWNER.
    pub async fn remove_member(&self, project: &str, user: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 DELETE membership WHERE project = $p AND user = $u;
                 IF count(SELECT * FROM membership WHERE project = $p AND role = 'OWNER') == 0 {
                    THROW 'LAST_OWNER';
                 };
                 COMMIT TRANSACTION;",
                vars! { "p": project, "u": user },
            )
            .await
        })
        .await
        .map(|_| ())
        .map_err(last_owner)
    }
}

fn last_owner(e: StoreError) -> StoreError {
    if e.thrown("LAST_OWNER") { StoreError::Refused("A project must keep at least one OWNER".into()) } else { e }
}

impl Store {
    /// Revokes a dashboard session (logout) until `expires_at`, when its token expires anyway.
    pub async fn revoke_session(&self, sid: &str, expires_at: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPSERT type::record('session_revoked', $sid) SET expires_at = $exp RETURN NONE",
                vars! { "sid": sid, "exp": expires_at },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Whether a dashboard session was revoked.
    pub async fn session_revoked(&self, sid: &str) -> Result<bool, StoreError> {
        let row: Option<serde_json::Value> = self
            .query("SELECT VALUE expires_at FROM ONLY type::record('session_revoked', $sid)", vars! { "sid": sid })
            .await?
            .first(0)?;
        Ok(row.is_some_and(|v| !v.is_null()))
    }

    pub async fn purge_revoked_sessions(&self, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE session_revoked WHERE expires_at <= $now", vars! { "now": now }).await
        })
        .await
        .map(|_| ())
    }
}
