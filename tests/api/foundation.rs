//! Cross-cutting HTTP behaviour: health, config, metrics, the error envelope, request ids, body limits,
//! the OpenAPI document, restart persistence and migrations.

use serde_json::{Value, json};

use crate::harness::*;

#[tokio::test]
async fn health_reports_the_database_reachable() {
    let s = Server::start().await;
    let r = s.client().get("/health").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["status"], "ok");
    assert_eq!(r.json["database"], "reachable");
    s.stop().await;
}

#[tokio::test]
async fn unknown_routes_get_a_json_404_envelope_with_the_request_id() {
    let s = Server::start().await;
    let r = s.client().get("/no/such/route").await;
    assert_envelope(&r, 404, "NOT_FOUND");
    let r = s.client().delete("/health").await;
    assert_envelope(&r, 405, "METHOD_NOT_ALLOWED");
    s.stop().await;
}

/// A literal path that a `{id}` route shadows answers a wrong method with 405 and its own methods, not
/// with the parameter route's handler or methods (found by the schema fuzzer).
#[tokio::test]
async fn wrong_methods_on_shadowed_paths_are_405_with_the_paths_own_methods() {
    let s = Server::start().await;
    let p = proj(&s, "shadow@example.com").await;
    let c = &p.secret;
    for (method, path, allow) in [
        ("DELETE", "/contacts/fields", "GET, HEAD"),
        ("PATCH", "/contacts/fields", "GET, HEAD"),
        ("PUT", "/contacts/fields", "GET, HEAD"),
        ("GET", "/contacts/import", "POST"),
        ("DELETE", "/events/names", "GET, HEAD"),
        ("GET", "/uploads/image", "POST"),
        ("GET", "/workflows/w1/executions/cancel-all", "POST"),
    ] {
        let r = c.send(method, path, None).await;
        assert_envelope(&r, 405, "METHOD_NOT_ALLOWED");
        assert_eq!(r.header("allow").as_deref(), Some(allow), "{method} {path}");
    }
    // The parameter routes themselves are untouched.
    assert_eq!(c.get("/contacts/fields").await.status, 200);
    assert_eq!(c.delete("/contacts/no-such-contact").await.status, 404);
    s.stop().await;
}

/// A typed query parameter given empty (`?to=`) is not a value of its type: 400 naming it, as any other
/// value that is not one, while empty free-text parameters stay harmless (found by the schema fuzzer:
/// `?since=` and `?status=` answered as if absent).
#[tokio::test]
async fn empty_typed_query_parameters_are_refused_naming_the_parameter() {
    let s = Server::start().await;
    let p = proj(&s, "empty@example.com").await;
    let c = &p.secret;
    for (path, name) in [
        ("/activity/recent-count?since=", "since"),
        ("/activity?to=", "to"),
        ("/activity?limit=", "limit"),
        ("/activity/stats?days=", "days"),
        ("/analytics/timeseries?interval=", "interval"),
        ("/analytics/top-campaigns?metric=", "metric"),
        ("/analytics/top-events?from=", "from"),
        ("/campaigns?status=", "status"),
        ("/campaigns?page=", "page"),
        ("/contacts?limit=&cursor=&search=", "limit"),
        ("/contacts?subscribed=", "subscribed"),
        ("/events/stats?to=", "to"),
        ("/suppressions?reason=", "reason"),
        ("/templates?type=", "type"),
        ("/templates?pageSize=", "pageSize"),
        ("/workflows?enabled=", "enabled"),
    ] {
        let r = c.get(path).await;
        assert_envelope(&r, 400, "BAD_REQUEST");
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("{name} must not be empty")), "{path}: {message}");
    }
    // Free text may be empty: an empty search or cursor is the first page of everything.
    assert_eq!(c.get("/contacts?cursor=&search=").await.status, 200);
    assert_eq!(c.get("/templates?search=&sort=").await.status, 200);
    s.stop().await;
}

