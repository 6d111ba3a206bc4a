//! Outbound HTTP through the host, under each function's allow-list.

use crate::harness::{Daemon, example};

/// A one-route HTTP server on loopback that answers "from upstream".
pub(crate) async fn upstream() -> std::net::SocketAddr {
    upstream_on("127.0.0.1").await
}

/// The same on `ip`.
pub(crate) async fn upstream_on(ip: &str) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/data", axum::routing::get(|| async { "from upstream" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn fetch_reaches_allowed_hosts_only() {
    // The upstream is on loopback, which only an operator's flag opens.
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let addr = upstream().await;
    let allowed = addr.to_string();
    d.deploy("fetch", example("fetch.wat"), &[("allow_host", &allowed)])
        .await;
    d.deploy("nofetch", example("fetch.wat"), &[]).await;
    let url = format!("http://{addr}/data");

    let resp = d
        .post("/fn/admin/fetch")
        .body(url.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "from upstream");

    let resp = d
        .post("/fn/admin/nofetch")
        .body(url.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "denied");
    let lines = d.logs_until("nofetch", |l| !l.is_empty()).await;
    assert!(
        lines
            .iter()
            .any(|l| l["message"].as_str().unwrap().contains("not allowed")),
        "the function's log says why: {lines:?}"
    );
    // Same host, another port: still denied.
    let other = format!("http://127.0.0.1:{}/data", addr.port().wrapping_add(1));
    let resp = d.post("/fn/admin/fetch").body(other).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "denied");
}
