//! Headers of bulk and transactional mail, and unsubscribes attributed to the email (and campaign) whose
//! link made them.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::{Received, SmtpSink, header};

struct Env {
    s: Server,
    p: Proj,
    sink: SmtpSink,
}

async fn env() -> Env {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.send_rate_per_second = 0;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    Env { s, p, sink }
}

/// Every value of a header (unfolded), in order.
fn all(m: &Received, name: &str) -> Vec<String> {
    let head = m.data.split("\r\n\r\n").next().unwrap_or("").replace("\r\n ", " ").replace("\r\n\t", " ");
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

fn to(m: &Received) -> &str {
    m.to.first().map(String::as_str).unwrap_or("")
}

#[tokio::test]
async fn list_unsubscribe_follows_the_body_and_a_transactional_caller_may_set_its_own() {
    let e = env().await;
    let send = |to: &str, body: &str, headers: Value| {
        let c = e.p.secret.clone();
        let b = json!({"to": to, "from": "hi@shop.test", "subject": "s", "body": body, "headers": headers});
        async move { c.post("/v1/send", b).await }
    };
    let link = "<a href=\"{{unsubscribeUrl}}\">stop</a>";
    assert_eq!(send("a@example.org", link, json!({})).await.status, 200);
    assert_eq!(send("b@example.org", "<p>receipt</p>", json!({})).await.status, 200);
    assert_eq!(send("c@example.org", "<a href=\"{{manageUrl}}\">prefs</a>", json!({})).await.status, 200);
    let own = json!({"List-Unsubscribe": "<mailto:leave@shop.test>"});
    assert_eq!(send("d@example.org", link, own.clone()).await.status, 200);
    assert_eq!(send("a@example.org", link, json!({})).await.status, 200);
    let got = e.sink.wait_for(5).await;
    let of = |addr: &str| got.iter().filter(|m| to(m) == addr).collect::<Vec<_>>();

    // A transactional body offering the unsubscribe or manage link gets the one-click pair.
    for m in of("a@example.org").into_iter().chain(of("c@example.org")) {
        let lu = all(m, "List-Unsubscribe");
        assert!(lu.len() == 1 && lu[0].contains("/unsubscribe/"), "{lu:?}");
        assert_eq!(all(m, "List-Unsubscribe-Post"), vec!["List-Unsubscribe=One-Click"]);
        let dkim = header(&m.data, "DKIM-Signature").unwrap_or_default().to_lowercase();
        assert!(dkim.is_empty() || dkim.contains("list-unsubscribe"), "signed when signing: {dkim}");
    }
    // None without the link; the caller's own header is kept, and then the caller owns both.
    assert!(all(of("b@example.org")[0], "List-Unsubscribe").is_empty());
    let d = of("d@example.org")[0];
    assert_eq!(all(d, "List-Unsubscribe"), vec!["<mailto:leave@shop.test>"]);
    assert!(all(d, "List-Unsubscribe-Post").is_empty());
    // Transactional mail carries none of the bulk headers.
    for m in &got {
        assert!(header(&m.data, "Precedence").is_none() && header(&m.data, "Auto-Submitted").is_none());
    }
    // Two emails to one contact carry different links (each names its email).
    let a = of("a@example.org");
    assert_eq!(a.len(), 2);
    assert_ne!(all(a[0], "List-Unsubscribe"), all(a[1], "List-Unsubscribe"));

    // Marketing mail keeps Herald's own pair: a caller's is refused, naming the header.
    let t =
        e.p.secret
            .post(
                "/templates",
                json!({"name": "News", "subject": "News", "body": link, "from": "news@shop.test", "type": "MARKETING"}),
            )
            .await;
    assert_eq!(t.status, 201, "{}", t.json);
    let r =
        e.p.secret
            .post(
                "/v1/send",
                json!({"to": "m@example.org", "template": t.json["id"], "subscribed": true, "headers": own.clone()}),
            )
            .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert!(r.json.to_string().contains("headers.List-Unsubscribe"), "{}", r.json);
    e.s.stop().await;
}

#[tokio::test]
async fn campaign_mail_is_bulk_and_its_unsubscribes_and_complaints_count_in_its_stats() {
    let e = env().await;
    let c = &e.p.secret;
    for who in ["x@example.org", "y@example.org"] {
        assert_eq!(c.post("/contacts", json!({"email": who, "subscribed": true})).await.status, 201);
    }
    let body = json!({
        "name": "Launch", "subject": "Launch", "from": "news@shop.test", "audienceType": "ALL",
        "body": "<p>New!</p><a href=\"{{unsubscribeUrl}}\">stop</a>",
    });
    let id = c.post("/campaigns", body).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    let got = e.sink.wait_for(2).await;
    for m in &got {
        assert_eq!(header(&m.data, "Precedence").as_deref(), Some("bulk"));
        assert_eq!(header(&m.data, "Auto-Submitted").as_deref(), Some("auto-generated"));
        assert_eq!(header(&m.data, "X-Auto-Response-Suppress").as_deref(), Some("All"));
        assert_eq!(all(m, "List-Unsubscribe").len(), 1);
    }
    let stats = || async { c.get(&format!("/campaigns/{id}/stats")).await.json };
    for _ in 0..200 {
        if stats().await["sentCount"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let s = stats().await;
    assert_eq!(
        (s["unsubscribedCount"].clone(), s["unsubscribeRate"].clone(), s["complaintRate"].clone()),
        (json!(0), json!(0.0), json!(0.0)),
        "{s}"
    );

    // x unsubscribes through the campaign's one-click link, twice: counted once.
    let x = got.iter().find(|m| to(m) == "x@example.org").unwrap();
    let url = header(&x.data, "List-Unsubscribe").unwrap().trim_matches(['<', '>']).to_string();
    let path = url.trim_start_matches(&e.s.state.config.public_url).to_string();
    let http = reqwest::Client::new();
    for _ in 0..2 {
        let r = http.post(format!("{}{path}", e.s.base)).body("List-Unsubscribe=One-Click").send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // y complains (as a provider's notification would record it).
    e.s.state
        .store
        .query(
            "UPDATE email SET status = 'COMPLAINED' WHERE campaign = $c AND recipient = 'y@example.org'",
            json!({"c": id}),
        )
        .await
        .unwrap();
    let s = stats().await;
    assert_eq!(s["unsubscribedCount"], 1, "{s}");
    assert_eq!(s["unsubscribeRate"], 50.0, "{s}");
    assert_eq!(s["complaintRate"], 50.0, "{s}");
    e.s.stop().await;
}