/// The document states the constraints the server enforces, so a request valid by the document is not
/// refused for them (found by the schema fuzzer: empty names, non-addresses, null emails, unknown enum
/// values and empty id lists were all valid by the document and refused by the server).
#[tokio::test]
async fn the_openapi_document_states_the_field_constraints_the_server_enforces() {
    let s = Server::start().await;
    let doc = s.client().get("/openapi.json").await.json;
    let schema = |name: &str| doc["components"]["schemas"][format!("herald_host.api.{name}")].clone();
    let prop = |name: &str, field: &str| schema(name)["properties"][field].clone();
    for (body, field) in [
        ("auth.SignupBody", "email"),
        ("auth.LoginBody", "email"),
        ("account_mail.ResetRequestBody", "email"),
        ("contacts.ContactBody", "email"),
        ("events.TrackBody", "email"),
        ("campaigns.CampaignBody", "from"),
        ("templates.TemplateBody", "replyTo"),
        ("send.SendBody", "reply"),
        ("suppressions.SuppressionBody", "email"),
        ("domains.VerifyBody", "email"),
    ] {
        assert_eq!(prop(body, field)["format"], "email", "{body}.{field}");
        assert_eq!(prop(body, field)["maxLength"], 254, "{body}.{field}");
    }
    for (body, field, min) in [
        ("auth.SignupBody", "password", 8),
        ("account_mail.ResetBody", "password", 8),
        ("auth.LoginBody", "password", 1),
        ("account_mail.VerifyBody", "token", 1),
        ("templates.PreviewBody", "body", 1),
        ("domains.DomainBody", "domain", 1),
        ("send.SendBody", "subject", 1),
        ("workflows.WorkflowBody", "name", 1),
        ("workflow_executions.StartBody", "contactId", 1),
    ] {
        assert_eq!(prop(body, field)["minLength"], min, "{body}.{field}");
    }
    // Names are one line and not blank: the pattern refuses "", " " and a line break, as the server does.
    let name = prop("segments.SegmentBody", "name");
    let pattern = name["pattern"].as_str().expect("a name pattern");
    assert!(pattern.contains(r"\u0000-\u001f") && pattern.contains(r"\u3000"), "{pattern}");
    assert_eq!(name["maxLength"], 100);
    // Enumerated values are stated, in bodies and in query parameters.
    assert_eq!(prop("campaigns.CampaignBody", "audienceType")["pattern"], "^(ALL|SEGMENT|FILTERED)$");
    assert_eq!(prop("campaigns.AudienceBody", "audienceType")["pattern"], "^(ALL|SEGMENT|FILTERED)$");
    assert_eq!(prop("suppressions.SuppressionBody", "reason")["pattern"], "^(manual|bounce|complaint)$");
    let feed = &doc["paths"]["/activity"]["get"]["parameters"];
    let types = feed.as_array().unwrap().iter().find(|p| p["name"] == "type").expect("type");
    let names = types["schema"]["items"]["enum"].as_array().expect("an enum of activity types");
    assert!(names.contains(&json!("email.sent")) && names.contains(&json!("workflow.failed")), "{names:?}");
    // An address a request must give is not nullable; the request-verification one is optional (a session
    // names the account) but never null.
    assert_eq!(schema("account_mail.ResetRequestBody")["required"], json!(["email"]));
    assert_eq!(prop("account_mail.EmailBody", "email")["type"], "string");
    let reset = &doc["paths"]["/auth/request-password-reset"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(reset["schema"]["$ref"], "#/components/schemas/herald_host.api.account_mail.ResetRequestBody");
    // Id lists: 1 to 1,000 ids of 1 to 64 characters.
    let ids = prop("contact_jobs.BulkBody", "contactIds");
    assert_eq!((ids["minItems"].clone(), ids["maxItems"].clone()), (json!(1), json!(1000)));
    assert_eq!((ids["items"]["minLength"].clone(), ids["items"]["maxLength"].clone()), (json!(1), json!(64)));
    // The three bare 400s are documented as such (the fuzzer found them violating the envelope schema).
    for (path, method) in [("/contacts", "post"), ("/templates", "post"), ("/segments", "post")] {
        let r = &doc["paths"][path][method]["responses"]["400"]["content"]["application/json"]["schema"]["$ref"];
        assert_eq!(r, "#/components/schemas/BareErrorOrEnvelope", "{method} {path}");
    }
    // A static segment's condition is null, and the answer's schema says so.
    let condition = &schema("segments.SegmentOut")["properties"]["condition"];
    assert_eq!(condition["type"], json!(["object", "null"]), "{condition}");
    // Updates take any of the create's fields: nothing is required, and a given name is never null.
    for (path, body) in
        [("/templates/{id}", "templates.TemplatePatchBody"), ("/segments/{id}", "segments.SegmentPatchBody")]
    {
        let r = &doc["paths"][path]["patch"]["requestBody"]["content"]["application/json"]["schema"]["$ref"];
        assert_eq!(r, &json!(format!("#/components/schemas/herald_host.api.{body}")), "PATCH {path}");
        assert!(schema(body)["required"].as_array().is_none_or(|r| r.is_empty()), "{body}");
        assert_eq!(prop(body, "name")["type"], "string", "{body}");
    }
    // GET /plugins takes a key or a session: the key comes first, as on every operation that takes both.
    assert_eq!(doc["paths"]["/plugins"]["get"]["security"], json!([{"bearer": []}, {"session": []}]));
    s.stop().await;
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_a_given_one_is_kept() {
    let s = Server::start().await;
    let c = s.client();
    let a = c.get("/health").await.header("x-request-id").unwrap();
    let b = c.get("/health").await.header("x-request-id").unwrap();
    assert_ne!(a, b);
    let res = c.http.get(format!("{}/nope", s.base)).header("X-Request-ID", "trace-123").send().await.unwrap();
    assert_eq!(res.headers()["x-request-id"], "trace-123");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["requestId"], "trace-123");
    s.stop().await;
}

#[tokio::test]
async fn malformed_json_is_400_and_a_non_object_body_too() {
    let s = Server::start().await;
    let c = s.client();
    let r = c.raw("POST", "/auth/signup", b"{\"email\": ".to_vec(), "application/json").await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    let r = c.raw("POST", "/auth/signup", b"[1,2]".to_vec(), "application/json").await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn bodies_over_50_mb_get_413() {
    let s = Server::start().await;
    let mut big = b"{\"email\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 51 * 1024 * 1024));
    big.extend(b"\"}");
    let r = s.client().raw("POST", "/auth/signup", big, "application/json").await;
    assert_envelope(&r, 413, "PAYLOAD_TOO_LARGE");
    s.stop().await;
}

#[tokio::test]
async fn config_needs_no_auth_and_names_the_version_and_features() {
    let s = Server::start().await;
    let r = s.client().get("/config").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r.json["features"]["signups"], true);
    assert_eq!(r.json["features"]["emailVerification"], false);
    assert_eq!(r.json["features"]["rateLimit"], true);
    s.stop().await;
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_jobs_by_state() {
    let s = Server::start().await;
    let c = s.client();
    c.get("/health").await;
    c.get("/health").await;
    let res = c.http.get(format!("{}/metrics", s.base)).send().await.unwrap();
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = res.text().await.unwrap();
    assert!(text.contains("herald_http_requests_total{method=\"GET\",route=\"/health\",status=\"200\"}"), "{text}");
    assert!(text.contains("herald_http_request_duration_seconds_bucket{route=\"/health\",le=\"+Inf\"}"));
    let gauge = |state: &str| -> i64 {
        let prefix = format!("herald_jobs{{state=\"{state}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|n| n.parse().ok()).unwrap_or(-1)
    };
    assert!(gauge("completed") >= 0 && gauge("dead") >= 0, "{text}");
    assert!(gauge("queued") + gauge("running") >= 2, "the recurring jobs are in the queue: {text}");
    // Job runs are counted by kind and outcome (the event dispatch is due at start-up).
    let mut runs = String::new();
    for _ in 0..100 {
        let _ = s.worker.run_once(10).await;
        runs = c.http.get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
        if runs.contains("herald_job_runs_total{kind=\"events.dispatch\",outcome=\"completed\"}") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(runs.contains("herald_job_runs_total{kind=\"events.dispatch\",outcome=\"completed\"}"), "{runs}");
    // And the time they took, by kind.
    assert!(runs.contains("herald_job_seconds_total{kind=\"events.dispatch\"} "), "{runs}");
    s.stop().await;
}

#[tokio::test]
async fn openapi_document_is_3_1_and_lists_every_route() {
    let s = Server::start().await;
    let r = s.client().get("/openapi.json").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["openapi"], "3.1.0");
    let paths = r.json["paths"].as_object().expect("paths");
    let expect = [
        ("/health", "get"),
        ("/config", "get"),
        ("/metrics", "get"),
        ("/auth/signup", "post"),
        ("/auth/login", "post"),
        ("/auth/logout", "get"),
        ("/auth/logout", "post"),
        ("/auth/request-verification", "post"),
        ("/auth/verify-email", "post"),
        ("/auth/request-password-reset", "post"),
        ("/auth/reset-password", "post"),
        ("/auth/accept-invitation", "post"),
        ("/auth/oauth-config", "get"),
        ("/auth/oauth/{provider}", "get"),
        ("/auth/oauth/{provider}/callback", "get"),
        ("/users/@me", "get"),
        ("/users/@me/projects", "get"),
        ("/users/@me/projects", "post"),
        ("/users/@me/projects/{id}", "patch"),
        ("/users/@me/projects/{id}", "delete"),
        ("/users/@me/projects/{id}/regenerate-keys", "post"),
        ("/projects/{id}/members", "get"),
        ("/projects/{id}/members", "post"),
        ("/projects/{id}/members/{user_id}", "patch"),
        ("/projects/{id}/members/{user_id}", "delete"),
        ("/projects/{id}/invitations", "get"),
        ("/users/@me/projects/{id}/billing-limits", "get"),
        ("/users/@me/projects/{id}/billing-limits", "put"),
        ("/users/@me/projects/{id}/billing-consumption", "get"),
        ("/users/@me/projects/{id}/checkout", "post"),
        ("/users/@me/projects/{id}/billing-portal", "post"),
        ("/users/@me/projects/{id}/billing-invoices", "get"),
        ("/webhooks/incoming/payments", "post"),
        ("/users/@me/projects/{id}/unsuspend", "post"),
        ("/projects/{id}/invitations/{email}", "delete"),
        ("/contacts", "get"),
        ("/contacts", "post"),
        ("/contacts/{id}", "get"),
        ("/contacts/{id}", "patch"),
        ("/contacts/{id}", "delete"),
        ("/contacts/lookup", "post"),
        ("/contacts/fields", "get"),
        ("/contacts/fields/{field}/values", "get"),
        ("/contacts/fields/{field}/usage", "get"),
        ("/contacts/fields/{field}", "delete"),
        ("/contacts/bulk-subscribe", "post"),
        ("/contacts/bulk-unsubscribe", "post"),
        ("/contacts/bulk-delete", "post"),
        ("/contacts/bulk/{job_id}", "get"),
        ("/contacts/import", "post"),
        ("/contacts/import/{job_id}", "get"),
        ("/uploads/image", "post"),
        ("/uploads/{name}", "get"),
        ("/projects/{id}/setup-state", "get"),
        ("/projects/{id}/security", "get"),
        ("/users/@me/projects/{id}/security", "get"),
        ("/users/@me/projects/{id}/reset", "post"),
        ("/activity", "get"),
        ("/activity/stats", "get"),
        ("/activity/recent-count", "get"),
        ("/activity/types", "get"),
        ("/activity/upcoming", "get"),
        ("/campaigns/{id}/resend-failed", "post"),
        ("/delivery/status", "get"),
        ("/analytics/timeseries", "get"),
        ("/analytics/top-campaigns", "get"),
        ("/analytics/campaign-stats", "get"),
        ("/analytics/top-events", "get"),
        ("/v1/track", "post"),
        ("/events/track", "post"),
        ("/events", "get"),
        ("/events/stats", "get"),
        ("/events/names", "get"),
        ("/events/contact/{contact_id}", "get"),
        ("/events/{event_name}/usage", "get"),
        ("/events/{event_name}", "delete"),
        ("/domains", "post"),
        ("/domains/project/{project_id}", "get"),
        ("/domains/{id}/verify", "get"),
        ("/domains/{id}", "delete"),
        ("/domains/{id}", "patch"),
        ("/v1/verify", "post"),
        ("/templates", "get"),
        ("/templates", "post"),
        ("/templates/{id}", "get"),
        ("/templates/{id}", "patch"),
        ("/templates/{id}", "delete"),
        ("/templates/{id}/duplicate", "post"),
        ("/templates/{id}/usage", "get"),
        ("/v1/send", "post"),
        ("/webhooks/notifications", "post"),
    ];
    for (path, method) in expect {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from {:?}",
            paths.keys()
        );
    }
    // Request and response schemas are present.
    assert!(paths["/auth/signup"]["post"]["requestBody"].is_object());
    assert!(paths["/users/@me/projects"]["post"]["responses"]["201"].is_object());
    let docs = s.client().http.get(format!("{}/docs/", s.base)).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.unwrap().to_lowercase().contains("swagger"));
    s.stop().await;
}

#[tokio::test]
async fn a_project_and_its_keys_survive_a_restart_on_the_embedded_database() {
    let dir = herald_host::config::Config::test_scratch().join(format!("restart-{}", uuid::Uuid::new_v4()));
    let mut config = herald_host::config::Config::for_tests();
    config.db = format!("surrealkv://{}", dir.display());
    let s = Server::start_with(config.clone(), None).await;
    let (owner, project) = project(&s, "owner@example.com", "Persisted").await;
    let secret = project["secret"].as_str().unwrap().to_string();
    let id = project["id"].as_str().unwrap().to_string();
    drop(owner);
    s.stop().await;
    // The embedded datastore closes when its last handle is gone; give it a moment.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let s = Server::start_with(config, None).await;
    let c = s.client();
    let r = c.post("/auth/login", json!({ "email": "owner@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = c.get("/users/@me/projects").await;
    assert_eq!(r.json[0]["id"], id.as_str());
    let r = s.with_key(&secret).get("/contacts").await;
    assert_eq!(r.status, 200, "the secret key still works after the restart: {}", r.json);
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_changed_migration_stops_start_up_naming_the_file() {
    let config = herald_host::config::Config::for_tests();
    let store = herald_host::store::Store::connect_only(&config).await.unwrap();
    let list = [("0001_a.surql", "DEFINE TABLE a SCHEMALESS;")];
    assert_eq!(herald_host::store::migrate::apply_list(&store, &list).await.unwrap(), vec!["0001_a.surql"]);
    assert!(herald_host::store::migrate::apply_list(&store, &list).await.unwrap().is_empty(), "applied once");
    let changed = [("0001_a.surql", "DEFINE TABLE a SCHEMAFULL;")];
    let err = herald_host::store::migrate::apply_list(&store, &changed).await.unwrap_err().to_string();
    assert!(err.contains("0001_a.surql") && err.contains("changed"), "{err}");
}

/// A fresh store with every migration before `name` applied, and `name`'s position in the list.
async fn migrated_before(name: &str) -> (herald_host::store::Store, usize) {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let config = herald_host::config::Config::for_tests();
    let store = herald_host::store::Store::connect_only(&config).await.unwrap();
    let at = MIGRATIONS.iter().position(|(n, _)| *n == name).unwrap();
    apply_list(&store, &MIGRATIONS[..at]).await.unwrap();
    (store, at)
}

#[tokio::test]
async fn emails_written_before_bodies_moved_out_keep_their_message() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let (store, at) = migrated_before("0012_email_bodies.surql").await;
    // An email record as 0005 wrote it: the message inside the record.
    store
        .query(
            "CREATE email:old CONTENT { project: 'p1', contact: 'c1', recipient: 'a@example.com', from: 'n@x.test',
                subject: 's', html: '<p>hi</p>', text: 'hi', headers: '[]', attachments: '[]', kind: 'TRANSACTIONAL',
                message_id: '<old@x.test>', status: 'SENT', created_at: 1, updated_at: 1 }",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0012_email_bodies.surql"]);
    let rows = store.emails_by_ids(&["old".to_string()]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].html.as_str(), rows[0].text.as_str(), rows[0].status.as_str()), ("<p>hi</p>", "hi", "SENT"));
    let one = store.email("p1", "old").await.unwrap().unwrap();
    assert_eq!(one.html, "<p>hi</p>");
    assert!(store.email("p2", "old").await.unwrap().is_none(), "another project's email stays hidden");
    // The record itself no longer carries the message.
    let left = store.query("SELECT VALUE html FROM ONLY email:old", json!({})).await.unwrap().value(0).unwrap();
    assert!(left.is_null(), "{left}");
}

