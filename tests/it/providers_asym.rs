//! Asymmetric signatures (Ed25519, RS256 with a JWKS) end to end against the real server.
//! The requests are signed by the providers' libraries (tests/oracle/discord.py with PyNaCl
//! and discord-interactions, tests/oracle/pagarme_v5.py with cryptography and PyJWT) with keys
//! made there: portaria is given only the public half.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::oracle;
#[allow(unused_imports)]
use crate::support::*;

/// The oracle's Ed25519 key: one seed, so that every request of a test is signed by one key.
const SEED: &str = "a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718";

/// Discord's signature of `body` at `timestamp` (None where the oracle library is missing),
/// checked by discord-interactions' `verify_key` first.
fn discord_sign(timestamp: &str, body: &str) -> Option<(String, String)> {
    let input = json!({"timestamp": timestamp, "body": body, "seed_hex": SEED});
    let out = oracle::run("discord.py", &input)?;
    assert_eq!(out["library_verifies"], true, "{out}");
    assert_eq!(out["library_verifies_tampered"], false, "{out}");
    let text = |k: &str| out[k].as_str().unwrap().to_string();
    Some((text("public_key"), text("signature")))
}

fn discord_headers(timestamp: &str, signature: &str) -> Vec<(String, String)> {
    vec![
        h("content-type", "application/json"),
        h("x-signature-ed25519", signature),
        h("x-signature-timestamp", timestamp),
    ]
}

/// A config with a Discord endpoint (forwarding to `forward`, if given) and a Pagar.me v5
/// one reading `pagarme-jwks.json` beside the config file.
fn config(db: &Path, public_key: &str, forward: Option<&Path>) -> String {
    let forward = forward
        .map(|p| format!("forward = {{ command = [\"{}\"] }}", p.display()))
        .unwrap_or_default();
    sqlite_config(db)
        .endpoint(
            "/webhooks/discord",
            "discord",
            &format!("public_key = \"{public_key}\"\n{forward}"),
        )
        .endpoint(
            "/webhooks/pagarme-v5",
            "pagarme-v5",
            "jwks_file = \"pagarme-jwks.json\"",
        )
        .text()
}

/// A server with that config; `jwks` is written to `pagarme-jwks.json` first.
async fn start(public_key: &str, jwks: &Value, forward: bool) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    std::fs::write(dir.path().join("pagarme-jwks.json"), jwks.to_string()).unwrap();
    let script = forward.then(|| {
        let path = dir.path().join("on-event.sh");
        let body = format!(
            "#!/bin/sh\ncat >> '{0}/forwarded'\necho >> '{0}/forwarded'\n",
            dir.path().display()
        );
        write_executable(&path, body);
        path
    });
    let text = config(&db, public_key, script.as_deref());
    TestServer::start_with(dir, db, &text).await
}

/// A Discord public key, for tests about Pagar.me.
const DISCORD_KEY: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";

/// A JWKS with one usable key, for tests about Discord.
fn some_jwks() -> Value {
    let n = "_".repeat(341) + "w";
    json!({"keys": [{"kty": "RSA", "kid": "k1", "n": n, "e": "AQAB"}]})
}

