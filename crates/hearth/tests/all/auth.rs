//! Tokens, tenants, and what one tenant can see of another.

use crate::harness::{Daemon, JsonExt, error_of, example, function_names};

#[tokio::test]
async fn missing_or_wrong_tokens_are_refused() {
    let d = Daemon::start();
    let anon = d
        .http
        .get(format!("{}/v1/functions", d.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
    let wrong = d
        .http
        .get(format!("{}/v1/functions", d.url))
        .bearer_auth("hth_nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // counter is private: a token is needed to invoke it.
    let (status, kind, message) = error_of(
        d.http
            .post(format!("{}/fn/admin/counter", d.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, kind.as_str()), (404, "not_found"));
    assert!(message.contains("Bearer"), "{message}");
    assert_eq!(d.invoke("counter", b"").await.status(), 200);
}

#[tokio::test]
async fn tenants_never_see_each_others_functions_logs_or_kv() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    let dup = d
        .post("/v1/tenants")
        .json(&serde_json::json!({"name": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(dup.status(), 409);

    for token in [&acme, &beta] {
        let resp = d
            .http
            .post(format!("{}/v1/functions/count", d.url))
            .query(&[("runtime", "wasm")])
            .bearer_auth(token)
            .body(example("counter.wat"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    let call = |tenant: &str, token: &str| {
        d.http
            .post(format!("{}/fn/{tenant}/count", d.url))
            .bearer_auth(token.to_string())
            .send()
    };
    assert_eq!(
        call("acme", &acme).await.unwrap().text().await.unwrap(),
        "1\n"
    );
    assert_eq!(
        call("acme", &acme).await.unwrap().text().await.unwrap(),
        "2\n"
    );
    assert_eq!(
        call("beta", &beta).await.unwrap().text().await.unwrap(),
        "1\n",
        "KV is per tenant"
    );

    // beta's token cannot invoke acme's private function, nor learn that
    // it exists…
    assert_eq!(call("acme", &beta).await.unwrap().status(), 404);
    // …nor does it list, read or delete acme's things: it only sees its own.
    let list: serde_json::Value = d
        .http
        .get(format!("{}/v1/functions", d.url))
        .bearer_auth(&beta)
        .json_value()
        .await;
    let names: Vec<_> = function_names(&list);
    assert_eq!(names, ["count"]);
    assert_eq!(list["tenant"], "beta");
    let admin_list: serde_json::Value = d.get("/v1/functions").json_value().await;
    assert!(
        admin_list["functions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["name"] != "count")
    );

    // A tenant's token cannot create tenants.
    let resp = d
        .http
        .post(format!("{}/v1/tenants", d.url))
        .bearer_auth(&beta)
        .json(&serde_json::json!({"name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let whoami: serde_json::Value = d
        .http
        .get(format!("{}/v1/whoami", d.url))
        .bearer_auth(&acme)
        .json_value()
        .await;
    assert_eq!(
        (whoami["tenant"].as_str(), whoami["scope"].as_str()),
        (Some("acme"), Some("deploy"))
    );
}

/// `hearth token …` with the admin token: the CLI's output and success.
fn token_cli(d: &Daemon, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["token"];
    all.extend_from_slice(args);
    crate::cli::hearth(d, &all)
}

#[tokio::test]
async fn tokens_are_made_with_scopes_listed_without_secrets_revoked_and_rotated() {
    let d = Daemon::start();
    // A read token (the console's), from the CLI.
    let (ok, out, err) = token_cli(&d, &["create", "--scope", "read", "--name", "grafana"]);
    assert!(ok, "{err}");
    let reader = out.trim().to_string();
    assert!(reader.starts_with("hth_"), "{out}");
    assert!(err.contains("read on every function, no expiry"), "{err}");

    // It reads, and does nothing else.
    let status = |token: &str, rb: reqwest::RequestBuilder| {
        let rb = rb.bearer_auth(token.to_string());
        async move { rb.send().await.unwrap().status().as_u16() }
    };
    let url = |path: &str| format!("{}{path}", d.url);
    assert_eq!(status(&reader, d.http.get(url("/v1/functions"))).await, 200);
    assert_eq!(status(&reader, d.http.get(url("/v1/status"))).await, 200);
    assert_eq!(
        status(&reader, d.http.post(url("/fn/admin/counter"))).await,
        404,
        "a read token does not invoke a private function"
    );
    let deploy = d
        .deploy_as(&reader, "x", &[("runtime", "wasm")], example("hello.wat"))
        .await;
    let (code, _, message) = error_of(deploy).await;
    assert_eq!(code, 403);
    assert!(message.contains("--scope deploy"), "{message}");

    // The console logs in with it.
    let login = d
        .http
        .post(url("/v1/session"))
        .json(&serde_json::json!({ "token": reader }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    let session: serde_json::Value = login.json().await.unwrap();
    assert_eq!(session["scope"], "read");

    // An invoke token limited to one function, expiring.
    let (ok, out, err) = token_cli(
        &d,
        &[
            "create",
            "--scope",
            "invoke",
            "--function",
            "counter",
            "--expires",
            "1h",
        ],
    );
    assert!(ok, "{err}");
    let invoker = out.trim().to_string();
    assert_eq!(
        status(&invoker, d.http.post(url("/fn/admin/counter"))).await,
        200
    );
    assert_eq!(
        status(&invoker, d.http.get(url("/v1/functions/counter/logs"))).await,
        403,
        "an invoke token reads nothing"
    );
    let login = d
        .http
        .post(url("/v1/session"))
        .json(&serde_json::json!({ "token": invoker }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 403, "the console needs a read token");

    // The list names both, and no secret.
    let (ok, out, err) = token_cli(&d, &["ls"]);
    assert!(ok, "{err}");
    assert!(!out.contains(&reader) && !out.contains(&invoker) && !out.contains("hth_"));
    assert!(out.contains("grafana"), "{out}");
    assert!(out.contains("invoke on function counter, until"), "{out}");
    let list: serde_json::Value = d.get_json("/v1/tokens").await;
    assert!(!list.to_string().contains("hth_"), "{list}");
    let id_of = |label: Option<&str>, scope: &str| {
        list["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["scope"] == scope && t["name"].as_str() == label)
            .map(|t| t["id"].as_str().unwrap().to_string())
            .unwrap()
    };
    let (read_id, invoke_id) = (id_of(Some("grafana"), "read"), id_of(None, "invoke"));

    // Rotation: the old secret stops, the new one has the same grant.
    let (ok, out, err) = token_cli(&d, &["rotate", &invoke_id]);
    assert!(ok, "{err}");
    let rotated = out.trim().to_string();
    assert_eq!(
        status(&invoker, d.http.get(url("/v1/whoami"))).await,
        401,
        "the old secret is no token"
    );
    assert_eq!(
        status(&invoker, d.http.post(url("/fn/admin/counter"))).await,
        404,
        "and a private function is hidden from it"
    );
    assert_eq!(
        status(&rotated, d.http.post(url("/fn/admin/counter"))).await,
        200
    );
    assert_eq!(
        status(&rotated, d.http.post(url("/fn/admin/hello"))).await,
        200,
        "hello is public"
    );
    let whoami: serde_json::Value = d.get_json_as(&rotated, "/v1/whoami").await;
    assert_eq!(
        (whoami["scope"].as_str(), whoami["function"].as_str()),
        (Some("invoke"), Some("counter"))
    );

    // Revocation: refused on the next call.
    let (ok, out, err) = token_cli(&d, &["revoke", &read_id]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("revoked token {read_id}")), "{out}");
    let (code, _, message) = error_of(
        d.http
            .get(url("/v1/functions"))
            .bearer_auth(&reader)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 401);
    assert!(message.contains("revoked"), "{message}");
    let (ok, _, err) = token_cli(&d, &["revoke", &read_id]);
    assert!(
        !ok && err.contains("404") && err.contains("hearth token ls"),
        "{err}"
    );
}