/// Migration 0013 drops the two indexes that held an entry for every email: a Message-ID lookup reads
/// the id inside the Message-ID, and provider message ids of emails sent before it move to
/// `provider_message`.
#[tokio::test]
async fn emails_are_found_by_message_id_and_provider_id_without_their_indexes() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let (store, at) = migrated_before("0013_email_lookups.surql").await;
    for (id, pid) in [("e1", "NONE"), ("e2", "'prov-9'")] {
        store
            .query(
                &format!(
                    "CREATE type::record('email', $id) CONTENT {{ project: 'p1', contact: 'c-' + $id,
                        recipient: 'a@example.com', from: 'n@x.test', subject: 's', kind: 'TRANSACTIONAL',
                        message_id: '<' + $id + '@x.test>', status: 'SENT', provider_message_id: {pid},
                        created_at: 1, updated_at: 1 }}"
                ),
                json!({ "id": id }),
            )
            .await
            .unwrap();
    }
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0013_email_lookups.surql"]);
    let key = |id: &str| {
        Some(herald_host::store::emails::EmailKey {
            project: "p1".into(),
            id: id.into(),
            contact: format!("c-{id}"),
            campaign: None,
            depth: None,
        })
    };
    assert_eq!(store.email_by_provider_message_id("prov-9").await.unwrap(), key("e2"));
    assert_eq!(store.email_by_provider_message_id("prov-1").await.unwrap(), None);
    assert_eq!(store.email_by_message_id("<e1@x.test>").await.unwrap(), key("e1"));
    // The id alone is not enough: the whole Message-ID must be the one the email was sent with.
    assert_eq!(store.email_by_message_id("<e1@other.test>").await.unwrap(), None);
    assert_eq!(store.email_by_message_id("<nope@x.test>").await.unwrap(), None);
    assert_eq!(store.email_by_message_id("<no-at-sign>").await.unwrap(), None);
    let indexes = store.query("INFO FOR TABLE email", json!({})).await.unwrap().value(0).unwrap();
    let names: Vec<&String> = indexes["indexes"].as_object().unwrap().keys().collect();
    assert!(
        !names.iter().any(|n| n.as_str() == "email_message_id" || n.as_str() == "email_provider_message_id"),
        "{names:?}"
    );
}

