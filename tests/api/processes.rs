//! What each process keeps in memory, checked with two Herald processes on one database (each its own
//! caches, throttles and worker; docs/behaviour.md#running-several-processes): the counters that hold
//! back password guessing and account mail count together, migrations started at once apply once, and
//! the API rate limit is per process, as documented.

use std::sync::Arc;

use herald_host::config::Config;
use serde_json::json;

use crate::harness::*;

/// A second process on `s`'s database, with `config`.
async fn sibling(s: &Server, config: Config) -> Server {
    let app = herald_host::App::from_store(
        config,
        s.state.store.sibling(),
        Arc::new(herald_host::infra::clock::SystemClock),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    Server::serve(app, None).await
}

#[tokio::test]
async fn failed_logins_through_two_processes_count_together() {
    let a = Server::start().await;
    let b = sibling(&a, Config::for_tests()).await;
    signup(&a, "guess@example.com").await;
    let wrong = json!({ "email": "guess@example.com", "password": "not the password" });
    // Ten failures, half through each process: the limit of the account (and of the address) is spent.
    for i in 0..10 {
        let s = if i % 2 == 0 { &a } else { &b };
        let r = s.client().post("/auth/login", wrong.clone()).await;
        assert_envelope(&r, 401, "UNAUTHORIZED");
    }
    let right = json!({ "email": "guess@example.com", "password": "password123" });
    for s in [&a, &b] {
        let r = s.client().post("/auth/login", right.clone()).await;
        assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
        assert!(r.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() > 0), "{:?}", r.headers);
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn account_mail_asked_for_through_two_processes_counts_together() {
    let a = Server::start().await;
    let b = sibling(&a, Config::for_tests()).await;
    signup(&a, "carol@example.com").await;
    let body = json!({ "email": "carol@example.com" });
    // Five requests of one client about one address an hour, whichever process answers them.
    for i in 0..5 {
        let s = if i % 2 == 0 { &a } else { &b };
        assert_eq!(s.client().post("/auth/request-password-reset", body.clone()).await.status, 200, "request {i}");
    }
    for s in [&a, &b] {
        let r = s.client().post("/auth/request-password-reset", body.clone()).await;
        assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn processes_migrating_one_new_database_at_once_apply_each_migration_once() {
    let mut config = Config::for_tests();
    config.db = "mem://".into();
    let first = herald_host::store::Store::connect_only(&config).await.unwrap();
    let handles: Vec<_> = (0..4).map(|_| first.sibling()).collect();
    let runs = futures_util::future::join_all(handles.iter().map(herald_host::store::migrate::apply)).await;
    let mut applied = Vec::new();
    for r in runs {
        applied.extend(r.expect("every process starts"));
    }
    let all = herald_host::store::migrate::MIGRATIONS.len();
    assert_eq!(applied.len(), all, "each migration applied by exactly one of them: {applied:?}");
    let recorded: Vec<String> =
        first.query("SELECT VALUE name FROM migration", json!({})).await.unwrap().all(0).unwrap();
    assert_eq!(recorded.len(), all);
    // A process starting later finds them all applied.
    assert!(herald_host::store::migrate::apply(&first.sibling()).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_api_rate_limit_is_per_process() {
    let mut config = Config::for_tests();
    config.rate_limit_per_minute = 3;
    let a = Server::start_with(config.clone(), None).await;
    let b = sibling(&a, config).await;
    let p = proj(&a, "o@example.com").await;
    let key = p.json["secret"].as_str().unwrap();
    for s in [&a, &b] {
        let c = s.with_key(key);
        for _ in 0..3 {
            assert_eq!(c.get("/contacts").await.status, 200);
        }
        assert_envelope(&c.get("/contacts").await, 429, "RATE_LIMIT_EXCEEDED");
    }
    a.stop().await;
    b.stop().await;
}
