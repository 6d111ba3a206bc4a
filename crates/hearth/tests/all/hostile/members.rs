//! A cluster's members as an outsider on their network meets them: a
//! process that reaches a node's port (another workload in the same
//! Kubernetes cluster, a gateway of another cluster on the same store)
//! must not have it run anything, nor read what members send each other.

use hearth_test_support::require;
use std::path::Path;

use hearth_test_support::TempPostgres;

use crate::cluster::{SECRETS, alive, gateway, gateway_with, member_certs, members_until, node};
use crate::harness::{Daemon, error_of};

/// A gateway whose key is not the nodes' cannot have them run its
/// invocations: its signed attempts are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_with_another_cluster_key_is_refused_by_the_nodes() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("keys").unwrap();
    let gw = gateway(&store);
    let _node = node(&gw, &store, &[]);
    let args = [
        "--role",
        "gateway",
        "--store",
        &store,
        "--heartbeat-ms",
        "200",
    ];
    let rogue = Daemon::start_with_env(
        &args,
        &[("HEARTH_CLUSTER_KEY", "not-the-cluster-key"), SECRETS[1]],
    );
    members_until(&rogue, "the rogue sees the node", |m| alive(m) == 1).await;
    let (status, _, message) = error_of(rogue.invoke("hello", b"").await).await;
    assert_eq!(status, 403, "{message}");
    assert_eq!(gw.invoke("hello", b"").await.status(), 200);
}

/// A client trusting the cluster's CA in `cluster` for the name
/// `hearth-member`, whatever the address (as a gateway connects),
/// presenting the member certificate in `identity` (none: `None`).
fn member_client(cluster: &Path, identity: Option<&Path>) -> reqwest::Client {
    let ca =
        reqwest::Certificate::from_pem(&std::fs::read(cluster.join("ca.crt")).unwrap()).unwrap();
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca)
        .tls_built_in_root_certs(false)
        .resolve("hearth-member", "127.0.0.1:0".parse().unwrap());
    if let Some(dir) = identity {
        let mut pem = std::fs::read(dir.join("tls.crt")).unwrap();
        pem.extend(std::fs::read(dir.join("tls.key")).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

/// With the cluster's certificates, nodes serve only HTTPS to clients the
/// cluster's CA signed, gateways forward to them over it, and the probes
/// answer on a plain port of their own.
#[tokio::test(flavor = "multi_thread")]
async fn gateways_reach_nodes_only_over_mutual_tls() {
    require!(Postgres);
    let certs = tempfile::tempdir().unwrap();
    let rogue_certs = tempfile::tempdir().unwrap();
    member_certs(certs.path());
    member_certs(rogue_certs.path());
    let path = |f: &str| certs.path().join(f).to_str().unwrap().to_string();
    let (cert, key, ca) = (path("tls.crt"), path("tls.key"), path("ca.crt"));
    let tls = ["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &ca];
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("tls").unwrap();
    let gw = gateway_with(&store, &tls);
    let probe_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let probes = format!("127.0.0.1:{probe_port}");
    let mut args = tls.to_vec();
    args.extend(["--probe-listen", &probes]);
    let node = node(&gw, &store, &args);
    assert!(node.url.starts_with("https://"), "{}", node.url);
    members_until(&gw, "the node joins", |m| alive(m) == 1).await;

    // The gateway forwards over mutual TLS.
    let r = gw.invoke("hello", b"").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello from wasm\n");

    // A member's certificate gets through to the node; no certificate, a
    // certificate another CA signed, or plain HTTP do not.
    let port = node.url.rsplit(':').next().unwrap();
    let at = format!("https://hearth-member:{port}/fn/admin/hello@1");
    let ok = member_client(certs.path(), Some(certs.path()))
        .get(&at)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let none = member_client(certs.path(), None).get(&at).send().await;
    assert!(none.is_err(), "no client certificate: {none:?}");
    let rogue = member_client(certs.path(), Some(rogue_certs.path()))
        .get(&at)
        .send()
        .await;
    assert!(rogue.is_err(), "another CA's certificate: {rogue:?}");
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await;
    assert!(
        plain.map(|r| r.status() != 200).unwrap_or(true),
        "plain HTTP reached the node"
    );

    // The probes answer plain HTTP on their own port, and nothing else.
    let ready = reqwest::get(format!("http://{probes}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let other = reqwest::get(format!("http://{probes}/fn/admin/hello"))
        .await
        .unwrap();
    assert_eq!(other.status(), 404);

    // A gateway without the certificates cannot have the node run anything.
    let bare = gateway(&store);
    members_until(&bare, "the bare gateway sees the node", |m| alive(m) == 1).await;
    let r = bare.invoke("hello", b"").await;
    assert_ne!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// Code that escaped into a node holds the node's store credential. With
/// the role a gateway grants nodes (`--store-node-role`), that credential
/// runs functions (code by hash, KV, logs, secrets, the members' rows,
/// private functions' callers checked against the tokens' hashes) but
/// mints, changes or revokes no token and rewrites no one's code or
/// registry. With the gateways' role every one of these goes through.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_store_role_runs_functions_but_writes_no_token_code_or_registry() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("roles").unwrap();
    pg.execute_as("roles", "hearth", "CREATE ROLE hearth_node LOGIN")
        .unwrap();
    let gw = gateway_with(&store, &["--store-node-role", "hearth_node"]);
    let node_store = store.replace("postgres://hearth@", "postgres://hearth_node@");
    assert_ne!(node_store, store);
    let _node = node(&gw, &node_store, &[]);
    members_until(&gw, "the node joins on its own role", |m| alive(m) == 1).await;
    let put = gw
        .http
        .put(format!("{}/v1/secrets/API_KEY", gw.url))
        .bearer_auth(&gw.token)
        .body("s3")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    // A private function: the node checks its caller's token.
    gw.deploy(
        "uses",
        br#"export default { async fetch(req, env) {
              const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
              await hearth.kv.set("n", String(n));
              console.log("call", n);
              return new Response(env.API_KEY + " " + n);
            } };"#
            .to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("secret", "API_KEY"),
        ],
    )
    .await;
    assert_eq!(gw.invoke_body("uses", String::new()).await, "s3 1");
    assert_eq!(gw.invoke_body("uses", String::new()).await, "s3 2");
    // What the escaped code would try with the node's credential.
    for (what, sql) in [
        (
            "mint itself an admin token",
            "INSERT INTO access_tokens SELECT * FROM access_tokens",
        ),
        (
            "make every token an admin's",
            "UPDATE access_tokens SET tenant = 'admin'",
        ),
        ("revoke the tokens", "DELETE FROM access_tokens"),
        (
            "rewrite a version's code",
            "UPDATE versions SET artifact = artifact",
        ),
        (
            "make a function",
            "INSERT INTO functions (tenant, name) VALUES ('admin', 'evil')",
        ),
        ("remove a tenant", "DELETE FROM tenants"),
        ("change a secret", "DELETE FROM secrets"),
        ("change the schema", "CREATE TABLE evil (x int)"),
    ] {
        let refused = pg.execute_as("roles", "hearth_node", sql).expect_err(what);
        assert!(refused.contains("permission denied"), "{what}: {refused}");
    }
    // What a node does write, it may.
    pg.execute_as("roles", "hearth_node", "UPDATE kv SET value = value")
        .unwrap();
}
