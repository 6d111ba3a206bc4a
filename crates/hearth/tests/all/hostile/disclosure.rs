//! What a caller without the right token learns: nothing about another
//! tenant's functions, versions or use of the node.

use crate::harness::{Daemon, error_of};
use hearth_test_support::require;

#[tokio::test]
async fn a_private_function_answers_like_a_missing_one_to_outsiders() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    // The example `counter` is admin's, private, with one version; `ghost`
    // does not exist, nor does `counter@99`.
    let anon = |path: &str| d.http.post(format!("{}{path}", d.url)).send();
    let as_acme = |path: &str| {
        d.http
            .post(format!("{}{path}", d.url))
            .bearer_auth(&acme)
            .send()
    };
    let as_forged = |path: &str| {
        d.http
            .post(format!("{}{path}", d.url))
            .bearer_auth("hth_forged")
            .send()
    };
    let strip = |m: String, name: &str| m.replace(name, "NAME");
    for caller in 0..3 {
        let mut answers = Vec::new();
        for (path, name) in [
            ("/fn/admin/counter", "admin/counter"),
            ("/fn/admin/ghost", "admin/ghost"),
            ("/fn/admin/counter@1", "admin/counter@1"),
            ("/fn/admin/counter@99", "admin/counter@99"),
        ] {
            let r = match caller {
                0 => anon(path).await,
                1 => as_acme(path).await,
                _ => as_forged(path).await,
            }
            .unwrap();
            let (status, kind, message) = error_of(r).await;
            answers.push((status, kind, strip(message, name)));
        }
        assert_eq!(answers[0].0, 404, "caller {caller}: {answers:?}");
        assert!(
            answers.iter().all(|a| a == &answers[0]),
            "caller {caller} can tell them apart: {answers:?}"
        );
    }
    // The tenant itself is told which it was.
    let (_, _, message) = error_of(d.invoke("counter@99", b"").await).await;
    assert!(message.contains("version 99"), "{message}");
    assert_eq!(d.invoke("counter@1", b"").await.status(), 200);
}

