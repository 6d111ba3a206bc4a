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

    // Members cannot create tenants.
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
        (whoami["tenant"].as_str(), whoami["role"].as_str()),
        (Some("acme"), Some("member"))
    );
}
