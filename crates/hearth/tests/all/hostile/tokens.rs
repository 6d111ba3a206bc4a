//! A token reaches no further than its grant: its scope, its function,
//! its expiry, its tenant; and no token makes one broader than itself.

use crate::harness::{Daemon, JsonExt, error_of, example, function_names};

/// Makes a token of the caller's tenant with `grant` (JSON); its secret
/// and id.
async fn token(d: &Daemon, caller: &str, grant: serde_json::Value) -> (String, String) {
    let r = d
        .http
        .post(format!("{}/v1/tokens", d.url))
        .bearer_auth(caller)
        .json(&grant)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "making {grant}");
    let v: serde_json::Value = r.json().await.unwrap();
    (
        v["token"].as_str().unwrap().to_string(),
        v["id"].as_str().unwrap().to_string(),
    )
}

/// The status of `method path` with `token`.
async fn status(d: &Daemon, token: &str, method: reqwest::Method, path: &str) -> u16 {
    d.http
        .request(method, format!("{}{path}", d.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_token_reaches_no_further_than_its_scope_and_its_function() {
    use reqwest::Method;
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    for name in ["f", "g"] {
        let r = d
            .deploy_as(&acme, name, &[("runtime", "wasm")], example("counter.wat"))
            .await;
        assert_eq!(r.status(), 201);
        let r = d.invoke_as(&acme, "acme", name).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let g_tape = d.newest_tape_as(&acme, "g", 1).await;

    // Read: reads everything, changes and runs nothing.
    let (read, _) = token(&d, &acme, serde_json::json!({"scope": "read"})).await;
    for (method, path, want) in [
        (Method::GET, "/v1/functions", 200),
        (Method::GET, "/v1/functions/g/logs", 200),
        (Method::GET, &format!("/v1/recordings/{g_tape}"), 200),
        (Method::POST, "/v1/functions/g/aliases/live/rollback", 403),
        (Method::PUT, "/v1/functions/g/kv/k", 403),
        (Method::DELETE, "/v1/functions/g", 403),
        (
            Method::POST,
            &format!("/v1/recordings/{g_tape}/replay"),
            403,
        ),
        (Method::GET, "/v1/tokens", 403),
        (Method::POST, "/fn/acme/g", 404),
    ] {
        assert_eq!(
            status(&d, &read, method.clone(), path).await,
            want,
            "read: {method} {path}"
        );
    }

    // Invoke, on f alone: runs f, reads nothing, cannot see g.
    let (invoke_f, _) = token(
        &d,
        &acme,
        serde_json::json!({"scope": "invoke", "function": "f"}),
    )
    .await;
    for (method, path, want) in [
        (Method::POST, "/fn/acme/f", 200),
        (Method::POST, "/fn/acme/g", 404),
        (Method::GET, "/v1/functions", 403),
        (Method::GET, "/v1/functions/f/recordings", 403),
        (Method::GET, "/v1/functions/f/kv/count", 403),
    ] {
        assert_eq!(
            status(&d, &invoke_f, method.clone(), path).await,
            want,
            "invoke on f: {method} {path}"
        );
    }

    // Deploy, on f alone: does everything to f, nothing to g, and lists
    // only f.
    let (deploy_f, _) = token(
        &d,
        &acme,
        serde_json::json!({"scope": "deploy", "function": "f"}),
    )
    .await;
    let r = d
        .deploy_as(
            &deploy_f,
            "f",
            &[("runtime", "wasm")],
            example("counter.wat"),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (code, _, message) = error_of(
        d.deploy_as(&deploy_f, "g", &[("runtime", "wasm")], example("hello.wat"))
            .await,
    )
    .await;
    assert_eq!(code, 403);
    assert!(message.contains("only on function f"), "{message}");
    for (method, path, want) in [
        (Method::GET, "/v1/functions/f/logs", 200),
        (Method::GET, "/v1/functions/g/logs", 403),
        (Method::GET, "/v1/functions/g/kv/count", 403),
        (Method::DELETE, "/v1/functions/g", 403),
        (Method::GET, &format!("/v1/recordings/{g_tape}"), 404),
        (Method::GET, &format!("/v1/recordings/{g_tape}/export"), 404),
        (Method::GET, "/v1/recordings?function=g", 403),
        (Method::GET, "/v1/status", 403),
        (Method::GET, "/v1/tokens", 403),
    ] {
        assert_eq!(
            status(&d, &deploy_f, method.clone(), path).await,
            want,
            "deploy on f: {method} {path}"
        );
    }
    let list: serde_json::Value = d
        .http
        .get(format!("{}/v1/functions", d.url))
        .bearer_auth(&deploy_f)
        .json_value()
        .await;
    assert_eq!(function_names(&list), ["f"]);
    let stats: serde_json::Value = d.get_json_as(&deploy_f, "/v1/stats").await;
    let seen: Vec<&String> = stats["functions"].as_object().unwrap().keys().collect();
    assert_eq!(seen, ["f"], "{stats}");
    let tapes: serde_json::Value = d.get_json_as(&deploy_f, "/v1/recordings").await;
    let tapes = tapes["recordings"].as_array().unwrap();
    assert!(!tapes.is_empty() && tapes.iter().all(|t| t["function"] == "f"));
}

#[tokio::test]
async fn no_token_makes_or_renews_one_broader_than_itself_or_another_tenants() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    let post = |token: &str, path: &str, body: serde_json::Value| {
        d.http
            .post(format!("{}{path}", d.url))
            .bearer_auth(token.to_string())
            .json(&body)
            .send()
    };
    let (code, _, message) = error_of(
        post(&acme, "/v1/tokens", serde_json::json!({"scope": "admin"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 400);
    assert!(message.contains("operator's"), "{message}");
    for path in ["/v1/tokens?tenant=beta", "/v1/tokens?tenant=admin"] {
        let r = post(&acme, path, serde_json::json!({"scope": "read"}))
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        assert_eq!(status(&d, &acme, reqwest::Method::GET, path).await, 403);
    }

    // An id is a token's only within its tenant.
    let (beta_reader, beta_id) = token(&d, &beta, serde_json::json!({"scope": "read"})).await;
    let path = format!("/v1/tokens/{beta_id}");
    assert_eq!(status(&d, &acme, reqwest::Method::DELETE, &path).await, 404);
    assert_eq!(
        status(&d, &acme, reqwest::Method::POST, &format!("{path}/rotate")).await,
        404
    );
    assert_eq!(
        status(&d, &beta_reader, reqwest::Method::GET, "/v1/functions").await,
        200
    );

    // A token that expires makes none that outlives it, nor renews one.
    let (brief, _) = token(
        &d,
        &acme,
        serde_json::json!({"scope": "deploy", "expires": "1h"}),
    )
    .await;
    let r = post(&brief, "/v1/tokens", serde_json::json!({"scope": "read"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let (_, lasting) = token(&d, &acme, serde_json::json!({"scope": "read"})).await;
    let r = post(
        &brief,
        &format!("/v1/tokens/{lasting}/rotate"),
        serde_json::json!(null),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 403, "renewing a token that outlives it");
    let r = post(
        &brief,
        "/v1/tokens",
        serde_json::json!({"scope": "read", "expires": "30m"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test]
async fn an_expired_token_is_refused_and_a_tenants_tokens_are_bounded() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let (brief, id) = token(
        &d,
        &acme,
        serde_json::json!({"scope": "read", "expires": "1s"}),
    )
    .await;
    assert_eq!(
        status(&d, &brief, reqwest::Method::GET, "/v1/functions").await,
        200
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (code, _, message) = error_of(
        d.http
            .get(format!("{}/v1/functions", d.url))
            .bearer_auth(&brief)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 401);
    assert!(
        message.contains("expired")
            && message.contains(&id)
            && message.contains("hearth token create"),
        "{message}"
    );

    // A tenant holds at most 100 tokens (its first and the brief one
    // included); the next names the fix.
    for _ in 2..hearth_store::MAX_TOKENS_PER_TENANT {
        token(&d, &acme, serde_json::json!({"scope": "read"})).await;
    }
    let (code, _, message) = error_of(
        d.http
            .post(format!("{}/v1/tokens", d.url))
            .bearer_auth(&acme)
            .json(&serde_json::json!({"scope": "read"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 409);
    assert!(message.contains("hearth token revoke"), "{message}");
    let r = d
        .http
        .delete(format!("{}/v1/tokens/{id}", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    token(&d, &acme, serde_json::json!({"scope": "read"})).await;
}
