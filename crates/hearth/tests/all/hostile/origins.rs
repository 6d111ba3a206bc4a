//! A tenant's public page, opened once by an operator logged in to the
//! console, tries to take the operator's credential: read it from the
//! page's storage and cookies, use the browser's cookie to call the API,
//! and plant a service worker over the console's origin that would hand
//! later requests to the tenant. Served under `/fn` on the console's
//! origin the page is sandboxed (an opaque origin of its own); on its
//! tenant's origin it is another site. Nothing leaves either way.

use crate::browser::Browser;
use crate::harness::Daemon;
use hearth_test_support::require;

/// The attack, as a page: every attempt's result is written into `#out`.
const PAGE: &str = r#"
export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname.endsWith("/sw.js")) {
      return new Response("self.addEventListener('fetch', () => {});", {
        headers: { "content-type": "text/javascript", "service-worker-allowed": "/" },
      });
    }
    if (url.searchParams.has("echo")) {
      return Response.json({ cookie: request.headers.get("cookie"), csrf: request.headers.get("hearth-csrf") });
    }
    const console_ = url.searchParams.get("console");
    const html = `<!doctype html><p id="out">running</p><script>
(async () => {
  const r = {};
  const console_ = ${JSON.stringify(console_)};
  try { r.cookie = document.cookie; } catch (e) { r.cookie = "denied " + e.name; }
  try { r.storage = JSON.stringify(Object.entries(sessionStorage)) + JSON.stringify(Object.entries(localStorage)); }
  catch (e) { r.storage = "denied " + e.name; }
  try { await navigator.serviceWorker.register("sw.js", { scope: "/" }); r.sw = "registered"; }
  catch (e) { r.sw = "refused " + e.name; }
  for (const [key, path, init] of [
    ["create", "/v1/tenants", { method: "POST", headers: { "content-type": "application/json" }, body: '{"name":"stolen"}' }],
    ["session", "/v1/session", {}],
    ["whoami", "/v1/whoami", {}],
  ]) {
    try {
      const x = await fetch(console_ + path, { credentials: "include", ...init });
      r[key] = x.status + " " + (await x.text());
    } catch (e) { r[key] = "failed " + e.name; }
  }
  document.getElementById("out").textContent = JSON.stringify(r);
})();
</script>`;
    return new Response(html, { headers: { "content-type": "text/html", "set-cookie": "planted=1; Path=/; Domain=localhost" } });
  },
};
"#;

#[tokio::test]
async fn a_tenants_page_opened_by_a_logged_in_operator_takes_nothing() {
    require!(Chromium);
    let d = Daemon::start();
    let evil = d.create_tenant("evil").await;
    let resp = d
        .deploy_as(
            &evil,
            "page",
            &[
                ("runtime", "js"),
                ("file_name", "index.mjs"),
                ("public", "true"),
            ],
            PAGE,
        )
        .await;
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let port = d.url.rsplit(':').next().unwrap();

    let b = Browser::start().await;
    b.log_in(&d.url, &d.token).await;

    // On the console's origin, and on the tenant's own.
    for at in [
        format!("{}/fn/evil/page", d.url),
        format!("http://evil.localhost:{port}/page/"),
    ] {
        b.client
            .goto(&format!("{at}?console={}", d.url))
            .await
            .unwrap();
        let out: String = b
            .wait_for_js(
                &format!("the page at {at} ran"),
                "const o = document.getElementById('out'); return o ? o.textContent : '';",
                |s: &String| s.starts_with('{'),
            )
            .await;
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        let all = out.clone();
        assert!(
            !all.contains(&d.token),
            "{at}: the token reached the page: {all}"
        );
        assert!(
            !all.contains("csrf"),
            "{at}: the CSRF value reached the page: {all}"
        );
        let cookie = r["cookie"].as_str().unwrap();
        assert!(
            !cookie.contains("hearth-session"),
            "{at}: the session cookie is readable: {cookie}"
        );
        assert!(
            r["sw"].as_str().unwrap().starts_with("refused"),
            "{at}: {all}"
        );
        for key in ["create", "session", "whoami"] {
            let v = r[key].as_str().unwrap();
            assert!(
                v.starts_with("failed") || v.starts_with("401"),
                "{at}: {key} went through: {v}"
            );
        }
    }

    // Back on the console: no worker of the tenant's, the session intact,
    // and no tenant was created.
    b.client
        .goto(&format!("{}/console/#/functions", d.url))
        .await
        .unwrap();
    b.wait_for("#logout").await;
    let registered = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             navigator.serviceWorker.getRegistrations().then((r) => done(r.length));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        registered, 0,
        "a service worker covers the console's origin"
    );
    let stolen = d.get("/v1/tenants/stolen").send().await.unwrap();
    assert_eq!(stolen.status(), 404, "the page created a tenant");
    b.close().await;

    // The function itself sees neither the cookie nor the CSRF header, and
    // its own cookie is held to its host (or dropped on the console's).
    let resp = d
        .http
        .get(format!("{}/fn/evil/page?echo", d.url))
        .header(
            "cookie",
            format!("__Host-hearth-session={}; theirs=1", d.token),
        )
        .header("hearth-csrf", "x")
        .send()
        .await
        .unwrap();
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("sandbox allow-scripts"), "{csp}");
    let seen: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(seen["cookie"], "theirs=1");
    assert_eq!(seen["csrf"], serde_json::Value::Null);
    for (at, host) in [
        (format!("{}/fn/evil/page", d.url), None),
        (d.url.clone(), Some(format!("evil.localhost:{port}"))),
    ] {
        let mut req = d.http.get(if host.is_some() {
            format!("{at}/page")
        } else {
            at.clone()
        });
        if let Some(h) = &host {
            req = req.header("host", h);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "{at} {host:?}");
        assert!(resp.headers().get("service-worker-allowed").is_none());
        let cookies: Vec<_> = resp.headers().get_all("set-cookie").iter().collect();
        match host {
            None => assert!(cookies.is_empty(), "{cookies:?}"),
            Some(_) => assert_eq!(cookies, ["planted=1; Path=/"]),
        }
    }
}
