//! The OpenAPI document as served at `/openapi.json`: generated from the handlers, then finished with
//! what the generator cannot see. Herald reads an empty request body as `{}` (see `api::body`), so a body
//! whose schema requires no field may be left out, and the document says so (`required: false`);
//! bodies with a required field stay required. The `Idempotency-Key` header gets the schema of what
//! `api::idempotency` accepts (1 to 255 printable ASCII characters), which the handler macros cannot
//! state.

use salvo::oapi::OpenApi;
use salvo::prelude::*;
use serde_json::Value;

/// The generated document with its request bodies marked optional where an empty body is accepted.
pub fn finish(doc: &OpenApi) -> Value {
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    optional_bodies(&mut doc);
    idempotency_keys(&mut doc);
    doc
}

/// States the rule of the `Idempotency-Key` header wherever an operation takes it.
fn idempotency_keys(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for params in item.values_mut().filter_map(|op| op.get_mut("parameters")).filter_map(Value::as_array_mut) {
            for p in params.iter_mut().filter(|p| p["in"] == "header" && p["name"] == "Idempotency-Key") {
                p["schema"] =
                    serde_json::json!({ "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$" });
            }
        }
    }
}

/// Marks `requestBody.required` false where the JSON body's schema is an object that requires nothing.
fn optional_bodies(doc: &mut Value) {
    let schemas = doc.pointer("/components/schemas").cloned().unwrap_or_default();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for body in item.values_mut().filter_map(|op| op.get_mut("requestBody")) {
            let Some(schema) = body.pointer("/content/application~1json/schema") else { continue };
            let schema = match schema.get("$ref").and_then(Value::as_str) {
                Some(r) => r.strip_prefix("#/components/schemas/").and_then(|name| schemas.get(name)),
                None => Some(schema),
            };
            let requires_nothing = schema.is_some_and(|s| {
                s.get("type").and_then(Value::as_str) == Some("object")
                    && s.get("required").and_then(Value::as_array).is_none_or(Vec::is_empty)
            });
            if requires_nothing {
                body["required"] = Value::Bool(false);
            }
        }
    }
}

/// Serves a finished document.
pub struct Served(salvo::hyper::body::Bytes);

impl Served {
    pub fn new(doc: &Value) -> Served {
        Served(doc.to_string().into())
    }
}

#[async_trait]
impl Handler for Served {
    async fn handle(&self, _req: &mut Request, _depot: &mut Depot, res: &mut Response, _ctrl: &mut FlowCtrl) {
        // The bytes are shared, not copied, for each request.
        let _ = res.add_header(salvo::http::header::CONTENT_TYPE, "application/json; charset=utf-8", true);
        res.body(self.0.clone());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn optional_bodies_and_the_idempotency_key_rule() {
        let mut doc = json!({
            "paths": {
                "/a/{id}": {
                    "patch": { "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Patch" } } } } },
                    "put": { "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Create" } } } } },
                    "post": { "requestBody": { "required": true, "content": { "multipart/form-data": { "schema": { "type": "object" } } } },
                              "parameters": [{ "in": "header", "name": "Idempotency-Key", "schema": { "type": "string" } }] }
                }
            },
            "components": { "schemas": {
                "Patch": { "type": "object", "properties": { "name": { "type": "string" } } },
                "Create": { "type": "object", "required": ["name"], "properties": { "name": { "type": "string" } } }
            } }
        });
        super::optional_bodies(&mut doc);
        super::idempotency_keys(&mut doc);
        assert_eq!(doc.pointer("/paths/~1a~1{id}/patch/requestBody/required"), Some(&json!(false)));
        assert_eq!(doc.pointer("/paths/~1a~1{id}/put/requestBody/required"), Some(&json!(true)));
        assert_eq!(doc.pointer("/paths/~1a~1{id}/post/requestBody/required"), Some(&json!(true)));
        assert_eq!(doc.pointer("/paths/~1a~1{id}/post/parameters/0/schema/maxLength"), Some(&json!(255)));
    }
}