#[tokio::test]
async fn tracked_memberships_stored_before_segment_track_are_kept() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    use herald_host::store::segments::{Diff, MembershipEvents};
    let (store, at) = migrated_before("0014_segment_track.surql").await;
    // Two segments as 0009 stored them: a tracked dynamic one and a static one, two members each.
    store
        .query(
            "FOR $s IN [['d1', 'DYNAMIC', true], ['s1', 'STATIC', false]] {
                CREATE type::record('segment', $s[0]) CONTENT { project: 'p', name: $s[0], kind: $s[1],
                    track: $s[2], member_count: 2, ref_fields: [], ref_events: [], ref_segments: [],
                    created_at: 1, updated_at: 1 };
                FOR $c IN ['a', 'b'] {
                    CREATE type::record('segment_member', [$s[0], $c]) CONTENT { project: 'p', segment: $s[0],
                        contact: $c, created_at: 1 };
                };
             };",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0014_segment_track.surql"]);
    assert_eq!(store.count_members("p", "s1").await.unwrap(), 2, "static members stay");
    assert_eq!(store.count_members("p", "d1").await.unwrap(), 0, "tracked memberships moved");
    let ev = MembershipEvents { entry: "e".into(), exit: "x".into(), data: json!({}) };
    let same = ["a".to_string(), "b".to_string()];
    let d = store.apply_membership("p", "d1", &same, &ev, 2).await.unwrap();
    assert_eq!(d, Diff { entered: 0, exited: 0, count: 2 }, "the moved rows are the stored membership");
    let d = store.apply_membership("p", "d1", &same[..1], &ev, 2).await.unwrap();
    assert_eq!(d, Diff { entered: 0, exited: 1, count: 1 });
}

