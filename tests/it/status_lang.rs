//! The status page's language, against the real server: the same pages in Brazilian
//! Portuguese when `Accept-Language` prefers it and in English otherwise, `<html lang>` set to
//! match, `Vary: Accept-Language` on them; the store's words (`dead`) translated on the page
//! only, never in the JSON API or the forms' values; the login page and its refusal, and the
//! not-found answers too.

use crate::support::*;

const PT: &str = "pt-BR,pt;q=0.9,en-US;q=0.8,en;q=0.7";

fn pt() -> (String, String) {
    h("accept-language", PT)
}

fn vary(reply: &Reply) -> String {
    reply
        .headers
        .get("vary")
        .map(|v| v.to_str().unwrap().to_ascii_lowercase())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_same_pages_in_portuguese_when_the_browser_prefers_it_and_english_otherwise() {
    let target = Target::start(vec![500, 500]).await;
    let server = TestServer::start("", &forward_to(target.addr)).await;
    let admin = server.admin.unwrap();
    let id = a_dead_event(&server).await;
    let event = format!("/events/{id}");
    let english = [
        vec![],
        vec![h("accept-language", "en-US,en;q=0.9")],
        vec![h("accept-language", "fr-FR,fr;q=0.9,de;q=0.8")],
        vec![h("accept-language", "en;q=0.9,pt-BR;q=0.8")],
    ];
    for path in ["/", "/events", "/events?status=dead", event.as_str()] {
        let pt_page = get(admin, path, &[pt()]).await;
        assert_eq!(pt_page.status, 200, "{path}: {}", pt_page.body);
        assert!(
            pt_page.body.contains("<html lang=\"pt-BR\">"),
            "{path}: {}",
            pt_page.body
        );
        assert!(vary(&pt_page).contains("accept-language"), "{path}");
        assert!(pt_page.body.contains(">Agora</a>") && pt_page.body.contains(">Mortos</a>"));
        for headers in &english {
            let en_page = get(admin, path, headers).await;
            assert_eq!(en_page.status, 200, "{path}");
            assert!(
                en_page.body.contains("<html lang=\"en\">"),
                "{path} {headers:?}"
            );
            assert!(vary(&en_page).contains("accept-language"), "{path}");
            assert!(en_page.body.contains(">Now</a>") && !en_page.body.contains("Agora"));
        }
    }

    let overview = get(admin, "/", &[pt()]).await.body;
    for said in [
        "Precisa da sua atenção: ",
        "1 evento morto",
        "As últimas 48 horas",
        "Recebidos, última hora",
        "Esta página não pede senha",
        "(há ",
        "Reenviar 1 evento morto de pagarme",
        "recebido: 1",
    ] {
        assert!(overview.contains(said), "{said}: {overview}");
    }
    assert!(!overview.contains("Needs you") && !overview.contains(" ago)"));
    let english = get(admin, "/", &[]).await.body;
    for said in [
        "Needs you: ",
        "1 dead event",
        "Replay all 1 dead event of pagarme",
    ] {
        assert!(english.contains(said), "{said}: {english}");
    }

    // The store's words: translated labels, the same values in links, forms and classes.
    let list = get(admin, "/events?status=dead", &[pt()]).await.body;
    assert!(
        list.contains("<span class=\"badge dead\">morto</span>"),
        "{list}"
    );
    assert!(
        list.contains("<option value=\"dead\" selected>morto</option>"),
        "{list}"
    );
    assert!(list.contains("Tentativas") && list.contains("Tipo de evento"));
    let page = get(admin, &event, &[pt()]).await.body;
    for said in [
        "<h1>Evento ",
        "Morto: ",
        "todas as tentativas falharam.",
        "Tentativas de entrega",
        "<span class=\"badge dead\">falhou</span>",
        "Reenviar este evento",
        "Cabeçalhos",
    ] {
        assert!(page.contains(said), "{said}: {page}");
    }
    let english = get(admin, &event, &[]).await.body;
    assert!(english.contains("<span class=\"badge dead\">failed</span>"));

    // The JSON is for scripts: English whatever the browser prefers.
    let api = get(admin, &format!("/api{event}"), &[pt()]).await;
    let json: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(json["status"], "dead");
    assert_eq!(json["delivery_attempts"][0]["outcome"], "failed");
    let missing = get(admin, "/api/events/999999", &[pt()]).await;
    assert_eq!(
        (missing.status, missing.body.trim()),
        (404, r#"{"error":"no such event"}"#)
    );

    // Not found: the page, and any other path.
    let gone = get(admin, "/events/999999", &[pt()]).await;
    assert_eq!(gone.status, 404);
    assert!(gone.body.contains("<html lang=\"pt-BR\">") && gone.body.contains("Não encontrado"));
    let nowhere = get(admin, "/nowhere", &[pt()]).await;
    assert_eq!(
        (nowhere.status, nowhere.body.as_str()),
        (404, "Não encontrado\n")
    );
    assert!(vary(&nowhere).contains("accept-language"));
    assert_eq!(get(admin, "/nowhere", &[]).await.body, "Not found\n");
    server.stop().await;
}

#[tokio::test]
async fn the_login_page_and_its_refusal_speak_the_browsers_language() {
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "correct-horse-battery-staple\n").unwrap();
    let extra = format!("\n[status]\ntoken_file = \"{}\"", token.display());
    let server = TestServer::start(&extra, "").await;
    let admin = server.admin.unwrap();

    let login = get(admin, "/login", &[pt()]).await;
    assert_eq!(login.status, 200);
    assert!(
        login.body.contains("<html lang=\"pt-BR\">"),
        "{}",
        login.body
    );
    assert!(login.body.contains("Token de administrador") && login.body.contains(">Entrar<"));
    assert!(vary(&login).contains("accept-language"));
    let wrong = form(admin, "/login", &[pt()], "token=guess-guess-guess").await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.body.contains("Esse não é o token de administrador."),
        "{}",
        wrong.body
    );
    let wrong = form(admin, "/login", &[], "token=guess-guess-guess").await;
    assert!(
        wrong.body.contains("That is not the admin token.") && wrong.body.contains("lang=\"en\"")
    );

    let ok = form(admin, "/login", &[], "token=correct-horse-battery-staple").await;
    let session = h(
        "cookie",
        ok.headers["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap(),
    );
    let page = get(admin, "/", &[session.clone(), pt()]).await;
    assert!(page.body.contains(">Sair</button>"), "{}", page.body);
    let page = get(admin, "/", &[session]).await;
    assert!(page.body.contains(">Log out</button>"));
    server.stop().await;
}
