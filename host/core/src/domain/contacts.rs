//! Contact data and subscription rules (docs/behaviour.md#contacts-and-data, docs/behaviour.md#events).

use serde_json::{Map, Value};

/// Syntax check of an address within RFC 5321 limits: one `@`, a local part of 1..64 characters without
/// spaces or control characters, a domain of 1..253 characters with at least one dot and labels of
/// letters, digits and hyphens.
pub fn is_email(s: &str) -> bool {
    if s.len() > 254 {
        return false;
    }
    let Some((local, domain)) = s.rsplit_once('@') else { return false };
    if local.is_empty() || local.len() > 64 || local.contains('@') {
        return false;
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return false;
    }
    if !local.chars().all(|c| c.is_ascii_graphic() && !"()<>[]\\,;:\"".contains(c)) {
        return false;
    }
    if domain.len() > 253 || !domain.contains('.') {
        return false;
    }
    domain.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    }) && !domain.rsplit('.').next().unwrap_or("").chars().all(|c| c.is_ascii_digit())
}

/// Keys that are never stored on a contact (the interface reserves them; dropped silently).
pub const RESERVED_KEYS: &[&str] =
    &["id", "plunk_id", "plunk_email", "email", "unsubscribeUrl", "subscribeUrl", "manageUrl"];

/// What a request's `data` object asks for, after the data rules (docs/behaviour.md#contacts-and-data).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DataPatch {
    /// Stored on the contact.
    pub set: Map<String, Value>,
    /// Removed from the contact (`null`).
    pub unset: Vec<String>,
    /// Used for this request only (`{value, persistent: false}` on track and send).
    pub one_off: Map<String, Value>,
}

impl DataPatch {
    /// Reads a `data` object. `one_off_allowed` is true on track and send.
    pub fn parse(data: &Map<String, Value>, one_off_allowed: bool) -> DataPatch {
        let mut p = DataPatch::default();
        for (k, v) in data {
            if RESERVED_KEYS.contains(&k.as_str()) {
                continue;
            }
            match v {
                Value::Null => p.unset.push(k.clone()),
                Value::String(s) if s.is_empty() => {}
                Value::Object(o) if one_off_allowed && is_value_wrapper(o) => {
                    let value = o.get("value").cloned().unwrap_or(Value::Null);
                    if o.get("persistent") == Some(&Value::Bool(false)) {
                        p.one_off.insert(k.clone(), value);
                    } else {
                        match value {
                            Value::Null => p.unset.push(k.clone()),
                            Value::String(s) if s.is_empty() => {}
                            v => {
                                p.set.insert(k.clone(), v);
                            }
                        }
                    }
                }
                other => {
                    p.set.insert(k.clone(), other.clone());
                }
            }
        }
        p
    }

    /// The contact's data after applying this patch.
    pub fn apply(&self, data: &Map<String, Value>) -> Map<String, Value> {
        let mut out = data.clone();
        for k in &self.unset {
            out.remove(k);
        }
        for (k, v) in &self.set {
            out.insert(k.clone(), v.clone());
        }
        out
    }

    /// The values this request carried (stored ones and one-off ones), as recorded with an event.
    pub fn request_values(&self) -> Map<String, Value> {
        let mut out = self.set.clone();
        for (k, v) in &self.one_off {
            out.insert(k.clone(), v.clone());
        }
        out
    }
}

/// `{ value, persistent }` (and nothing else), the form of a one-off or explicit value.
fn is_value_wrapper(o: &Map<String, Value>) -> bool {
    o.contains_key("value")
        && o.keys().all(|k| k == "value" || k == "persistent")
        && o.get("persistent").is_none_or(Value::is_boolean)
}

/// True when `name` is one of the names Herald emits itself (docs/behaviour.md#events).
pub fn is_reserved_event(name: &str) -> bool {
    if name.starts_with("email.")
        || name.starts_with("workflow.")
        || name == "contact.subscribed"
        || name == "contact.unsubscribed"
    {
        return true;
    }
    if let Some(rest) = name.strip_prefix("segment.") {
        return (rest.ends_with(".entry") && rest.len() > ".entry".len())
            || (rest.ends_with(".exit") && rest.len() > ".exit".len());
    }
    false
}

pub const SUBSCRIBED_EVENT: &str = "contact.subscribed";
pub const UNSUBSCRIBED_EVENT: &str = "contact.unsubscribed";

/// The subscription state after a request, and the event to emit when it flips. A new
/// contact takes `requested`, else `default_for_new`, and emits nothing.
pub fn subscription(
    current: Option<bool>,
    requested: Option<bool>,
    default_for_new: bool,
) -> (bool, Option<&'static str>) {
    match (current, requested) {
        (None, r) => (r.unwrap_or(default_for_new), None),
        (Some(c), None) => (c, None),
        (Some(c), Some(r)) if c == r => (c, None),
        (Some(_), Some(true)) => (true, Some(SUBSCRIBED_EVENT)),
        (Some(_), Some(false)) => (false, Some(UNSUBSCRIBED_EVENT)),
    }
}