#[tokio::test]
async fn discord_an_interaction_signed_by_pynacl_is_stored_once_and_deferred() {
    let ts = now_secs().to_string();
    let body =
        r#"{"id":"1200000000000000001","type":2,"application_id":"42","data":{"name":"pay"}}"#;
    let Some((public_key, signature)) = discord_sign(&ts, body) else {
        return;
    };
    let server = start(&public_key, &some_jwks(), false).await;
    let headers = discord_headers(&ts, &signature);
    for _ in 0..2 {
        let reply = post(server.addr, "/webhooks/discord", &headers, body.as_bytes()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body, r#"{"type":5}"#);
        assert_eq!(reply.headers["content-type"], "application/json");
    }
    assert_eq!(server.count_rows(), 1);
    let stored: (String, String) = server
        .db()
        .query_row("SELECT dedup_key, event_type FROM events", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(stored, ("1200000000000000001".into(), "2".into()));
}

#[tokio::test]
async fn discord_tampered_test_and_stale_requests_get_401_and_nothing_is_stored() {
    let now = now_secs();
    let ts = now.to_string();
    let body = r#"{"id":"1200000000000000002","type":2,"application_id":"42"}"#;
    let Some((public_key, signature)) = discord_sign(&ts, body) else {
        return;
    };
    let server = start(&public_key, &some_jwks(), false).await;
    let url = "/webhooks/discord";
    let tampered = body.replace("42", "43");
    let headers = discord_headers(&ts, &signature);
    let reply = post(server.addr, url, &headers, tampered.as_bytes()).await;
    assert_eq!(reply.status, 401);
    // Discord's own check of the endpoint: a signature that is well formed and wrong. Here,
    // one made for another timestamp, and one of zeros.
    let (_, other) = discord_sign(&(now - 1).to_string(), body).unwrap();
    for wrong in [other, "0".repeat(128)] {
        let reply = post(
            server.addr,
            url,
            &discord_headers(&ts, &wrong),
            body.as_bytes(),
        )
        .await;
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(reply.body.contains("invalid signature"), "{}", reply.body);
    }
    let old = (now - 600).to_string();
    let (_, signature) = discord_sign(&old, body).unwrap();
    let reply = post(
        server.addr,
        url,
        &discord_headers(&old, &signature),
        body.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 401);
    assert!(reply.body.contains("timestamp outside"), "{}", reply.body);
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test]
async fn discord_ping_is_answered_and_neither_stored_nor_forwarded() {
    let ts = now_secs().to_string();
    let ping = r#"{"id":"1200000000000000003","type":1,"application_id":"42"}"#;
    let command = r#"{"id":"1200000000000000004","type":2,"application_id":"42"}"#;
    let Some((public_key, ping_sig)) = discord_sign(&ts, ping) else {
        return;
    };
    let (_, command_sig) = discord_sign(&ts, command).unwrap();
    let server = start(&public_key, &some_jwks(), true).await;
    let url = "/webhooks/discord";
    // An unsigned PING (Discord sends those too, to see them refused) is not answered.
    let unsigned = [h("x-signature-timestamp", &ts)];
    let reply = post(server.addr, url, &unsigned, ping.as_bytes()).await;
    assert_eq!(reply.status, 401);
    let reply = post(
        server.addr,
        url,
        &discord_headers(&ts, &ping_sig),
        ping.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, r#"{"type":1}"#);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(server.count_rows(), 0);
    // The next interaction is forwarded: the PING never was.
    let headers = discord_headers(&ts, &command_sig);
    let reply = post(server.addr, url, &headers, command.as_bytes()).await;
    assert_eq!(reply.status, 200);
    let forwarded = server.dir.path().join("forwarded");
    // The script appends the body, then a newline: a complete line is a finished delivery.
    let delivered = || std::fs::read_to_string(&forwarded).is_ok_and(|t| t.ends_with('\n'));
    eventually(
        Duration::from_secs(10),
        "the interaction is forwarded",
        delivered,
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&forwarded).unwrap(),
        format!("{command}\n")
    );
    assert_eq!(server.count_rows(), 1);
}

/// A key made by the oracle: its JWK (`use: sig`, `alg: RS256`) and the header for `body`.
fn pagarme_sign(kid: &str, body: &str) -> Option<(Value, String)> {
    let out = oracle::run("pagarme_v5.py", &json!({"body": body, "kid": kid}))?;
    Some((
        out["jwk"].clone(),
        out["header"].as_str().unwrap().to_string(),
    ))
}

#[tokio::test]
async fn pagarme_v5_rs256_signed_by_pyjwt_is_stored_and_anything_else_gets_401() {
    let body = r#"{"id":"hook_Xy12","type":"charge.paid","data":{"id":"ch_9"}}"#;
    let Some((jwk, header)) = pagarme_sign("k1", body) else {
        return;
    };
    // A second key of the oracle's, published for encryption only: not used for signatures.
    let (mut enc, enc_header) = pagarme_sign("k2", body).unwrap();
    enc["use"] = json!("enc");
    let server = start(DISCORD_KEY, &json!({"keys": [jwk, enc]}), false).await;
    let url = "/webhooks/pagarme-v5";
    let signed = |value: &str| {
        vec![
            h("content-type", "application/json"),
            h("x-webhook-asymmetric-signature", value),
        ]
    };
    for _ in 0..2 {
        let reply = post(server.addr, url, &signed(&header), body.as_bytes()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let stored: (String, String) = server
        .db()
        .query_row("SELECT dedup_key, event_type FROM events", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(stored, ("hook_Xy12".into(), "charge.paid".into()));

    let tampered = body.replace("ch_9", "ch_8");
    let wrong_kid = header.replace("kid=k1", "kid=k3");
    let hs256 = header.replace("alg=RS256", "alg=HS256");
    for (what, value, body) in [
        ("a changed byte", header.as_str(), tampered.as_str()),
        ("an unknown kid", wrong_kid.as_str(), body),
        ("alg HS256", hs256.as_str(), body),
        ("a key for encryption", enc_header.as_str(), body),
    ] {
        let reply = post(server.addr, url, &signed(value), body.as_bytes()).await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.body);
    }
    assert_eq!(server.count_rows(), 1);
}
