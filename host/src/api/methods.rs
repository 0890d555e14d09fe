//! Wrong methods on paths that a parameter route shadows. `/contacts/fields` takes only GET, but
//! `/contacts/{id}` takes DELETE and PATCH, so the router would hand `DELETE /contacts/fields` to the
//! contact handler (a 404 for a contact named "fields") and answer `PUT /contacts/fields` with the
//! methods of `/contacts/{id}`. This middleware answers such requests itself, from the OpenAPI document:
//! 405 with the methods the document lists for the literal path in `Allow`.

use salvo::http::StatusCode;
use salvo::http::header::{ALLOW, HeaderValue};
use salvo::prelude::*;
use serde_json::Value;

/// One documented path, split at `/`: `None` for a `{parameter}` segment.
type Template = Vec<Option<String>>;

/// The documented paths that a parameter route shadows, with their methods.
pub struct ShadowedMethods {
    paths: Vec<(Template, Vec<&'static str>, HeaderValue)>,
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

fn template(path: &str) -> Template {
    path.trim_matches('/')
        .split('/')
        .map(|s| if s.starts_with('{') && s.ends_with('}') { None } else { Some(s.to_string()) })
        .collect()
}

/// Whether `general` matches every path `specific` matches at a literal segment of `specific`.
fn shadows(general: &Template, specific: &Template) -> bool {
    general.len() == specific.len()
        && general != specific
        && general.iter().zip(specific).all(|(g, s)| g.is_none() || g == s)
        && general.iter().zip(specific).any(|(g, s)| g.is_none() && s.is_some())
}

impl ShadowedMethods {
    /// Reads the paths and methods of the OpenAPI document (as JSON).
    pub fn from_document(doc: &Value) -> Self {
        let Some(paths) = doc.get("paths").and_then(Value::as_object) else { return Self { paths: Vec::new() } };
        let all: Vec<(Template, Vec<&'static str>)> = paths
            .iter()
            .map(|(p, item)| {
                let methods = METHODS.iter().copied().filter(|m| item.get(*m).is_some()).collect();
                (template(p), methods)
            })
            .collect();
        let paths = all
            .iter()
            .filter(|(t, _)| all.iter().any(|(g, _)| shadows(g, t)))
            .map(|(t, methods)| {
                let mut names: Vec<String> = methods.iter().map(|m| m.to_ascii_uppercase()).collect();
                if methods.contains(&"get") && !methods.contains(&"head") {
                    names.push("HEAD".into());
                }
                names.sort();
                let allow = HeaderValue::from_str(&names.join(", ")).unwrap_or(HeaderValue::from_static(""));
                (t.clone(), methods.clone(), allow)
            })
            .collect();
        Self { paths }
    }

    /// The `Allow` value when `method` is not documented for the shadowed path `path`.
    fn refusal(&self, method: &str, path: &str) -> Option<&HeaderValue> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (_, methods, allow) = self.paths.iter().find(|(t, _, _)| {
            t.len() == segments.len() && t.iter().zip(&segments).all(|(t, s)| t.as_deref().is_none_or(|t| t == *s))
        })?;
        let method = method.to_ascii_lowercase();
        let allowed = methods.contains(&method.as_str()) || (method == "head" && methods.contains(&"get"));
        (!allowed).then_some(allow)
    }
}

#[async_trait]
impl Handler for ShadowedMethods {
    async fn handle(&self, req: &mut Request, _depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
        if let Some(allow) = self.refusal(req.method().as_str(), req.uri().path()) {
            res.headers_mut().insert(ALLOW, allow.clone());
            res.status_code(StatusCode::METHOD_NOT_ALLOWED);
            ctrl.skip_rest();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_shadowed_paths_answer_for_their_methods() {
        let doc = serde_json::json!({"paths": {
            "/contacts": {"get": {}, "post": {}},
            "/contacts/fields": {"get": {}},
            "/contacts/{id}": {"get": {}, "delete": {}, "patch": {}},
            "/workflows/{id}/executions/cancel-all": {"post": {}},
            "/workflows/{id}/executions/{execution_id}": {"get": {}, "delete": {}},
        }});
        let m = ShadowedMethods::from_document(&doc);
        assert_eq!(m.refusal("DELETE", "/contacts/fields").map(|v| v.to_str().unwrap()), Some("GET, HEAD"));
        assert_eq!(m.refusal("GET", "/contacts/fields"), None);
        assert_eq!(m.refusal("HEAD", "/contacts/fields"), None);
        // Not shadowed: the router answers these itself.
        assert_eq!(m.refusal("DELETE", "/contacts/abc"), None);
        assert_eq!(m.refusal("PUT", "/contacts"), None);
        assert_eq!(m.refusal("GET", "/workflows/w1/executions/cancel-all").map(|v| v.to_str().unwrap()), Some("POST"));
        assert_eq!(m.refusal("POST", "/workflows/w1/executions/cancel-all"), None);
        assert_eq!(m.refusal("GET", "/workflows/w1/executions/e1"), None);
    }
}