/// Emails are trimmed and lowercased (docs/behaviour.md#contacts-and-data). Only ASCII letters are
/// folded: Unicode folding turns some characters no address may hold into ASCII ones (the Kelvin sign
/// into `k`), which would make one address spell another.
pub fn normalize_email(s: &str) -> String {
    s.trim().to_ascii_lowercase()
}

/// The segment slug of event names (docs/behaviour.md#events): lowercase, spaces to `-`, other specials
/// dropped, runs of `-` collapsed.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.to_lowercase().chars() {
        let c = if c.is_whitespace() { '-' } else { c };
        if c.is_alphanumeric() || c == '-' || c == '_' {
            if c == '-' && out.ends_with('-') {
                continue;
            }
            out.push(c);
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn data_rules_table() {
        // (input, one-off allowed, expected set, expected unset, expected one-off)
        let cases = [
            (json!({"plan": "pro"}), true, json!({"plan": "pro"}), vec![], json!({})),
            (
                json!({"n": 3, "ok": true, "o": {"a": 1}}),
                false,
                json!({"n": 3, "ok": true, "o": {"a": 1}}),
                vec![],
                json!({}),
            ),
            (json!({"plan": null}), true, json!({}), vec!["plan"], json!({})),
            (json!({"plan": ""}), true, json!({}), vec![], json!({})),
            (json!({"code": {"value": "X1", "persistent": false}}), true, json!({}), vec![], json!({"code": "X1"})),
            // On contacts, the wrapper is an ordinary object.
            (
                json!({"code": {"value": "X1", "persistent": false}}),
                false,
                json!({"code": {"value": "X1", "persistent": false}}),
                vec![],
                json!({}),
            ),
            (json!({"code": {"value": "X1", "persistent": true}}), true, json!({"code": "X1"}), vec![], json!({})),
            (json!({"code": {"value": "X1"}}), true, json!({"code": "X1"}), vec![], json!({})),
            (
                json!({"code": {"value": 1, "other": 2}}),
                true,
                json!({"code": {"value": 1, "other": 2}}),
                vec![],
                json!({}),
            ),
            (
                json!({"id": 1, "email": "x", "plunk_id": 1, "plunk_email": 1, "unsubscribeUrl": 1, "subscribeUrl": 1, "manageUrl": 1, "keep": 1}),
                true,
                json!({"keep": 1}),
                vec![],
                json!({}),
            ),
        ];
        for (i, (input, one_off, set, unset, once)) in cases.into_iter().enumerate() {
            let p = DataPatch::parse(&obj(input.clone()), one_off);
            assert_eq!(Value::Object(p.set.clone()), set, "case {i}: {input}");
            assert_eq!(p.unset, unset, "case {i}: {input}");
            assert_eq!(Value::Object(p.one_off.clone()), once, "case {i}: {input}");
        }
    }

    #[test]
    fn applying_a_patch_sets_deletes_and_keeps() {
        let data = obj(json!({"a": 1, "b": 2, "c": 3}));
        let p =
            DataPatch::parse(&obj(json!({"a": 10, "b": null, "c": "", "d": {"value": 4, "persistent": false}})), true);
        assert_eq!(Value::Object(p.apply(&data)), json!({"a": 10, "c": 3}));
        assert_eq!(Value::Object(p.request_values()), json!({"a": 10, "d": 4}));
    }

    #[test]
    fn reserved_event_names() {
        for n in [
            "email.sent",
            "email.anything",
            "contact.subscribed",
            "contact.unsubscribed",
            "segment.vip.entry",
            "segment.a-b.exit",
            "workflow.started",
            "workflow.anything",
        ] {
            assert!(is_reserved_event(n), "{n}");
        }
        for n in [
            "signup",
            "email",
            "emails.sent",
            "contact.created",
            "segment.entry",
            "segment..exits",
            "segment.vip",
            "workflows.x",
        ] {
            assert!(!is_reserved_event(n), "{n}");
        }
    }

    #[test]
    fn subscription_transitions() {
        use super::subscription as s;
        assert_eq!(s(None, None, true), (true, None), "new contact on track/contacts defaults to subscribed");
        assert_eq!(s(None, None, false), (false, None), "new contact on send defaults to unsubscribed");
        assert_eq!(s(None, Some(false), true), (false, None));
        assert_eq!(s(Some(false), None, true), (false, None), "omitted keeps the state");
        assert_eq!(s(Some(true), Some(true), true), (true, None), "no flip, no event");
        assert_eq!(s(Some(false), Some(true), true), (true, Some("contact.subscribed")));
        assert_eq!(s(Some(true), Some(false), true), (false, Some("contact.unsubscribed")));
        assert_eq!(s(Some(false), Some(false), true), (false, None), "track with false does not resubscribe");
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("VIP Customers"), "vip-customers");
        assert_eq!(slug("  Big -- spenders!! 2024 "), "big-spenders-2024");
        assert_eq!(slug("a/b.c"), "abc");
    }
}