#[tokio::test]
async fn metrics_need_an_admin_token_and_name_no_function_by_default() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let js = "exports.handler = async () => { require('fs'); return 'x'; };";
    d.deploy(
        "secret-project",
        js.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    // A fallback to the process tier: the one series that would name it.
    assert_eq!(d.invoke("secret-project", b"").await.status(), 200);

    let anon = d.http.get(format!("{}/metrics", d.url)).send().await;
    assert_eq!(anon.unwrap().status(), 401);
    let member = d
        .http
        .get(format!("{}/metrics", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert_eq!(member.status(), 403);
    let text = d.get_text("/metrics").await;
    assert!(text.contains("hearth_js_fallbacks_total 1"), "{text}");
    assert!(
        !text.contains("secret-project") && !text.contains("tenant="),
        "{text}"
    );
}

/// The KV API reaches only the token's tenant's functions: another
/// tenant's token, naming the same function, neither reads nor writes it
/// (its own function of that name has a KV of its own).
#[tokio::test]
async fn another_tenants_token_cannot_reach_a_functions_kv() {
    require!(Python);
    let d = Daemon::start();
    let code = "import hearth\ndef handler(e, c):\n    v = hearth.kv.get('secret')\n    return v.decode() if v else None\n";
    d.deploy("vault", code.as_bytes().to_vec(), &[("runtime", "python")])
        .await;
    let kv = format!("{}/v1/functions/vault/kv/secret", d.url);
    let put =
        |token: &str, value: &'static str| d.http.put(&kv).bearer_auth(token).body(value).send();
    assert_eq!(put(&d.token, "admin's").await.unwrap().status(), 204);
    let other = d.create_tenant("other").await;
    // The other tenant has no function `vault`: 404, for reads and writes.
    let read = d.http.get(&kv).bearer_auth(&other).send().await.unwrap();
    assert_eq!(read.status(), 404);
    assert_eq!(put(&other, "overwritten").await.unwrap().status(), 404);
    let list = d
        .http
        .get(format!("{}/v1/functions/vault/kv", d.url))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 404);
    // Its own `vault` has its own KV.
    let r = d
        .deploy_as(
            &other,
            "vault",
            &[("runtime", "python")],
            code.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(put(&other, "other's").await.unwrap().status(), 204);
    assert_eq!(d.call("vault", "", "{}").await, (200, "admin's".into()));
    let theirs = d
        .invoke_as(&other, "other", "vault")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(theirs, "other's");
}

/// `/v1/status` tells a tenant about its own use only: what the node holds
/// and ran for everyone (prepared functions, warm pools, invocations by
/// mode) is the operator's.
#[tokio::test]
async fn a_tenants_status_says_nothing_of_what_the_node_ran_for_others() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    assert_eq!(d.call("hello", "", "").await.0, 200);
    let admin = d.get_json("/v1/status").await;
    assert_eq!(admin["ran"]["wasm"], 1, "{admin}");
    assert!(admin["loaded"].as_array().is_some(), "{admin}");
    let status = d.get_json_as(&acme, "/v1/status").await;
    for key in ["ran", "loaded", "pool_free"] {
        assert!(status.get(key).is_none(), "{key} in {status}");
    }
    assert_eq!(status["tenant"]["name"], "acme");
}

/// The same 404 in the same time: a private function the node holds in
/// memory used to be refused from there (57 µs), a missing one after a
/// store query (82 µs), so timing told them apart. Now both cost the table,
/// one store query and the token check. Measured as the median of the
/// ratio within pairs of back-to-back probes (each pair a fresh missing
/// name, as an attacker would probe), which drift on a busy machine
/// cancels out of.
#[tokio::test]
async fn a_private_function_takes_as_long_to_refuse_as_a_missing_one() {
    use std::time::Instant;
    let d = Daemon::start();
    // admin's private `counter`, held by the node once invoked.
    assert_eq!(d.invoke("counter", b"").await.status(), 200);
    let probe = |path: String| {
        let http = d.http.clone();
        let url = format!("{}{path}", d.url);
        async move {
            let t = Instant::now();
            let r = http.post(url).send().await.unwrap();
            assert_eq!(r.status(), 404);
            let _ = r.bytes().await;
            t.elapsed().as_secs_f64()
        }
    };
    for i in 0..50 {
        probe("/fn/admin/counter".into()).await;
        probe(format!("/fn/admin/warm{i}")).await;
    }
    // Three rounds, and the median of their medians: an oracle shows in
    // every round, a neighbour test's burst of load in one (a suite run
    // once measured 0.83 where runs alone give 0.99-1.03).
    let mut medians = Vec::new();
    for round in 0..3 {
        let mut ratios = Vec::new();
        for i in 0..400 {
            let ghost = format!("/fn/admin/ghost{round}-{i}");
            let (held, missing) = if i % 2 == 0 {
                let h = probe("/fn/admin/counter".into()).await;
                (h, probe(ghost).await)
            } else {
                let m = probe(ghost).await;
                (probe("/fn/admin/counter".into()).await, m)
            };
            ratios.push(held / missing);
        }
        ratios.sort_by(f64::total_cmp);
        medians.push(ratios[ratios.len() / 2]);
    }
    medians.sort_by(f64::total_cmp);
    let median = medians[1];
    eprintln!("held / missing, medians of 400 pairs in three rounds: {medians:.3?}");
    assert!(
        (0.85..1.18).contains(&median),
        "a private function's 404 takes {median:.2}× a missing one's: timing tells them apart"
    );
}

/// A Python package's traceback named the node's data directory (packages
/// are imported from install caches under it before a handler enters its
/// sandbox, so their files keep host paths): the error a caller gets and
/// the lines in the function's logs show it as `/hearth`.
#[tokio::test]
async fn a_package_traceback_shows_no_host_path() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    crate::process::write_wheel_of(
        wheels.path(),
        "leaky",
        "1.0",
        "def boom():\n    raise ValueError('from ' + __file__)\n",
    );
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let code = "import leaky\ndef handler(e, c):\n    leaky.boom()\n";
    let bundle =
        crate::harness::tar_of(&[("handler.py", code), ("requirements.txt", "leaky==1.0\n")]);
    d.deploy(
        "leak",
        bundle,
        &[("runtime", "python"), ("file_name", "fn.tar")],
    )
    .await;
    let (status, body) = d.call("leak", "", "{}").await;
    assert_eq!(status, 500, "{body}");
    let data = std::fs::canonicalize(&d.dir).unwrap();
    let data = data.to_str().unwrap();
    assert!(body.contains("ValueError: from /hearth/"), "{body}");
    assert!(!body.contains(data), "{body}");
    let logs = d.get_json("/v1/functions/leak/logs").await.to_string();
    assert!(
        logs.contains("leaky/__init__.py"),
        "the traceback is there: {logs}"
    );
    assert!(!logs.contains(data), "{logs}");
}