#[tokio::test]
async fn events_waiting_for_dispatch_before_the_outbox_table_stay_waiting_in_order() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let (store, at) = migrated_before("0015_outbox.surql").await;
    // Events as 0002 stored them: two waiting (written out of order), one already dispatched.
    store
        .query(
            "FOR $e IN [['e2', 20, false], ['e1', 10, false], ['e0', 5, true]] {
                CREATE type::record('event', $e[0]) CONTENT { project: 'p', contact: 'c', name: $e[0], data: {},
                    source: 'api', created_at: $e[1], dispatched: $e[2] };
             };",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0015_outbox.surql"]);
    let waiting = store.undispatched_events(10).await.unwrap();
    assert_eq!(waiting.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["e1", "e2"]);
    let rows = store.outbox(10).await.unwrap();
    assert_eq!(rows.len(), 1);
    store.outbox_progress(&rows[0].id, &rows[0].ids[1..], &Default::default()).await.unwrap();
    let waiting = store.undispatched_events(10).await.unwrap();
    assert_eq!(waiting.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["e2"]);
    store.outbox_progress(&rows[0].id, &[], &Default::default()).await.unwrap();
    assert!(store.undispatched_events(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn verified_domains_stored_before_domain_claims_hold_their_names() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let (store, at) = migrated_before("0019_domain_claims.surql").await;
    store
        .query(
            "FOR $d IN [['d1', 'p1', 'verified.example', 'VERIFIED'], ['d2', 'p2', 'pending.example', 'PENDING']] {
                CREATE type::record('domain', $d[0]) CONTENT { project: $d[1], name: $d[2], selector: 'herald',
                    dkim_public: '', dkim_private: '', status: $d[3], trusted: false, records: '[]',
                    created_at: 1, updated_at: 1 };
             };",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0019_domain_claims.surql"]);
    assert_eq!(store.domain_claimed_by("verified.example").await.unwrap().as_deref(), Some("p1"));
    assert_eq!(store.domain_claimed_by("pending.example").await.unwrap(), None);
    assert_eq!(store.verified_domain("verified.example").await.unwrap().map(|d| d.id), Some("d1".to_string()));
}

