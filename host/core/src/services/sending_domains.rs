//! Sender domains (docs/behaviour.md#domains): adding one (DKIM key pair, sealed private key, DNS
//! records), checking its DNS now or on the recurring job, the one sender check every sending path uses,
//! and the DKIM signer of a verified domain.
//!
//! Must not import: salvo, surrealdb.

use crate::domain::domains::{self as rules, DnsRecord, Purpose, RecordSettings, RecordStatus};
use crate::domain::status::DomainStatus;
use crate::error::Error;
use crate::infra::dkim;
use crate::infra::dns::{Dns, Lookup};
use crate::store::domains::DomainRow;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error("{0} is not a valid domain name")]
    InvalidName(String),
    #[error("The domain {0} is already registered to a project")]
    Taken(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dkim(#[from] dkim::DkimError),
}

/// Why a sender address is refused (403 with `details.reason`, docs/behaviour.md#errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderRefusal {
    NotRegistered,
    OtherProject,
    NotVerified,
}

impl SenderRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            SenderRefusal::NotRegistered => "DOMAIN_NOT_REGISTERED",
            SenderRefusal::OtherProject => "DOMAIN_OF_OTHER_PROJECT",
            SenderRefusal::NotVerified => "DOMAIN_NOT_VERIFIED",
        }
    }
}

/// How long a domain may stay pending without ever verifying before it is deleted (7 days): a name
/// nobody proves control of does not stay reserved.
pub const PENDING_DOMAIN_TTL_MS: i64 = 7 * 24 * 3_600_000;

/// Everything domain work needs.
pub struct Domains {
    pub dns: Dns,
    pub storage_key: [u8; 32],
    pub settings: RecordSettings,
}

pub fn parse_records(d: &DomainRow) -> Vec<DnsRecord> {
    serde_json::from_str(&d.records).unwrap_or_default()
}

impl Domains {
    /// Adds a domain to a project: validates the name, makes its DKIM key pair and its records.
    /// `trusted` marks it verified without DNS (the operator's `herald domain add --trust`).
    pub async fn add(
        &self,
        store: &Store,
        project: &str,
        name: &str,
        trusted: bool,
        now: i64,
    ) -> Result<DomainRow, DomainError> {
        let name = rules::normalize_domain(name).ok_or_else(|| DomainError::InvalidName(name.to_string()))?;
        // Any number of projects may add a name; only the one that verifies it (its DKIM key in the
        // name's DNS) claims it, and a claimed name is refused to the others.
        if store.domain_claimed_by(&name).await?.is_some()
            || store.domains_named(&name).await?.iter().any(|d| d.project == project)
        {
            return Err(DomainError::Taken(name));
        }
        let key = tokio::task::spawn_blocking(dkim::generate).await.map_err(|_| dkim::DkimError::Generate)??;
        let mut records = rules::records(&name, &dkim::txt_value(&key.public_b64), &self.settings);
        if trusted {
            for r in &mut records {
                r.status = RecordStatus::Verified;
            }
        }
        let row = DomainRow {
            id: uuid::Uuid::now_v7().to_string(),
            project: project.to_string(),
            name: name.clone(),
            selector: self.settings.selector.clone(),
            dkim_public: key.public_b64,
            dkim_private: dkim::seal(&self.storage_key, &key.private_pkcs8)?,
            status: if trusted { DomainStatus::Verified } else { DomainStatus::Pending },
            trusted,
            records: serde_json::to_string(&records).unwrap_or_else(|_| "[]".into()),
            verified_at: trusted.then_some(now),
            last_checked_at: None,
            created_at: now,
            updated_at: now,
            inbound: false,
        };
        match store.insert_domain(&row).await {
            Ok(()) => Ok(row),
            Err(StoreError::Conflict(_)) => Err(DomainError::Taken(name)),
            Err(e) => Err(e.into()),
        }
    }

    /// Looks the domain's records up now and stores the outcome: VERIFIED when every required record
    /// is there, PENDING otherwise (also when records disappear again). A trusted domain stays verified.
    pub async fn check(&self, store: &Store, d: &DomainRow, now: i64) -> Result<DomainRow, DomainError> {
        if d.trusted {
            return Ok(d.clone());
        }
        let mut records = parse_records(d);
        let lookups = futures_util::future::join_all(records.iter().map(|r| async {
            match r.purpose {
                Purpose::ReturnPath => match self.dns.cname(&r.name).await {
                    Lookup::Found(t) if t.eq_ignore_ascii_case(r.value.trim_end_matches('.')) => RecordStatus::Verified,
                    Lookup::Found(_) => RecordStatus::Mismatch,
                    Lookup::None => RecordStatus::Pending,
                    Lookup::Failed(_) => RecordStatus::Unknown,
                },
                purpose => {
                    let txt = self.dns.txt(&r.name).await;
                    let (found, failed) = match &txt {
                        Lookup::Found(v) => (Some(v.as_slice()), false),
                        Lookup::None => (None, false),
                        Lookup::Failed(_) => (None, true),
                    };
                    match purpose {
                        Purpose::Dkim => rules::dkim_status(found, failed, &r.value),
                        Purpose::Spf => rules::tag_status(found, failed, "v=spf1"),
                        _ => rules::tag_status(found, failed, "v=dmarc1"),
                    }
                }
            }
        }))
        .await;
        for (r, s) in records.iter_mut().zip(lookups) {
            r.status = s;
        }
        let verified = rules::all_required_verified(&records);
        let status = if verified { DomainStatus::Verified } else { DomainStatus::Pending };
        let verified_at = if verified { d.verified_at.or(Some(now)) } else { None };
        let json = serde_json::to_string(&records).unwrap_or_else(|_| "[]".into());
        // Another project's domain holds the name's claim: this one stays pending.
        let (status, verified_at) = match store.save_domain_check(d, status, &json, verified_at, now).await? {
            true => (status, verified_at),
            false => (DomainStatus::Pending, None),
        };
        Ok(DomainRow { status, records: json, verified_at, last_checked_at: Some(now), updated_at: now, ..d.clone() })
    }

