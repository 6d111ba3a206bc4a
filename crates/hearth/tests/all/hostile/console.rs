//! A tenant's function answers and logs markup meant to run in the console
//! of whoever opens its invocation (the operator, say): it is shown as text,
//! and the page's Content-Security-Policy would refuse it as script anyway.

use crate::browser::Browser;
use crate::harness::Daemon;

const PAYLOAD: &str =
    r#"<img src=x onerror="window.__pwned='img'"><script>window.__pwned='script'</script>"#;

#[tokio::test]
async fn markup_in_a_response_or_log_is_shown_as_text_and_never_runs() {
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
    // Give an injected image time to fail and its handler to run.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let pwned = b
        .client
        .execute(
            "return window.__pwned === undefined ? null : window.__pwned;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(pwned, serde_json::Value::Null, "the tenant's markup ran");
    let injected = b
        .client
        .find_all(fantoccini::Locator::Css("main img, main script"))
        .await
        .unwrap();
    assert!(injected.is_empty(), "the tenant's markup became elements");
    b.close().await;
}
