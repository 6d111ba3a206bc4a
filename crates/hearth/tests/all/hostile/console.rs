//! A tenant's function answers and logs markup meant to run in the console
//! of whoever opens its invocation (the operator, say): it is shown as text,
//! and the page's Content-Security-Policy would refuse it as script anyway.

use crate::browser::Browser;
use crate::harness::{Daemon, error_of};
use hearth_test_support::require;

const PAYLOAD: &str =
    r#"<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script>"#;

#[tokio::test]
async fn markup_in_a_response_or_log_is_shown_as_text_and_never_runs() {
    require!(Chromium);
    let d = Daemon::start();
    let code = format!(
        "exports.handler = async () => {{ console.log({p:?}); return new Response({p:?}, {{ headers: {{ 'content-type': 'text/html' }} }}); }};",
        p = PAYLOAD
    );
    d.deploy(
        "xss",
        code.into_bytes(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    let resp = d.post("/fn/admin/xss").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    d.recording_when_written(&id).await;

    // The console's files forbid inline script, whatever reaches them.
    let page = d
        .http
        .get(format!("{}/console/", d.url))
        .send()
        .await
        .unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );

    let b = Browser::start().await;
    b.log_in(&d.url, &d.token).await;
    b.client
        .goto(&format!("{}/console/#/invocation/{id}", d.url))
        .await
        .unwrap();
    b.wait_for_text("#logs", "onerror").await;
    let body = b
        .wait_for("#outcome + table + pre")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(body, PAYLOAD, "the response body, as text");
    // The markup did not become elements anywhere on the page: without
    // an image element there is no `onerror` that could still run, so
    // nothing needs waiting for.
    let injected = b
        .client
        .find_all(fantoccini::Locator::Css(r#"img[src="x"], main script"#))
        .await
        .unwrap();
    // And nothing of it ran already.
    let pwned = b
        .client
        .execute(
            "return window.__pwned === undefined ? null : window.__pwned;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(pwned, serde_json::Value::Null, "the tenant's markup ran");
    assert!(injected.is_empty(), "the tenant's markup became elements");
    b.close().await;
}

/// The trace bench's report is the operator's, and its directory gives
/// out two files by name and nothing else: not to a tenant, not by a path
/// that climbs out, not a file that is not a chart.
#[tokio::test]
async fn the_trace_report_is_the_operators_and_only_its_two_charts_are_served() {
    let root = tempfile::tempdir().unwrap();
    let report = root.path().join("report");
    std::fs::create_dir(&report).unwrap();
    let chart = r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>"#;
    std::fs::write(report.join("summary.svg"), chart).unwrap();
    std::fs::write(report.join("summary.csv"), "mode,pool\n").unwrap();
    std::fs::write(root.path().join("secret.svg"), chart).unwrap();
    let d = Daemon::start_with(&["--trace-report", report.to_str().unwrap()]);
    let get = |token: String, path: &str| {
        d.http
            .get(format!("{}/v1/cluster/trace-report/{path}", d.url))
            .bearer_auth(token)
            .send()
    };

    let resp = get(d.token.clone(), "summary.svg").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "image/svg+xml");
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert_eq!(resp.text().await.unwrap(), chart);

    let tenant = d.create_tenant("curious").await;
    let (status, _, message) = error_of(get(tenant, "summary.svg").await.unwrap()).await;
    assert_eq!(status, 403, "{message}");

    // (`%2E%2E/` is resolved by the client, and misses the route.)
    for path in [
        "summary.csv",
        "..%2Fsecret.svg",
        "%2E%2E/secret.svg",
        "..%2F..%2Fetc%2Fpasswd",
    ] {
        let (status, _, message) = error_of(get(d.token.clone(), path).await.unwrap()).await;
        assert_eq!(status, 404, "{path}: {message}");
        assert!(
            message.contains("summary.svg and memory.svg") || message.contains("no such route"),
            "{path}: {message}"
        );
    }

    // A chart not drawn yet, and one too large to be a chart: each says so.
    let (status, _, message) = error_of(get(d.token.clone(), "memory.svg").await.unwrap()).await;
    assert_eq!(status, 404, "{message}");
    assert!(message.contains("hearth-bench trace --out"), "{message}");
    std::fs::write(report.join("memory.svg"), vec![b' '; 9 << 20]).unwrap();
    let (status, _, message) = error_of(get(d.token.clone(), "memory.svg").await.unwrap()).await;
    assert_eq!(status, 500, "{message}");
    assert!(message.contains("not a chart"), "{message}");

    // Without the setting, the page is told what to set.
    let plain = Daemon::start();
    let resp = plain
        .get("/v1/cluster/trace-report/summary.svg")
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(resp).await;
    assert_eq!(status, 404, "{message}");
    assert!(message.contains("--trace-report"), "{message}");
}
