//! The rejected requests on the status page (issue 27, "Shown on the status page with the
//! reason"), against the real server: forged requests (a bad signature with `<script>` in the
//! body and markup in a header, a body that is not UTF-8, one too large) are listed at
//! `/rejected` with their reason, counted on the overview's card, shown one by one at
//! `/rejected/ID` escaped, hex for the binary one, with `verify --rejected ID` and no replay
//! form; the same as JSON at `/api/rejected`; 404 for an id not kept; the login asked for as
//! on every other page; and in Portuguese for a Brazilian browser.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "correct-horse-battery-staple";

fn forged(extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut headers = vec![
        h("content-type", "application/json"),
        h("x-hub-signature", format!("sha256={}", "0".repeat(64))),
        h("authorization", "Bearer gateway-secret-value"),
    ];
    headers.extend_from_slice(extra);
    headers
}

/// The ids of the kept rejected requests, newest first.
fn kept(server: &TestServer) -> Vec<i64> {
    let db = server.db();
    let mut ids = db
        .prepare("SELECT id FROM rejected ORDER BY id DESC")
        .unwrap();
    ids.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn forged_requests_are_listed_with_their_reason_shown_escaped_and_never_replayable() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.unwrap();
    let script = br#"{"id":"evt_x","note":"<script>alert(1)</script>"}"#;
    let evil = h("x-evil", "\"><img src=x onerror=alert(2)>");
    let reply = post(server.addr, "/webhooks/pagarme", &forged(&[evil]), script).await;
    assert_eq!(reply.status, 401);
    let binary = b"\xff\xfe<b>\x00binary";
    let reply = post(server.addr, "/webhooks/pagarme", &forged(&[]), binary).await;
    assert_eq!(reply.status, 401);
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &forged(&[]),
        &[b'x'; 5000],
    )
    .await;
    assert_eq!(reply.status, 413);
    eventually(WAIT, "the three kept", || kept(&server).len() == 3).await;
    let ids = kept(&server);
    let (large, binary_id, script_id) = (ids[0], ids[1], ids[2]);

    // The overview: the card counts what pagarme keeps and links to its list; the nav too.
    let overview = get(admin, "/", &[]).await;
    assert_eq!(overview.status, 200);
    assert!(
        overview.body.contains("Rejected, kept"),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains("<a href=\"/rejected?endpoint=pagarme\">3</a>"),
        "{}",
        overview.body
    );
    assert!(overview.body.contains("<a href=\"/rejected\">Rejected</a>"));

    // The list: newest first, each with its reason, detail and size; the large one truncated.
    let list = get(admin, "/rejected?endpoint=pagarme", &[]).await;
    assert_eq!(list.status, 200, "{}", list.body);
    for id in &ids {
        assert!(
            list.body
                .contains(&format!("<a href=\"/rejected/{id}\">{id}</a>")),
            "{}",
            list.body
        );
    }
    let at = |id: i64| list.body.find(&format!("/rejected/{id}\"")).unwrap();
    assert!(at(large) < at(binary_id) && at(binary_id) < at(script_id));
    assert!(list.body.contains("bad signature") && list.body.contains("too large"));
    assert!(list.body.contains("truncated"), "{}", list.body);
    assert!(list.body.contains(&format!("{} B", script.len())));
    assert!(!list.body.contains("<script>") && !list.body.contains("<img"));
    // Bounded: a page of one, and a link to the next.
    let one = get(admin, "/rejected?limit=1", &[]).await;
    assert!(one.body.contains(&format!("/rejected/{large}\"")));
    assert!(!one.body.contains(&format!("/rejected/{binary_id}\"")));
    assert!(
        one.body.contains(&format!("/rejected?before={large}")),
        "{}",
        one.body
    );
    let other = get(admin, "/rejected?endpoint=github", &[]).await;
    assert!(other.body.contains("No rejected requests kept."));

    // One: its reason and the command that explains it; the body and headers as text; the
    // credential redacted; nothing to press.
    let page = get(admin, &format!("/rejected/{script_id}"), &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("bad signature"));
    assert!(
        page.body.contains(&format!(
            "<code>portaria verify --rejected {script_id}</code>"
        )),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<script>"), "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<img"), "{}", page.body);
    assert!(
        page.body
            .contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;")
    );
    assert!(page.body.contains("[redacted]") && !page.body.contains("gateway-secret-value"));
    assert!(
        !page.body.contains("method=\"post\"") && !page.body.contains("<button"),
        "no form, no replay: {}",
        page.body
    );
    // A POST to it is not a replay: nothing answers one.
    let pressed = form(admin, &format!("/rejected/{script_id}/replay"), &[], "").await;
    assert_eq!(pressed.status, 405);
    let pressed = form(admin, &format!("/rejected/{script_id}"), &[], "").await;
    assert_eq!(pressed.status, 405);
    assert_eq!(server.events_of("pagarme"), 0);

    // A body that is not UTF-8: hex, escaped; an empty one, said so.
    let page = get(admin, &format!("/rejected/{binary_id}"), &[]).await;
    assert!(page.body.contains("Not UTF-8 text: shown as hex."));
    assert!(page.body.contains(" ff fe 3c 62 3e 00 "), "{}", page.body);
    assert!(page.body.contains("..&lt;b&gt;.binary"), "{}", page.body);
    let page = get(admin, &format!("/rejected/{large}"), &[]).await;
    assert!(page.body.contains("too large") && page.body.contains("No body was kept."));

    // What is not kept.
    for path in ["/rejected/999999", "/rejected/abc"] {
        let missing = get(admin, path, &[]).await;
        assert_eq!(missing.status, 404, "{path}");
    }
    assert!(
        get(admin, "/rejected/999999", &[])
            .await
            .body
            .contains("No such rejected request")
    );

    // The JSON: the list with its cursor, one whole.
    let all = json(&get(admin, "/api/rejected", &[]).await);
    let listed = all["rejected"].as_array().unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0]["id"], large);
    assert_eq!(listed[0]["reason"], "too_large");
    assert_eq!(listed[0]["truncated"], true);
    assert_eq!(listed[2]["reason"], "bad_signature");
    assert_eq!(listed[2]["endpoint"], "pagarme");
    assert_eq!(listed[2]["body_bytes"], script.len());
    assert!(listed[2]["detail"].as_str().unwrap().len() > 3);
    assert!(all["next_before"].is_null());
    let first = json(&get(admin, "/api/rejected?endpoint=pagarme&limit=2", &[]).await);
    assert_eq!(first["rejected"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_before"], binary_id);
    let rest = get(
        admin,
        &format!("/api/rejected?limit=2&before={binary_id}"),
        &[],
    )
    .await;
    assert_eq!(json(&rest)["rejected"][0]["id"], script_id);
    let whole = json(&get(admin, &format!("/api/rejected/{script_id}"), &[]).await);
    assert_eq!(whole["body_text"].as_str().unwrap().as_bytes(), script);
    assert_eq!(
        whole["explain"],
        format!("portaria verify --rejected {script_id}")
    );
    let headers = whole["headers"].as_array().unwrap();
    assert!(headers.contains(&serde_json::json!(["authorization", "[redacted]"])));
    let binary_json = json(&get(admin, &format!("/api/rejected/{binary_id}"), &[]).await);
    assert!(binary_json["body_text"].is_null());
    assert_eq!(binary_json["body_base64"], "//48Yj4AYmluYXJ5");
    for path in ["/api/rejected/999999", "/api/rejected/abc"] {
        let missing = get(admin, path, &[]).await;
        assert_eq!(missing.status, 404, "{path}");
        assert!(json(&missing)["error"].is_string());
    }
    let stats = json(&get(admin, "/api/stats", &[]).await);
    let pagarme = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == "pagarme")
        .unwrap()
        .clone();
    assert_eq!(pagarme["rejected_kept"], 3);

    // In Portuguese for a Brazilian browser; what the request carries stays as it is.
    let pt = [h("accept-language", "pt-BR,pt;q=0.9")];
    let list = get(admin, "/rejected", &pt).await;
    assert!(
        list.body.contains("<h1>Requisições recusadas</h1>"),
        "{}",
        list.body
    );
    assert!(list.body.contains("assinatura inválida") && list.body.contains("cortado"));
    let page = get(admin, &format!("/rejected/{script_id}"), &pt).await;
    assert!(page.body.contains("Requisição recusada"), "{}", page.body);
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    server.stop().await;
}