    /// The recurring job: expires pending domains that never claimed their name within
    /// [`PENDING_DOMAIN_TTL_MS`], and re-checks every other domain.
    pub async fn check_all(&self, store: &Store, now: i64) -> Result<usize, DomainError> {
        store.expire_pending_domains(now - PENDING_DOMAIN_TTL_MS).await?;
        let all = store.domains_to_check().await?;
        let n = all.len();
        for d in all {
            if let Err(e) = self.check(store, &d, now).await {
                tracing::warn!(domain = %d.name, error = %e, "domain check failed");
            }
        }
        Ok(n)
    }

    /// The DKIM signer of a domain.
    pub fn signer(&self, d: &DomainRow) -> Result<dkim::Signer, dkim::DkimError> {
        let pkcs8 = dkim::open(&self.storage_key, &d.dkim_private)?;
        dkim::Signer::new(&d.name, &d.selector, pkcs8)
    }
}

/// What removing a domain did.
#[derive(Debug, PartialEq)]
pub enum Removal {
    Removed,
    NotFound,
    /// Refused: templates and campaigns not sent yet (DRAFT, SCHEDULED, SENDING) send from it, named.
    InUse(Vec<String>),
}

/// One domain of the project.
pub async fn get(store: &Store, project: &str, id: &str) -> Result<Option<DomainRow>, StoreError> {
    store.domain(project, id).await
}

/// Turns receiving on or off for a project's domain (docs/behaviour.md#receiving-mail); None when the
/// project has no such domain.
pub async fn set_inbound(
    store: &Store,
    project: &str,
    id: &str,
    on: bool,
    now: i64,
) -> Result<Option<DomainRow>, StoreError> {
    store.set_domain_inbound(project, id, on, now).await
}

/// The project's domains, verified and pending, newest first.
pub async fn list(store: &Store, project: &str) -> Result<Vec<DomainRow>, StoreError> {
    store.domains_of_project(project).await
}

/// Removes a domain of the project, unless a template or a campaign that may still send uses it.
pub async fn remove(store: &Store, project: &str, id: &str) -> Result<Removal, StoreError> {
    let Some(d) = store.domain(project, id).await? else { return Ok(Removal::NotFound) };
    let mut users: Vec<String> =
        store.templates_of_domain(project, &d.name).await?.into_iter().map(|n| format!("template {n}")).collect();
    users.extend(
        store
            .unsent_campaigns(project)
            .await?
            .iter()
            .filter(|c| c.uses_domain(&d.name))
            .map(|c| format!("campaign {} ({})", c.name, c.status)),
    );
    if !users.is_empty() {
        return Ok(Removal::InUse(users));
    }
    Ok(if store.delete_domain(project, id).await? { Removal::Removed } else { Removal::NotFound })
}

/// The sender check of every sending path: the address's domain is registered to this project and
/// verified. Returns the domain on success. The domain row comes from the store's short read cache: a
/// change made through this process shows at once, one made by another process within two seconds.
pub async fn check_sender(
    store: &Store,
    project: &str,
    address: &str,
) -> Result<Result<DomainRow, SenderRefusal>, StoreError> {
    let domain = address.rsplit_once('@').map(|(_, d)| d).unwrap_or(address).trim().to_lowercase();
    let rows = store.domains_named_cached(&domain).await?;
    Ok(match rows.iter().find(|d| d.status == DomainStatus::Verified) {
        Some(d) if d.project == project => Ok(d.clone()),
        Some(_) => Err(SenderRefusal::OtherProject),
        // Another project's pending domain says nothing about this one.
        None if rows.iter().any(|d| d.project == project) => Err(SenderRefusal::NotVerified),
        None => Err(SenderRefusal::NotRegistered),
    })
}

/// [`check_sender`] as the error every sending path answers (docs/behaviour.md#errors): 403 with code
/// INTERNAL_SERVER_ERROR and `details.reason`.
pub async fn require_sender(store: &Store, project: &str, from: &str) -> Result<DomainRow, Error> {
    let domain = from.rsplit_once('@').map(|(_, d)| d).unwrap_or(from).to_lowercase();
    match check_sender(store, project, from).await? {
        Ok(d) => Ok(d),
        Err(refusal) => {
            let message = match refusal {
                SenderRefusal::NotRegistered => format!("The sender domain {domain} is not registered to this project"),
                SenderRefusal::OtherProject => format!("The sender domain {domain} belongs to another project"),
                SenderRefusal::NotVerified => format!("The sender domain {domain} is not verified yet"),
            };
            Err(Error::SenderDomain { reason: refusal.reason(), domain, message })
        }
    }
}
