//! The segment engine: checks conditions (plugin operands, referenced segments, cycles), counts and pages
//! the contacts a condition matches, computes tracked memberships with their entry and exit events, and
//! the recurring jobs that keep counts and tracked memberships current.
//!
//! Contact-field filters run inside the database and event and membership filters are sets of contact
//! ids held in the host (`store::segments`); plugin operators run here, in batches of [`BATCH`]
//! candidates the database has already narrowed.
//!
//! Must not import: salvo, surrealdb.

pub mod manage;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::domain::conditions::{self, Tree};
use crate::plugins::{CallError, PluginHost};
use crate::store::contacts::Contact;
use crate::store::segments::{
    Candidate, CompileError, Compiled, Diff, Leaf, MembershipEvents, PluginEval, Ref, Segment, compile,
};
use crate::store::{Store, StoreError};

/// Candidates per plugin call.
pub const BATCH: usize = crate::store::segments::PLUGIN_BATCH;
/// How deep segment references may chain.
const MAX_REF_DEPTH: usize = 8;

pub const REFRESH_JOB: &str = "segments.refresh";
pub const TRACK_JOB: &str = "segments.track";
/// Every segment's count and every tracked membership, recomputed (time windows move on their own).
pub const REFRESH_MS: i64 = 300_000;
/// Tracked segments whose inputs changed are recomputed this often.
pub const TRACK_MS: i64 = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The condition is invalid: the message names the filter.
    #[error("{0}")]
    Invalid(String),
    /// The condition is too large once its referenced segments are expanded: the message names the limit.
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Plugin(#[from] CallError),
}

impl From<SegmentError> for crate::error::Error {
    fn from(e: SegmentError) -> Self {
        use crate::error::Error;
        match e {
            SegmentError::Invalid(m) => Error::Invalid(m),
            SegmentError::TooLarge(m) => Error::field("condition", "too_big", &m, Value::Null),
            SegmentError::Store(s) => s.into(),
            SegmentError::Plugin(p) => Error::PluginUnavailable(p.to_string()),
        }
    }
}

/// The engine's services.
#[derive(Clone)]
pub struct Engine {
    pub store: Store,
    pub plugins: Arc<PluginHost>,
}

impl Engine {
    pub fn new(store: Store, plugins: Arc<PluginHost>) -> Engine {
        Engine { store, plugins }
    }

    /// Parses a tree against the built-in operators and the loaded plugins' operators.
    pub fn parse(&self, v: &Value) -> Result<Tree, SegmentError> {
        let plugins = self.plugins.clone();
        conditions::parse(v, &move |name| plugins.operator(name).is_some()).map_err(|e| SegmentError::Invalid(e.0))
    }

    /// Checks a condition for a segment of `project` (`self_id` on update): parses it, lets plugins check
    /// their operands, and checks that referenced segments exist and no reference leads back to itself.
    pub async fn check(&self, project: &str, v: &Value, self_id: Option<&str>) -> Result<Tree, SegmentError> {
        let tree = self.parse(v)?;
        if let Some(at) = tree.empty_group() {
            return Err(SegmentError::Invalid(format!(
                "{at} has neither filters nor conditions (an empty group matches nobody)"
            )));
        }
        for f in tree.filters() {
            if let conditions::Op::Plugin(name) = &f.op {
                if !f.field.is_contact_field() {
                    return Err(SegmentError::Invalid(format!(
                        "{} ({}): operator {name} applies to contact fields only",
                        f.at, f.field_name
                    )));
                }
                let operand = match &f.operand {
                    conditions::Operand::Raw(v) => crate::plugins::Value::from_json(v),
                    _ => crate::plugins::Value::Null,
                };
                if let Err(msg) = self.plugins.validate_operand(name, &operand).await? {
                    return Err(SegmentError::Invalid(format!("{} ({}): {msg}", f.at, f.field_name)));
                }
            }
        }
        for id in tree.segments() {
            let f = tree.filter_referencing(&id).map(|f| format!("{} ({})", f.at, f.field_name)).unwrap_or_default();
            if Some(id.as_str()) == self_id {
                return Err(SegmentError::Invalid(format!("{f}: a segment cannot reference itself")));
            }
            if self.store.segment(project, &id).await?.is_none() {
                return Err(SegmentError::Invalid(format!("{f}: segment {id} does not exist")));
            }
            if let Some(me) = self_id
                && self.reaches(project, &id, me).await?
            {
                return Err(SegmentError::Invalid(format!(
                    "{f}: circular segment reference (segment {id} references this segment)"
                )));
            }
        }
        Ok(tree)
    }

