//! Deploy, invoke, list, version, remove, logs, metrics, OpenAPI.

use crate::harness::{Daemon, JsonExt, error_of, example, function_names};
use hearth_test_support::require;

#[tokio::test]
async fn first_start_serves_the_bundled_examples() {
    let d = Daemon::start();
    // Public examples answer without a token.
    let resp = d
        .http
        .post(format!("{}/fn/admin/echo", d.url))
        .body("ping")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ping");
    let resp = d
        .http
        .get(format!("{}/fn/admin/hello/any/sub/path?x=1", d.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/plain");
    assert_eq!(resp.headers().get_all("content-type").iter().count(), 1);
    assert_eq!(resp.text().await.unwrap(), "hello from wasm\n");
    // A trailing slash after the name is the root path (`hearth invoke
    // --path '/?q=1'` sends one), not "no such route".
    let resp = d
        .http
        .post(format!("{}/fn/admin/echo/?x=1", d.url))
        .body("slash")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "slash");
    // The token file is private to its owner.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.dir.join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn deploys_make_immutable_versions_that_can_be_pinned() {
    let d = Daemon::start();
    let v1 = d.deploy("greet", example("hello.wat"), &[]).await;
    let v2 = d
        .deploy("greet", example("echo.wat"), &[("memory_mib", "32")])
        .await;
    assert_eq!(
        (v1["version"].as_u64(), v2["version"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(v2["spec"]["limits"]["memory_mib"], 32);

    let newest = d.invoke("greet", b"latest").await;
    assert_eq!(newest.headers()["hearth-version"], "2");
    assert_eq!(newest.text().await.unwrap(), "latest");
    let pinned = d.invoke("greet@1", b"").await;
    assert_eq!(pinned.text().await.unwrap(), "hello from wasm\n");
    let by_header = d
        .post("/fn/admin/greet")
        .header("hearth-version", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.headers()["hearth-version"], "1");
    assert_eq!(error_of(d.invoke("greet@9", b"").await).await.0, 404);

    let versions: serde_json::Value = d.get("/v1/functions/greet").json_value().await;
    assert_eq!(versions["versions"].as_array().unwrap().len(), 2);
    let list: serde_json::Value = d.get("/v1/functions").json_value().await;
    let names: Vec<_> = function_names(&list);
    assert_eq!(names, ["counter", "echo", "greet", "hello"]);
}

#[tokio::test]
async fn remove_deletes_the_function_and_its_kv() {
    let d = Daemon::start();
    d.deploy("tally", example("counter.wat"), &[]).await;
    assert_eq!(d.invoke("tally", b"").await.text().await.unwrap(), "1\n");
    assert_eq!(d.invoke("tally", b"").await.text().await.unwrap(), "2\n");
    let resp = d.delete("/v1/functions/tally").send().await.unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(error_of(d.invoke("tally", b"").await).await.0, 404);
    let again = d.delete("/v1/functions/tally").send().await.unwrap();
    assert_eq!(again.status(), 404);
    let v = d.deploy("tally", example("counter.wat"), &[]).await;
    assert_eq!(v["version"], 2, "numbers are not reused after removal");
    assert_eq!(
        d.invoke("tally", b"").await.text().await.unwrap(),
        "1\n",
        "KV went with the function"
    );
}

#[tokio::test]
async fn restart_deletes_artifacts_of_removed_functions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut d = Daemon::start_in(&dir, &[]);
    let gone = d.deploy("gone", example("trap.wat"), &[]).await;
    let kept = d.deploy("kept", example("echo.wat"), &[]).await;
    let path = |v: &serde_json::Value| {
        dir.join("artifacts/sha256")
            .join(v["artifact"].as_str().unwrap())
    };
    assert!(path(&gone).is_file());
    let resp = d.delete("/v1/functions/gone").send().await.unwrap();
    assert_eq!(resp.status(), 204);
    d.kill9();
    let d = Daemon::start_in(&dir, &[]);
    assert!(
        !path(&gone).exists(),
        "the removed function's code is deleted"
    );
    assert!(path(&kept).is_file());
    assert_eq!(
        d.invoke("kept", b"still here").await.text().await.unwrap(),
        "still here"
    );
}

#[tokio::test]
async fn logs_hold_stderr_log_calls_and_failures_per_invocation() {
    let d = Daemon::start();
    d.deploy("logger", example("log.wat"), &[]).await;
    let resp = d.invoke("logger", b"").await;
    let id = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(resp.text().await.unwrap(), "ok");
    let lines = d.logs_until("logger", |l| l.len() >= 2).await;
    let mine: Vec<_> = lines
        .iter()
        .filter(|l| l["invocation_id"] == id.as_str())
        .collect();
    assert!(
        mine.iter()
            .any(|l| l["stream"] == "stderr" && l["message"] == "to stderr"),
        "{lines:?}"
    );
    assert!(
        mine.iter().any(|l| l["stream"] == "log"
            && l["level"] == "warn"
            && l["message"] == "structured hello"),
        "{lines:?}"
    );

    d.deploy("broken", example("trap.wat"), &[]).await;
    let failed = d.invoke("broken", b"").await;
    let failed_id = failed.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let lines = d.logs_until("broken", |l| !l.is_empty()).await;
    assert!(
        lines
            .iter()
            .any(|l| l["invocation_id"] == failed_id.as_str()
                && l["stream"] == "system"
                && l["message"].as_str().unwrap().contains("divide by zero")),
        "{lines:?}"
    );
    let only: serde_json::Value = d
        .get(&format!("/v1/functions/logger/logs?invocation={id}"))
        .json_value()
        .await;
    assert!(
        only["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["invocation_id"] == id.as_str())
    );
}

/// With `--metrics-per-function`, each function's calls by outcome and
/// its latency are series of their own (a 5xx it answers is an error);
/// they go with the function, and without the flag there are none.
#[tokio::test]
async fn per_function_series_count_calls_errors_and_latency_when_opted_into() {
    let d = Daemon::start_with(&["--metrics-per-function", "true"]);
    d.deploy("broken", example("trap.wat"), &[]).await;
    for _ in 0..3 {
        d.invoke("hello", b"").await;
    }
    d.invoke("broken", b"").await;
    let text = d.get_text("/metrics").await;
    let value = |needle: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let calls = |f: &str, outcome: &str| {
        value(&format!(
            "hearth_function_invocations_total{{tenant=\"admin\",function=\"{f}\",outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!(calls("hello", "ok"), Some(3.0), "{text}");
    assert_eq!(calls("broken", "error"), Some(1.0), "{text}");
    assert_eq!(calls("broken", "ok"), None);
    assert_eq!(
        value("hearth_function_duration_seconds_count{tenant=\"admin\",function=\"hello\"}"),
        Some(3.0),
        "{text}"
    );
    let r = d.delete("/v1/functions/broken").send().await.unwrap();
    assert_eq!(r.status(), 204);
    let after = d.get_text("/metrics").await;
    assert!(!after.contains("function=\"broken\""), "{after}");

    let plain = Daemon::start();
    plain.invoke("hello", b"").await;
    let text = plain.get_text("/metrics").await;
    assert!(!text.contains("hearth_function_"), "{text}");
}

/// A scraper asking for Prometheus' text format (`text/plain`) gets it,
/// and `promtool check metrics` accepts it: OpenMetrics' info and counter
/// families, which promtool's parser refuses, are named as that format
/// names them. OpenMetrics stays the default and Prometheus' first choice.
#[tokio::test]
async fn metrics_answer_prometheus_text_that_promtool_accepts() {
    require!(Promtool);
    let d = Daemon::start();
    d.invoke("hello", b"").await;
    let scrape = |accept: &'static str| {
        let d = &d;
        async move {
            let r = d
                .get("/metrics")
                .header("accept", accept)
                .send()
                .await
                .unwrap();
            let kind = r.headers()["content-type"].to_str().unwrap().to_string();
            (kind, r.text().await.unwrap())
        }
    };
    let (kind, text) = scrape("text/plain;version=0.0.4").await;
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    assert!(text.contains("# TYPE hearth_build_info gauge"), "{text}");
    assert!(
        text.contains("# TYPE hearth_invocations_total counter"),
        "{text}"
    );
    assert!(
        !text.contains("# EOF") && !text.contains("_created"),
        "{text}"
    );
    let check = |text: String| {
        use std::io::Write;
        let mut promtool = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = promtool.wait_with_output().unwrap();
        eprintln!("promtool: {}", String::from_utf8_lossy(&out.stderr));
        out.status.success()
    };
    assert!(check(text), "promtool refused the Prometheus text");
    // What Prometheus itself sends first: OpenMetrics, which promtool's
    // (Prometheus-format) linter does not read.
    let (kind, om) =
        scrape("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3")
            .await;
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(om.ends_with("# EOF\n"));
    assert!(!check(om), "the check can fail");
}

#[tokio::test]
async fn metrics_count_invocations_errors_and_starts() {
    let d = Daemon::start();
    d.deploy("broken", example("trap.wat"), &[]).await;
    for _ in 0..3 {
        d.invoke("hello", b"").await;
    }
    d.invoke("broken", b"").await;
    let text = d.get_text("/metrics").await;
    let value = |needle: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{needle} not in:\n{text}"))
    };
    assert_eq!(
        value("hearth_invocations_total{tier=\"wasm\",outcome=\"ok\"}"),
        3.0
    );
    assert_eq!(
        value("hearth_invocations_total{tier=\"wasm\",outcome=\"error\"}"),
        1.0
    );
    assert_eq!(value("hearth_invocation_errors_total{kind=\"trap\"}"), 1.0);
    assert_eq!(
        value("hearth_starts_total{start=\"warm\"}"),
        2.0,
        "hello's 2nd and 3rd calls"
    );
    assert_eq!(
        value("hearth_starts_total{start=\"cold\"}"),
        2.0,
        "first hello, first broken"
    );
    assert_eq!(value("hearth_sandboxes_live"), 0.0);
    assert!(text.contains("hearth_invocation_duration_seconds_bucket"));
    assert_eq!(
        value(&format!(
            "hearth_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
}

/// The document is served without a token, and the daemon's real answers
/// fit it: each JSON answer is checked against the schema the document
/// gives for its route and status (`hearth-api`'s unit tests hold every
/// route and deploy setting to it).
#[tokio::test]
async fn the_daemons_answers_fit_its_openapi_document() {
    let d = Daemon::start();
    let doc: serde_json::Value = d
        .http
        .get(format!("{}/v1/openapi.json", d.url))
        .json_value()
        .await;
    assert_eq!(doc["openapi"], "3.1.0");
    let deploy = &doc["paths"]["/v1/functions/{name}"]["post"]["parameters"];
    assert!(
        deploy
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "keep_errors"),
        "{deploy}"
    );
    // Checks `resp` (a call to `route` by `method`) against the document.
    let fits = |method: &str, route: &str, status: u16, body: &serde_json::Value| {
        let schema = &doc["paths"][route][method]["responses"][status.to_string()]["content"]["application/json"]
            ["schema"];
        assert!(
            schema.is_object(),
            "no schema for {method} {route} {status}"
        );
        let root = serde_json::json!({"components": doc["components"], "allOf": [schema]});
        let validator = jsonschema::validator_for(&root).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {route} {status} does not fit the document: {errors:?}\n{body:#}"
        );
    };
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };

    let (st, v) = send(d.get("/v1/whoami")).await;
    fits("get", "/v1/whoami", st, &v);
    let (st, v) = send(d.get("/v1/status")).await;
    fits("get", "/v1/status", st, &v);
    let (st, v) = send(
        d.post("/v1/tenants")
            .json(&serde_json::json!({"name": "acme"})),
    )
    .await;
    fits("post", "/v1/tenants", st, &v);
    // A tenant's status: the node-wide figures left out.
    let acme = v["token"].as_str().unwrap().to_string();
    let as_acme = d
        .http
        .get(format!("{}/v1/status", d.url))
        .bearer_auth(&acme);
    let (st, v) = send(as_acme).await;
    fits("get", "/v1/status", st, &v);
    assert!(
        v["in_flight"].is_null() && v["tenant"]["name"] == "acme",
        "{v}"
    );
    let (st, v) = send(d.get("/v1/tenants/acme")).await;
    fits("get", "/v1/tenants/{tenant}", st, &v);

    let v = d
        .deploy("counter", example("counter.wat"), &[("env", "A=1")])
        .await;
    fits("post", "/v1/functions/{name}", 201, &v);
    d.deploy("log", example("log.wat"), &[]).await;
    for _ in 0..2 {
        assert_eq!(d.invoke("counter", b"").await.status(), 200);
    }
    assert_eq!(d.invoke("log", b"").await.status(), 200);
    let (st, v) = send(d.get("/v1/functions")).await;
    fits("get", "/v1/functions", st, &v);
    let (st, v) = send(d.get("/v1/functions/counter")).await;
    fits("get", "/v1/functions/{name}", st, &v);
    let lines = d.logs_until("log", |l| l.len() >= 2).await;
    assert!(!lines.is_empty());
    let (st, v) = send(d.get("/v1/functions/log/logs")).await;
    fits("get", "/v1/functions/{name}/logs", st, &v);
    let (st, v) = send(d.get("/v1/functions/counter/kv")).await;
    fits("get", "/v1/functions/{name}/kv", st, &v);
    assert_eq!(v["keys"], serde_json::json!(["count"]));

    let id = d.newest_tape("counter", 2).await;
    let (st, v) = send(d.get("/v1/functions/counter/recordings")).await;
    fits("get", "/v1/functions/{name}/recordings", st, &v);
    let (st, v) = send(d.post(&format!("/v1/recordings/{id}/replay"))).await;
    fits("post", "/v1/recordings/{id}/replay", st, &v);
    let (st, v) = send(d.post("/v1/functions/counter/replay?against=1")).await;
    fits("post", "/v1/functions/{name}/replay", st, &v);
    assert_eq!(v["replayed"], 2, "{v}");

    // Errors: a failed invocation's names it, a missing function, and a
    // query setting the route does not take.
    d.deploy("trap", example("trap.wat"), &[]).await;
    let (st, v) = send(d.post("/fn/admin/trap")).await;
    assert_eq!(st, 500, "{v}");
    fits("post", "/fn/{tenant}/{name}", st, &v);
    assert!(v["invocation_id"].is_string(), "{v}");
    let (st, v) = send(d.get("/v1/functions/nope")).await;
    assert_eq!(st, 404);
    fits("get", "/v1/functions/{name}", st, &v);
    let (st, v) = send(d.get("/v1/functions/log/logs?limt=5")).await;
    assert_eq!(st, 400);
    fits("get", "/v1/functions/{name}/logs", st, &v);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown field `limt`") && message.contains("`limit`"),
        "{message}"
    );
}

/// A version's prepared code is dropped after the keep-alive unused, in the
/// wasm and the process tier: the node stops reporting it as loaded (what
/// a gateway places by), and its next invocation is a cold start again.
#[tokio::test]
async fn prepared_code_idle_past_the_keep_alive_is_dropped() {
    require!(Python);
    let d = Daemon::start_with(&["--keep-alive-s", "1"]);
    d.deploy("idle", example("hello.wat"), &[]).await;
    d.deploy(
        "idle-py",
        b"def handler(event, context):\n    return 'py ok'\n".to_vec(),
        &[("runtime", "python"), ("file_name", "handler.py")],
    )
    .await;
    let start = |r: &reqwest::Response| {
        r.headers()
            .get("hearth-start")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let loaded = |name: &'static str| {
        let d = &d;
        async move {
            let status = d.get_json("/v1/status").await;
            status["loaded"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p[0] == "admin" && p[1] == name)
        }
    };
    for (name, answer) in [("idle", "hello from wasm\n"), ("idle-py", "py ok")] {
        assert_eq!(start(&d.invoke(name, b"").await), "cold", "{name}");
        assert_eq!(start(&d.invoke(name, b"").await), "warm", "{name}");
        assert!(loaded(name).await, "{name}: prepared once invoked");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while loaded(name).await {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: still loaded 15 s after a 1 s keep-alive"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let r = d.invoke(name, b"").await;
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(start(&r), "cold", "{name}: prepared again");
        assert_eq!(r.text().await.unwrap(), answer);
    }
}

/// `hearth kv`'s API: seed a function's KV before its first request, read
/// what it wrote, list and remove keys, with the limits its own calls have.
#[tokio::test]
async fn a_functions_kv_is_seeded_and_inspected_from_outside() {
    require!(Python);
    let d = Daemon::start_with(&["--max-kv-mib-per-tenant", "1"]);
    let code = "import hearth\ndef handler(e, c):\n    g = hearth.kv.get('greet ing/1')\n    hearth.kv.set('seen', b'\\xffyes')\n    return {'greeting': g.decode() if g else None}\n";
    d.deploy("kvfn", code.as_bytes().to_vec(), &[("runtime", "python")])
        .await;
    let put = |name: &str, key: &str, value: Vec<u8>| {
        d.http
            .put(format!("{}/v1/functions/{name}/kv/{key}", d.url))
            .bearer_auth(&d.token)
            .body(value)
            .send()
    };
    // Seeded from outside (a key with a space and a slash, percent-encoded).
    let seeded = put("kvfn", "greet%20ing%2F1", b"hello".to_vec());
    assert_eq!(seeded.await.unwrap().status(), 204);
    let (status, body) = d.call("kvfn", "", "{}").await;
    assert_eq!((status, body.as_str()), (200, r#"{"greeting": "hello"}"#));
    // What the function wrote, byte for byte.
    let got = d.get("/v1/functions/kvfn/kv/seen").send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"\xffyes");
    let list = d.get_json("/v1/functions/kvfn/kv?prefix=greet").await;
    assert_eq!(list["keys"], serde_json::json!(["greet ing/1"]), "{list}");
    let all = d.get_json("/v1/functions/kvfn/kv").await;
    assert_eq!(all["keys"].as_array().unwrap().len(), 2, "{all}");
    // Removed, then missing.
    let rm = d.delete("/v1/functions/kvfn/kv/seen").send().await.unwrap();
    assert_eq!(rm.status(), 204);
    let (status, kind, _) =
        error_of(d.get("/v1/functions/kvfn/kv/seen").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (404, "not_found"));
    // The limits a function's own kv.set has.
    let long_key = "k".repeat(2000);
    let (status, _, msg) = error_of(put("kvfn", &long_key, b"x".to_vec()).await.unwrap()).await;
    assert_eq!(status, 400, "{msg}");
    let big = vec![0u8; (1 << 20) + 1];
    let (status, _, msg) = error_of(put("kvfn", "big", big).await.unwrap()).await;
    assert_eq!(status, 413, "{msg}");
    let fill = |i: usize| put("kvfn", &format!("fill{i}"), vec![0u8; 400 << 10]);
    assert_eq!(fill(1).await.unwrap().status(), 204);
    assert_eq!(fill(2).await.unwrap().status(), 204);
    let (status, kind, msg) = error_of(fill(3).await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (507, "kv_quota_exceeded"), "{msg}");
    // A function that does not exist has no KV to write into.
    let (status, _, _) = error_of(put("nosuch", "k", b"x".to_vec()).await.unwrap()).await;
    assert_eq!(status, 404);
}