/// Migration 0032 moves the step runs of executions written before it into their executions' rows, in
/// the order the steps started, and an execution without runs gets an empty list.
#[tokio::test]
async fn step_runs_written_before_0032_move_into_their_executions() {
    use herald_host::store::migrate::{MIGRATIONS, apply_list};
    let (store, at) = migrated_before("0032_step_runs_in_execution.surql").await;
    store
        .query(
            "CREATE workflow_execution:x1 CONTENT { project: 'p1', workflow: 'w1', contact: 'c1', status: 'WAITING',
                context: {}, step: 's2', run: 'r2', created_at: 1, updated_at: 2 };
             CREATE workflow_execution:x2 CONTENT { project: 'p1', workflow: 'w1', contact: 'c2', status: 'RUNNING',
                context: {}, created_at: 1, updated_at: 1 };
             CREATE workflow_step_run:r2 CONTENT { project: 'p1', execution: 'x1', step: 's2', step_type: 'DELAY',
                status: 'WAITING', output: '{\"until\":5}', started_at: 2 };
             CREATE workflow_step_run:r1 CONTENT { project: 'p1', execution: 'x1', step: 's1', step_type: 'TRIGGER',
                status: 'COMPLETED', started_at: 1, completed_at: 1 };",
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(apply_list(&store, &MIGRATIONS[..=at]).await.unwrap(), vec!["0032_step_runs_in_execution.surql"]);
    let x1 = store.execution("p1", "x1").await.unwrap().unwrap();
    let runs: Vec<(&str, &str, &str)> =
        x1.runs.iter().map(|r| (r.id.as_str(), r.step_type.as_str(), r.status.as_str())).collect();
    assert_eq!(runs, vec![("r1", "TRIGGER", "COMPLETED"), ("r2", "DELAY", "WAITING")]);
    assert_eq!(x1.runs[1].output.as_deref(), Some("{\"until\":5}"));
    assert!(store.execution("p1", "x2").await.unwrap().unwrap().runs.is_empty());
    assert!(store.execution("p2", "x1").await.unwrap().is_none(), "another project's execution stays hidden");
}
