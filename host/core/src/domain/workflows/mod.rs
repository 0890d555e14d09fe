//! Workflow graphs (docs/behaviour.md#workflows): steps, the transitions between them, the rules every
//! saved graph keeps, and the edits that keep them (adding a step after the last leaf, deleting a step
//! with or without splicing its neighbours together). Step configs are checked in `steps.rs`.
//!
//! Must not import: salvo, surrealdb, tokio.

pub mod run;
pub mod schedule;
pub mod steps;

use std::collections::{HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most steps a workflow has.
pub const MAX_STEPS: usize = 100;
/// Most transitions a workflow has.
pub const MAX_TRANSITIONS: usize = 300;

/// The built-in step types; any other type is a plugin's.
pub const TRIGGER: &str = "TRIGGER";
pub const SEND_EMAIL: &str = "SEND_EMAIL";
pub const DELAY: &str = "DELAY";
pub const WAIT_FOR_EVENT: &str = "WAIT_FOR_EVENT";
pub const CONDITION: &str = "CONDITION";
pub const EXIT: &str = "EXIT";
pub const BUILTIN_TYPES: &[&str] = &[TRIGGER, SEND_EMAIL, DELAY, WAIT_FOR_EVENT, CONDITION, EXIT];

/// Trigger types.
pub const TRIGGER_TYPES: &[&str] = &["EVENT", "MANUAL", "SCHEDULE"];

/// Where a step sits on the editor's canvas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Position {
    pub x: f64,
    pub y: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub position: Position,
    pub config: Value,
    pub template_id: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Which outcome of a WAIT_FOR_EVENT step a transition follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WaitOutcome {
    #[serde(rename = "EVENT")]
    Event,
    #[serde(rename = "TIMEOUT")]
    Timeout,
}

impl WaitOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitOutcome::Event => "EVENT",
            WaitOutcome::Timeout => "TIMEOUT",
        }
    }

    pub fn parse(s: &str) -> Option<WaitOutcome> {
        match s {
            "EVENT" => Some(WaitOutcome::Event),
            "TIMEOUT" => Some(WaitOutcome::Timeout),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    pub id: String,
    pub from: String,
    pub to: String,
    /// the branch of a CONDITION step (`yes`/`no`) or a plugin step's named branch
    pub branch: Option<String>,
    pub wait_outcome: Option<WaitOutcome>,
    pub created_at: i64,
}

/// A workflow's steps and transitions, in creation order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Graph {
    pub steps: Vec<Step>,
    pub transitions: Vec<Transition>,
}

/// A broken graph rule: a 400 whose message names the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphError(pub String);

impl std::fmt::Display for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a step's outgoing links are told apart.
enum Fanout {
    /// none (EXIT)
    None,
    /// one plain link
    One,
    /// one `yes` and one `no`
    YesNo,
    /// one EVENT and one TIMEOUT
    Wait,
    /// a plugin step: one plain link and one per named branch
    Branches,
}

fn fanout(kind: &str) -> Fanout {
    match kind {
        EXIT => Fanout::None,
        CONDITION => Fanout::YesNo,
        WAIT_FOR_EVENT => Fanout::Wait,
        TRIGGER | SEND_EMAIL | DELAY => Fanout::One,
        _ => Fanout::Branches,
    }
}

/// Whether a step type is one of the built-in ones.
pub fn is_builtin(kind: &str) -> bool {
    BUILTIN_TYPES.contains(&kind)
}

impl Graph {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    pub fn step_mut(&mut self, id: &str) -> Option<&mut Step> {
        self.steps.iter_mut().find(|s| s.id == id)
    }

    pub fn trigger(&self) -> Option<&Step> {
        self.steps.iter().find(|s| s.kind == TRIGGER)
    }