    /// Whether segment `from` references `target`, directly or through other segments.
    async fn reaches(&self, project: &str, from: &str, target: &str) -> Result<bool, StoreError> {
        let mut seen = vec![from.to_string()];
        let mut frontier = vec![from.to_string()];
        while !frontier.is_empty() {
            let next = self.store.segments_by_ids(project, &frontier).await?;
            frontier.clear();
            for s in next {
                for r in s.ref_segments {
                    if r == target {
                        return Ok(true);
                    }
                    if !seen.contains(&r) {
                        seen.push(r.clone());
                        frontier.push(r);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Loads every segment a tree references (through inlined dynamic segments too).
    async fn refs(&self, project: &str, tree: &Tree) -> Result<HashMap<String, Ref>, SegmentError> {
        let mut refs = HashMap::new();
        let mut frontier = tree.segments();
        for _ in 0..MAX_REF_DEPTH {
            frontier.retain(|id| !refs.contains_key(id));
            if frontier.is_empty() {
                return Ok(refs);
            }
            let found = self.store.segments_by_ids(project, &frontier).await?;
            frontier.clear();
            for s in found {
                if s.is_dynamic() {
                    let t = match &s.condition {
                        Some(c) => self.parse(c)?,
                        None => Tree { logic: conditions::Logic::And, groups: vec![] },
                    };
                    frontier.extend(t.segments());
                    refs.insert(s.id.clone(), Ref::Dynamic(t));
                } else {
                    refs.insert(s.id.clone(), Ref::Static);
                }
            }
        }
        Err(SegmentError::Invalid(format!("segment references chain more than {MAX_REF_DEPTH} levels deep")))
    }

    /// Translates a tree for a project at time `now`.
    pub async fn compile(&self, project: &str, tree: &Tree, now: i64) -> Result<Compiled, SegmentError> {
        let refs = self.refs(project, tree).await?;
        compile(tree, &refs, now).map_err(|e| match e {
            CompileError::Invalid(m) => SegmentError::Invalid(m),
            CompileError::TooLarge(m) => SegmentError::TooLarge(m),
        })
    }

    /// Evaluates the plugin leaves over a batch of candidates: per plugin leaf, one result per candidate.
    async fn plugin_results(
        &self,
        c: &Compiled,
        batch: &[Candidate],
    ) -> Result<HashMap<usize, Vec<bool>>, SegmentError> {
        let mut results = HashMap::new();
        for (i, leaf) in c.leaves.iter().enumerate() {
            if let Leaf::Plugin { operator, operand, timestamp, .. } = leaf {
                let values: Vec<crate::plugins::Value> = batch
                    .iter()
                    .map(|cand| {
                        let v = cand.v.get(i).cloned().unwrap_or(Value::Null);
                        match (timestamp, v.as_i64()) {
                            (true, Some(ms)) => crate::plugins::Value::Timestamp(ms),
                            _ => crate::plugins::Value::from_json(&v),
                        }
                    })
                    .collect();
                let operand = crate::plugins::Value::from_json(operand);
                results.insert(i, self.plugins.evaluate(operator, &operand, &values).await?);
            }
        }
        Ok(results)
    }

    pub async fn count(&self, project: &str, c: &Compiled) -> Result<i64, SegmentError> {
        self.store.count_matching(project, c, self).await
    }

    /// Which of these contacts match.
    pub async fn matching_among(
        &self,
        project: &str,
        c: &Compiled,
        ids: &[String],
    ) -> Result<Vec<String>, SegmentError> {
        self.store.matching_among(project, c, ids, self).await
    }

    /// The matching contact ids, newest first.
    pub async fn matching_ids(&self, project: &str, c: &Compiled) -> Result<Vec<String>, SegmentError> {
        self.store.matching_ids(project, c, self).await
    }

    /// One page of the matching contacts, newest first (without the total).
    pub async fn page_rows(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Contact>, SegmentError> {
        self.store.matching_page(project, c, offset, limit, self).await
    }

    /// One page of the matching contacts (newest first) and the total.
    pub async fn page(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<Contact>, i64), SegmentError> {
        self.store.matching_page_and_total(project, c, offset, limit, self).await
    }

    /// The tree of a dynamic segment.
    fn tree_of(&self, s: &Segment) -> Result<Tree, SegmentError> {
        match &s.condition {
            Some(c) => self.parse(c),
            None => Ok(Tree { logic: conditions::Logic::And, groups: vec![] }),
        }
    }

    /// The live member count of a segment.
    pub async fn live_count(&self, s: &Segment, now: i64) -> Result<i64, SegmentError> {
        if !s.is_dynamic() {
            return Ok(self.store.count_members(&s.project, &s.id).await?);
        }
        let tree = self.tree_of(s)?;
        let c = self.compile(&s.project, &tree, now).await?;
        self.count(&s.project, &c).await
    }

    /// How many contacts a condition matches now, without saving anything: the live count a condition
    /// builder shows. The condition is checked as a segment's would be (plugin operands included).
    pub async fn count_condition(&self, project: &str, v: &Value, now: i64) -> Result<i64, SegmentError> {
        let tree = self.check(project, v, None).await?;
        let c = self.compile(project, &tree, now).await?;
        self.count(project, &c).await
    }

    /// How many subscribed contacts a campaign audience reaches now (ALL, a segment's members, or a
    /// condition), counted as a send would resolve it.
    pub async fn audience_count(
        &self,
        project: &str,
        audience_type: &str,
        segment: Option<&str>,
        condition: Option<&Value>,
        now: i64,
    ) -> Result<i64, SegmentError> {
        let tree = crate::domain::campaigns::audience_tree(audience_type, segment, condition);
        self.count_condition(project, &tree, now).await
    }

    /// Recounts and stores `memberCount`: no events, no membership writes.
    pub async fn refresh(&self, s: &Segment, now: i64) -> Result<i64, SegmentError> {
        let n = self.live_count(s, now).await?;
        self.store.set_member_count(&s.project, &s.id, n, now).await?;
        Ok(n)
    }

    /// One page of a segment's contacts (live for dynamic segments) and the total.
    pub async fn contacts(
        &self,
        s: &Segment,
        offset: usize,
        limit: usize,
        now: i64,
    ) -> Result<(Vec<Contact>, i64), SegmentError> {
        if !s.is_dynamic() {
            let rows = self.store.member_page(&s.project, &s.id, offset, limit).await?;
            let total = self.store.count_members(&s.project, &s.id).await?;
            return Ok((rows, total));
        }
        let tree = self.tree_of(s)?;
        let c = self.compile(&s.project, &tree, now).await?;
        self.page(&s.project, &c, offset, limit).await
    }

    /// Recomputes a tracked dynamic segment's membership and emits `segment.<slug>.entry` / `.exit` for
    /// every change. Untracked and static segments are only recounted.
    pub async fn compute(&self, s: &Segment, now: i64) -> Result<Diff, SegmentError> {
        if !(s.is_dynamic() && s.track) {
            let count = self.refresh(s, now).await?;
            return Ok(Diff { entered: 0, exited: 0, count });
        }
        let tree = self.tree_of(s)?;
        let c = self.compile(&s.project, &tree, now).await?;
        let ids = self.matching_ids(&s.project, &c).await?;
        let (entry, exit) = event_names(&s.name, &s.id);
        let data = json!({ "segmentId": s.id, "segmentName": s.name });
        let events = MembershipEvents { entry, exit, data };
        Ok(self.store.apply_membership(&s.project, &s.id, &ids, &events, now).await?)
    }

    /// The recurring recount: every segment's count, and every tracked segment's membership.
    pub async fn refresh_all(&self, now: i64) -> Result<(), String> {
        let mut failures = Vec::new();
        for s in self.store.all_segments().await.map_err(|e| e.to_string())? {
            let r = if s.is_dynamic() && s.track {
                self.compute(&s, now).await.map(|_| ())
            } else {
                self.refresh(&s, now).await.map(|_| ())
            };
            if let Err(e) = r {
                tracing::warn!(segment = %s.id, error = %e, "cannot recount segment");
                failures.push(format!("{}: {e}", s.id));
            }
        }
        if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
    }

    /// Recomputes the tracked segments whose inputs changed since their last computation: a contact
    /// written in the project or an event the condition reads recorded.
    pub async fn compute_changed(&self, now: i64) -> Result<usize, String> {
        let mut done = 0;
        for s in self.store.all_segments().await.map_err(|e| e.to_string())? {
            if !(s.is_dynamic() && s.track) {
                continue;
            }
            let changed = match s.computed_at {
                None => true,
                Some(t) => self.store.changed_since(&s.project, t, &s.ref_events).await.map_err(|e| e.to_string())?,
            };
            if changed {
                self.compute(&s, now).await.map_err(|e| format!("segment {}: {e}", s.id))?;
                done += 1;
            }
        }
        Ok(done)
    }

    /// Registers the recurring jobs.
    pub fn register(&self, registry: &mut crate::infra::jobs::Registry) {
        registry.every(REFRESH_JOB, REFRESH_MS);
        registry.every(TRACK_JOB, TRACK_MS);
        let e = self.clone();
        registry.register(REFRESH_JOB, move |ctx: crate::infra::jobs::JobContext| {
            let e = e.clone();
            async move { e.refresh_all(ctx.clock.now_ms()).await }
        });
        let e = self.clone();
        registry.register(TRACK_JOB, move |ctx: crate::infra::jobs::JobContext| {
            let e = e.clone();
            async move { e.compute_changed(ctx.clock.now_ms()).await.map(|_| ()) }
        });
    }
}

/// `segment.<slug>.entry` and `segment.<slug>.exit`; a name without slug characters uses the id
/// (docs/behaviour.md#events).
pub fn event_names(name: &str, id: &str) -> (String, String) {
    let mut slug = conditions::slug(name);
    if slug.is_empty() {
        slug = id.to_string();
    }
    (format!("segment.{slug}.entry"), format!("segment.{slug}.exit"))
}

impl PluginEval<SegmentError> for Engine {
    fn eval<'a>(
        &'a self,
        c: &'a Compiled,
        batch: &'a [Candidate],
    ) -> futures_util::future::BoxFuture<'a, Result<HashMap<usize, Vec<bool>>, SegmentError>> {
        Box::pin(self.plugin_results(c, batch))
    }
}