#[tokio::test]
async fn with_a_token_the_rejected_requests_need_the_login_like_every_page() {
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let extra = format!("\n[status]\ntoken_file = \"{}\"", token.display());
    let server = TestServer::start(&extra, "").await;
    let admin = server.admin.unwrap();
    let reply = post(server.addr, "/webhooks/pagarme", &forged(&[]), b"{}").await;
    assert_eq!(reply.status, 401);
    eventually(WAIT, "kept", || kept(&server).len() == 1).await;
    let id = kept(&server)[0];

    for path in ["/rejected".to_string(), format!("/rejected/{id}")] {
        let page = get(admin, &path, &[]).await;
        assert_eq!(
            (page.status, page.headers["location"].to_str().unwrap()),
            (303, "/login"),
            "{path}"
        );
        assert!(!page.body.contains("bad signature"));
    }
    for path in ["/api/rejected".to_string(), format!("/api/rejected/{id}")] {
        let api = get(admin, &path, &[]).await;
        assert_eq!(api.status, 401, "{path}");
        assert!(!api.body.contains("bad_signature"), "{}", api.body);
        let wrong = get(admin, &path, &[h("authorization", "Bearer nope-nope-nope")]).await;
        assert_eq!(wrong.status, 401, "{path}");
    }
    let bearer = h("authorization", format!("Bearer {TOKEN}"));
    let api = get(admin, &format!("/api/rejected/{id}"), &[bearer]).await;
    assert_eq!(api.status, 200);
    assert_eq!(json(&api)["reason"], "bad_signature");
    let session = form(admin, "/login", &[], &format!("token={TOKEN}")).await;
    let cookie = session.headers["set-cookie"].to_str().unwrap();
    let cookie = h("cookie", cookie.split(';').next().unwrap());
    let page = get(admin, &format!("/rejected/{id}"), &[cookie]).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("bad signature"), "{}", page.body);
    server.stop().await;
}