    /// The transitions leaving a step, in creation order.
    pub fn outgoing<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Transition> + 'a {
        self.transitions.iter().filter(move |t| t.from == id)
    }

    pub fn incoming<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Transition> + 'a {
        self.transitions.iter().filter(move |t| t.to == id)
    }

    /// `"Send welcome" (<id>)`, for messages.
    pub fn label(&self, id: &str) -> String {
        match self.step(id) {
            Some(s) => format!("{:?} ({})", s.name, s.id),
            None => format!("({id})"),
        }
    }

    /// Checks every graph rule; the first one broken is the error.
    pub fn check(&self) -> Result<(), GraphError> {
        let err = |m: String| Err(GraphError(m));
        if self.steps.len() > MAX_STEPS {
            return err(format!("a workflow has at most {MAX_STEPS} steps"));
        }
        if self.transitions.len() > MAX_TRANSITIONS {
            return err(format!("a workflow has at most {MAX_TRANSITIONS} transitions"));
        }
        let triggers: Vec<&Step> = self.steps.iter().filter(|s| s.kind == TRIGGER).collect();
        if triggers.len() != 1 {
            return err(format!("a workflow has exactly one TRIGGER step, this one would have {}", triggers.len()));
        }
        for t in &self.transitions {
            let (Some(from), Some(to)) = (self.step(&t.from), self.step(&t.to)) else {
                return err(format!("transition {} links a step that is not in this workflow", t.id));
            };
            if t.from == t.to {
                return err(format!("step {} cannot link to itself", self.label(&t.from)));
            }
            if to.kind == TRIGGER {
                return err(format!(
                    "nothing may link into the TRIGGER step {} (from {})",
                    self.label(&to.id),
                    self.label(&from.id)
                ));
            }
        }
        for s in &self.steps {
            self.check_fanout(s)?;
        }
        if let Some(cycle) = self.cycle() {
            let names: Vec<String> = cycle.iter().map(|id| self.label(id)).collect();
            return err(format!("transitions may not form a cycle: {}", names.join(" → ")));
        }
        Ok(())
    }

    /// The outgoing-link rule of one step.
    fn check_fanout(&self, s: &Step) -> Result<(), GraphError> {
        let out: Vec<&Transition> = self.outgoing(&s.id).collect();
        let me = self.label(&s.id);
        let err = |m: String| Err(GraphError(m));
        match fanout(&s.kind) {
            Fanout::None if !out.is_empty() => err(format!("the EXIT step {me} cannot link to another step")),
            Fanout::None => Ok(()),
            Fanout::One => {
                if let Some(t) = out.iter().find(|t| t.branch.is_some() || t.wait_outcome.is_some()) {
                    return err(format!(
                        "the link from {me} to {} cannot have a branch or wait outcome: a {} step has one plain link",
                        self.label(&t.to),
                        s.kind
                    ));
                }
                if out.len() > 1 {
                    return err(format!(
                        "step {me} already links to {}: a {} step has at most one outgoing link",
                        self.label(&out[0].to),
                        s.kind
                    ));
                }
                Ok(())
            }
            Fanout::YesNo => {
                let mut seen = HashSet::new();
                for t in &out {
                    match t.branch.as_deref() {
                        Some(b @ ("yes" | "no")) if t.wait_outcome.is_none() => {
                            if !seen.insert(b) {
                                return err(format!("the CONDITION step {me} already has a {b:?} link"));
                            }
                        }
                        _ => {
                            return err(format!(
                                "the link from the CONDITION step {me} to {} needs condition.branch yes or no",
                                self.label(&t.to)
                            ));
                        }
                    }
                }
                Ok(())
            }
            Fanout::Wait => {
                let mut seen = HashSet::new();
                for t in &out {
                    match (t.wait_outcome, &t.branch) {
                        (Some(WaitOutcome::Timeout), None) if s.config.get("timeout").is_none_or(Value::is_null) => {
                            return err(format!(
                                "the WAIT_FOR_EVENT step {me} has no timeout, so its TIMEOUT link to {} could never be \
                                 followed: give the step a timeout first",
                                self.label(&t.to)
                            ));
                        }
                        (Some(o), None) => {
                            if !seen.insert(o) {
                                return err(format!("the WAIT_FOR_EVENT step {me} already has a {} link", o.as_str()));
                            }
                        }
                        _ => {
                            return err(format!(
                                "the link from the WAIT_FOR_EVENT step {me} to {} needs waitOutcome EVENT or TIMEOUT",
                                self.label(&t.to)
                            ));
                        }
                    }
                }
                Ok(())
            }
            Fanout::Branches => {
                let mut seen = HashSet::new();
                for t in &out {
                    if t.wait_outcome.is_some() {
                        return err(format!(
                            "the link from {me} to {} cannot have a wait outcome (only WAIT_FOR_EVENT steps do)",
                            self.label(&t.to)
                        ));
                    }
                    if !seen.insert(t.branch.as_deref()) {
                        let which = match &t.branch {
                            Some(b) => format!("a {b:?} branch link"),
                            None => "a plain link".to_string(),
                        };
                        return err(format!("step {me} already has {which}"));
                    }
                }
                Ok(())
            }
        }
    }

    /// A cycle, as the steps on it in order, if the transitions form one.
    fn cycle(&self) -> Option<Vec<String>> {
        // Iterative depth-first search with colours; the path on the stack gives the cycle.
        let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
        for t in &self.transitions {
            next.entry(t.from.as_str()).or_default().push(t.to.as_str());
        }
        let mut colour: HashMap<&str, u8> = HashMap::new(); // 1 on the path, 2 done
        for start in &self.steps {
            if colour.contains_key(start.id.as_str()) {
                continue;
            }
            let mut stack: Vec<(&str, usize)> = vec![(start.id.as_str(), 0)];
            colour.insert(start.id.as_str(), 1);
            while let Some((node, i)) = stack.pop() {
                let children = next.get(node).map(Vec::as_slice).unwrap_or(&[]);
                if let Some(&child) = children.get(i) {
                    stack.push((node, i + 1));
                    match colour.get(child) {
                        Some(1) => {
                            let from = stack.iter().position(|(n, _)| *n == child).unwrap_or(0);
                            let mut path: Vec<String> = stack[from..].iter().map(|(n, _)| n.to_string()).collect();
                            path.push(child.to_string());
                            return Some(path);
                        }
                        Some(_) => {}
                        None => {
                            colour.insert(child, 1);
                            stack.push((child, 0));
                        }
                    }
                } else {
                    colour.insert(node, 2);
                }
            }
        }
        None
    }

    /// The step a new step is linked after when it is added with `autoConnect`: the newest step that has
    /// no outgoing link and can have one (not EXIT), and the link it gets (a CONDITION's `yes` branch, a
    /// WAIT_FOR_EVENT's EVENT outcome). None when every step already leads somewhere.
    pub fn auto_parent(&self) -> Option<(String, Option<String>, Option<WaitOutcome>)> {
        let leaf = self.steps.iter().rev().find(|s| s.kind != EXIT && self.outgoing(&s.id).next().is_none())?;
        Some(match leaf.kind.as_str() {
            CONDITION => (leaf.id.clone(), Some("yes".into()), None),
            WAIT_FOR_EVENT => (leaf.id.clone(), None, Some(WaitOutcome::Event)),
            _ => (leaf.id.clone(), None, None),
        })
    }

    /// Deletes a step. `splice`: the links into it are moved to its one child (refused when it has two
    /// or more), or dropped when it has none. Otherwise the step goes with every step only it leads to
    /// (a step whose every incoming link comes from steps being deleted). Answers the ids deleted.
    pub fn delete_step(&mut self, id: &str, splice: bool) -> Result<Vec<String>, GraphError> {
        let Some(step) = self.step(id) else { return Err(GraphError(format!("step {id} is not in this workflow"))) };
        if step.kind == TRIGGER {
            return Err(GraphError(format!(
                "the TRIGGER step {} cannot be deleted; change the trigger with PATCH /workflows/:id",
                self.label(id)
            )));
        }
        if splice {
            let children: Vec<String> = self.outgoing(id).map(|t| t.to.clone()).collect();
            if children.len() > 1 {
                let names: Vec<String> = children.iter().map(|c| self.label(c)).collect();
                return Err(GraphError(format!(
                    "step {} leads to {} steps ({}); splice needs at most one child: delete without splice or \
                     remove a link first",
                    self.label(id),
                    children.len(),
                    names.join(", ")
                )));
            }
            let child = children.into_iter().next();
            self.transitions.retain(|t| t.from != id);
            match child {
                Some(child) => {
                    for t in self.transitions.iter_mut().filter(|t| t.to == id) {
                        t.to = child.clone();
                    }
                    // Two parents may now share a link kind to the child twice over; a parent that already linked
                    // to the child keeps one link.
                    let mut seen = HashSet::new();
                    self.transitions
                        .retain(|t| seen.insert((t.from.clone(), t.to.clone(), t.branch.clone(), t.wait_outcome)));
                }
                None => self.transitions.retain(|t| t.to != id),
            }
            self.steps.retain(|s| s.id != id);
            return Ok(vec![id.to_string()]);
        }
        let mut gone: HashSet<String> = HashSet::from([id.to_string()]);
        let mut queue: VecDeque<String> = VecDeque::from([id.to_string()]);
        while let Some(at) = queue.pop_front() {
            let children: Vec<String> = self.outgoing(&at).map(|t| t.to.clone()).collect();
            for c in children {
                if gone.contains(&c) {
                    continue;
                }
                if self.incoming(&c).all(|t| gone.contains(&t.from)) {
                    gone.insert(c.clone());
                    queue.push_back(c);
                }
            }
        }
        self.transitions.retain(|t| !gone.contains(&t.from) && !gone.contains(&t.to));
        let order: Vec<String> = self.steps.iter().filter(|s| gone.contains(&s.id)).map(|s| s.id.clone()).collect();
        self.steps.retain(|s| !gone.contains(&s.id));
        Ok(order)
    }

    /// The event names the graph waits for (WAIT_FOR_EVENT steps) or reads (CONDITION steps), sorted.
    pub fn events(&self) -> Vec<String> {
        let mut v: Vec<String> = self.steps.iter().filter_map(steps::event_of).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The templates its SEND_EMAIL steps use, sorted.
    pub fn templates(&self) -> Vec<String> {
        let mut v: Vec<String> = self.steps.iter().filter_map(|s| s.template_id.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Top-level contact data keys its CONDITION steps read, sorted.
    pub fn data_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.steps.iter().filter_map(steps::data_key_of).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Segments its CONDITION steps read, sorted.
    pub fn segments(&self) -> Vec<String> {
        let mut v: Vec<String> = self.steps.iter().filter_map(steps::segment_of).collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(id: &str, kind: &str) -> Step {
        Step {
            id: id.into(),
            kind: kind.into(),
            name: id.to_uppercase(),
            position: Position::default(),
            config: json!({}),
            template_id: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    fn link(from: &str, to: &str) -> Transition {
        Transition {
            id: format!("{from}-{to}"),
            from: from.into(),
            to: to.into(),
            branch: None,
            wait_outcome: None,
            created_at: 0,
        }
    }

    fn branch(from: &str, to: &str, b: &str) -> Transition {
        Transition { branch: Some(b.into()), ..link(from, to) }
    }

    fn wait(from: &str, to: &str, o: WaitOutcome) -> Transition {
        Transition { wait_outcome: Some(o), ..link(from, to) }
    }

    fn graph(steps: &[(&str, &str)], transitions: Vec<Transition>) -> Graph {
        Graph { steps: steps.iter().map(|(id, k)| step(id, k)).collect(), transitions }
    }

    #[test]
    fn graph_rules_refuse_each_broken_shape_and_name_the_steps() {
        use WaitOutcome::*;
        let base =
            [("t", TRIGGER), ("s", SEND_EMAIL), ("c", CONDITION), ("w", WAIT_FOR_EVENT), ("x", EXIT), ("h", "WEBHOOK")];
        let with_timeout = |mut g: Graph| {
            if let Some(w) = g.step_mut("w") {
                w.config = json!({ "eventName": "paid", "timeout": 60 });
            }
            g
        };
        let cases: Vec<(Vec<Transition>, Option<&str>)> = vec![
            (vec![link("t", "s"), link("s", "c"), branch("c", "w", "yes"), branch("c", "x", "no")], None),
            (vec![link("t", "w"), wait("w", "s", Event), wait("w", "x", Timeout)], None),
            (vec![link("t", "h"), link("h", "s"), branch("h", "x", "failed")], None),
            (vec![link("s", "t")], Some("nothing may link into the TRIGGER step \"T\" (t) (from \"S\" (s))")),
            (vec![link("s", "s")], Some("step \"S\" (s) cannot link to itself")),
            (
                vec![link("t", "s"), link("s", "c"), branch("c", "s", "yes")],
                Some("cycle: \"S\" (s) → \"C\" (c) → \"S\" (s)"),
            ),
            (vec![link("x", "s")], Some("the EXIT step \"X\" (x) cannot link")),
            (vec![link("t", "s"), link("t", "c")], Some("step \"T\" (t) already links to \"S\" (s)")),
            (vec![branch("s", "c", "yes")], Some("cannot have a branch or wait outcome")),
            (vec![link("c", "s")], Some("CONDITION step \"C\" (c) to \"S\" (s) needs condition.branch yes or no")),
            (vec![branch("c", "s", "maybe")], Some("needs condition.branch yes or no")),
            (vec![branch("c", "s", "yes"), branch("c", "x", "yes")], Some("already has a \"yes\" link")),
            (vec![link("w", "s")], Some("needs waitOutcome EVENT or TIMEOUT")),
            (vec![wait("w", "s", Event), wait("w", "x", Event)], Some("already has a EVENT link")),
            (vec![link("h", "s"), link("h", "x")], Some("already has a plain link")),
            (vec![wait("h", "s", Event)], Some("cannot have a wait outcome")),
            (vec![link("t", "nope")], Some("links a step that is not in this workflow")),
        ];
        for (transitions, want) in cases {
            let g = with_timeout(graph(&base, transitions.clone()));
            match (g.check(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.0.contains(w), "{transitions:?}: {e} should contain {w}"),
                (got, want) => panic!("{transitions:?}: got {got:?}, want {want:?}"),
            }
        }
        let untimed = graph(&base, vec![wait("w", "x", WaitOutcome::Timeout)]);
        assert!(untimed.check().unwrap_err().0.contains("has no timeout"), "a TIMEOUT link needs a timeout");
        let two = graph(&[("t", TRIGGER), ("u", TRIGGER)], vec![]);
        assert!(two.check().unwrap_err().0.contains("exactly one TRIGGER step, this one would have 2"));
        let none = graph(&[("s", SEND_EMAIL)], vec![]);
        assert!(none.check().unwrap_err().0.contains("would have 0"));
    }

    #[test]
    fn a_long_chain_is_checked_without_recursion() {
        let n = MAX_STEPS;
        let mut g = Graph { steps: vec![step("s0", TRIGGER)], transitions: vec![] };
        for i in 1..n {
            g.steps.push(step(&format!("s{i}"), DELAY));
            g.transitions.push(link(&format!("s{}", i - 1), &format!("s{i}")));
        }
        assert_eq!(g.check(), Ok(()));
        g.steps.push(step("extra", DELAY));
        assert!(g.check().unwrap_err().0.contains("at most 100 steps"));
    }

    #[test]
    fn auto_connect_picks_the_newest_open_leaf_and_its_natural_link() {
        let g = graph(&[("t", TRIGGER), ("s", SEND_EMAIL)], vec![link("t", "s")]);
        assert_eq!(g.auto_parent(), Some(("s".into(), None, None)));
        let g = graph(&[("t", TRIGGER), ("c", CONDITION)], vec![link("t", "c")]);
        assert_eq!(g.auto_parent(), Some(("c".into(), Some("yes".into()), None)));
        let g = graph(&[("t", TRIGGER), ("w", WAIT_FOR_EVENT)], vec![link("t", "w")]);
        assert_eq!(g.auto_parent(), Some(("w".into(), None, Some(WaitOutcome::Event))));
        let g = graph(&[("t", TRIGGER), ("x", EXIT)], vec![link("t", "x")]);
        assert_eq!(g.auto_parent(), None, "EXIT ends the flow");
        let g = graph(&[("t", TRIGGER)], vec![]);
        assert_eq!(g.auto_parent(), Some(("t".into(), None, None)));
    }

    #[test]
    fn splice_moves_the_links_into_a_step_to_its_child() {
        let mut g = graph(
            &[("t", TRIGGER), ("c", CONDITION), ("d", DELAY), ("s", SEND_EMAIL)],
            vec![link("t", "c"), branch("c", "d", "yes"), link("d", "s")],
        );
        assert_eq!(g.delete_step("d", true), Ok(vec!["d".into()]));
        let moved = Transition { id: "c-d".into(), ..branch("c", "s", "yes") };
        assert_eq!(g.transitions, vec![link("t", "c"), moved]);
        assert_eq!(g.check(), Ok(()));
        // Two children: refused, nothing changed.
        let mut g = graph(
            &[("t", TRIGGER), ("c", CONDITION), ("a", DELAY), ("b", DELAY)],
            vec![link("t", "c"), branch("c", "a", "yes"), branch("c", "b", "no")],
        );
        let before = g.clone();
        assert!(g.delete_step("c", true).unwrap_err().0.contains("leads to 2 steps"));
        assert_eq!(g, before);
        // A leaf: the links into it go.
        let mut g = graph(&[("t", TRIGGER), ("s", SEND_EMAIL)], vec![link("t", "s")]);
        g.delete_step("s", true).unwrap();
        assert!(g.transitions.is_empty());
        assert!(g.delete_step("t", false).unwrap_err().0.contains("TRIGGER step"));
    }

    #[test]
    fn delete_without_splice_takes_what_only_the_step_leads_to() {
        // t → c; c yes→ a → j; c no→ b → j; t's other path: none. Deleting a keeps j (b still leads to it).
        let mut g = graph(
            &[("t", TRIGGER), ("c", CONDITION), ("a", DELAY), ("b", DELAY), ("j", SEND_EMAIL), ("x", EXIT)],
            vec![
                link("t", "c"),
                branch("c", "a", "yes"),
                branch("c", "b", "no"),
                link("a", "j"),
                link("b", "j"),
                link("j", "x"),
            ],
        );
        assert_eq!(g.clone().delete_step("a", false), Ok(vec!["a".into()]));
        // Deleting c takes a, b, j and x: every one of them is reached only through c.
        let gone = g.delete_step("c", false).unwrap();
        assert_eq!(gone, vec!["c", "a", "b", "j", "x"]);
        assert_eq!(g.steps.len(), 1);
        assert!(g.transitions.is_empty());
    }
}
