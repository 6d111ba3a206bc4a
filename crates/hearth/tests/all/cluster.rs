//! A real cluster on loopback: PostgreSQL from Debian's packages, a
//! gateway and three nodes, each a `hearth up` process.

use hearth_test_support::require;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use hearth_test_support::TempPostgres;

use crate::harness::{Daemon, error_of};

/// Spins ~0.2 s, then prints "done".
pub(crate) const SLOW: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "done\n")
  (func (export "_start") (local $i i64)
    (loop $l
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $l (i64.lt_u (local.get $i) (i64.const 150000000))))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 5))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// The fetch example, spinning ~0.2 s between its outbound call and its
/// answer.
fn fetch_then_spin() -> Vec<u8> {
    let wat = String::from_utf8(crate::harness::example("fetch.wat")).unwrap();
    let spin = "(loop $spin
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $spin (i64.lt_u (local.get $i) (i64.const 150000000))))
    (if (i32.eq (local.get $status) (i32.const -1))";
    let out = wat
        .replacen(
            "(local $status i32) (local $len i32)",
            "(local $status i32) (local $len i32) (local $i i64)",
            1,
        )
        .replacen("(if (i32.eq (local.get $status) (i32.const -1))", spin, 1);
    assert_ne!(out, wat, "fetch.wat changed shape");
    out.into_bytes()
}

/// An HTTP server on loopback answering `GET /hit/{i}` with `hit {i}`,
/// and how many times it saw each `i`.
pub(crate) async fn counting_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u32>>>,
) {
    use axum::extract::{Path, State};
    type Hits = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u32>>>;
    let hits = Hits::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route(
            "/hit/{i}",
            axum::routing::get(
                |State(hits): State<Hits>, Path(i): Path<String>| async move {
                    *hits.lock().unwrap().entry(i.clone()).or_default() += 1;
                    format!("hit {i}")
                },
            ),
        )
        .with_state(hits.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, hits)
}

/// The secrets every member of a test cluster shares, as a Kubernetes
/// Secret would give them.
pub(crate) const SECRETS: [(&str, &str); 2] = [
    ("HEARTH_CLUSTER_KEY", "a-cluster-key-for-tests"),
    ("HEARTH_ADMIN_TOKEN", "hth_an_admin_token_for_tests"),
];

/// A gateway on `store` with 200 ms heartbeats (a node is out after 600 ms)
/// and `full` as the cluster's colocation mode (nodes default to `tenant`).
/// Gateway and nodes let functions reach this machine: the tests' upstream
/// servers are on loopback.
pub(crate) fn gateway(store: &str) -> Daemon {
    gateway_with(store, &[])
}

pub(crate) fn gateway_with(store: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--allow-private-egress",
        "true",
        "--role",
        "gateway",
        "--store",
        store,
        "--colocation",
        "full",
    ];
    if !extra.contains(&"--heartbeat-ms") {
        args.extend_from_slice(&["--heartbeat-ms", "200"]);
    }
    args.extend_from_slice(extra);
    Daemon::start_with_env(&args, &SECRETS)
}

/// A node of `gateway`'s cluster: it finds the gateways through `store`;
/// their address is only for the answer to a deploy sent to it.
pub(crate) fn node(gateway: &Daemon, store: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--role",
        "node",
        "--gateway",
        &gateway.url,
        "--store",
        store,
        "--allow-private-egress",
        "true",
    ];
    args.extend_from_slice(extra);
    Daemon::start_with_env(&args, &SECRETS)
}

async fn members(gw: &Daemon) -> Vec<serde_json::Value> {
    gw.get_json("/v1/cluster/nodes").await["nodes"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until `pred` holds of the gateway's node list.
pub(crate) async fn members_until(
    gw: &Daemon,
    what: &str,
    pred: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = members(gw).await;
        if pred(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: {m:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn alive(m: &[serde_json::Value]) -> usize {
    m.iter().filter(|n| n["alive"] == true).count()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_places_on_nodes_and_survives_a_node_killed_under_load() {
    require!(Postgres, ComponentTools);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("cluster").unwrap();
    // Sixteen spinning calls on three nodes sharing two cores starve the
    // nodes' heartbeats: at 200 ms (out after 600 ms) the gateway could
    // take the node to be killed out before the load reached it. At 1 s
    // the killed node is still out within 3 s.
    let gw = gateway_with(&store, &["--heartbeat-ms", "1000"]);

    // No node yet: nothing can run, and the caller is told so.
    let (status, _, message) = error_of(gw.invoke("hello", b"").await).await;
    assert_eq!(status, 503, "{message}");
    assert!(message.contains("no node is available"), "{message}");

    let mut nodes: Vec<Daemon> = (0..3).map(|_| node(&gw, &store, &[])).collect();
    members_until(&gw, "three nodes join", |m| alive(m) == 3).await;
    // The cluster has one default colocation mode: the gateway's.
    for n in &nodes {
        assert_eq!(n.get_json("/v1/status").await["colocation"], "full");
    }

    // The bundled examples were deployed through the gateway; the nodes
    // fetch their code by hash from the store. Repeated calls stay on one
    // node.
    let mut placed = HashSet::new();
    for _ in 0..10 {
        let r = gw.invoke("hello", b"").await;
        assert_eq!(r.status(), 200);
        placed.insert(header(&r, "hearth-node"));
        assert_eq!(header(&r, "hearth-version"), "1");
        assert_eq!(r.text().await.unwrap(), "hello from wasm\n");
    }
    assert_eq!(placed.len(), 1, "hello ran on {placed:?}");
    // Each placement is counted under the placer's rule that made it: the
    // first call of hello went where nothing held it, later ones followed
    // it to its node (not all of them: a heartbeat that reports the node's
    // functions before hello is loaded there takes the gateway's guess
    // back, and that call goes to the least loaded node, the same one).
    let m = members(&gw).await;
    for n in &m {
        let by = |rule: &str| n["placed_by"][rule].as_u64().unwrap();
        let sum = by("function") + by("tenant") + by("least_loaded");
        assert_eq!(n["placed"].as_u64().unwrap(), sum, "{n}");
    }
    let hello_node = placed.iter().next().unwrap();
    let on = m.iter().find(|n| n["id"] == hello_node.as_str()).unwrap();
    let by_function = on["placed_by"]["function"].as_u64().unwrap();
    assert!(
        by_function >= 1 && by_function < on["placed"].as_u64().unwrap(),
        "{on}"
    );

    // Each node reports, in its heartbeats, what it ran by mode: hello's
    // ten calls in wasm on its node, and a js function's in the isolate
    // wherever it was placed.
    gw.deploy(
        "greet",
        b"exports.handler = async () => 'hi';".to_vec(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    let r = gw.invoke("greet", b"").await;
    assert_eq!(r.status(), 200);
    let greet_node = header(&r, "hearth-node");
    let ran = |n: &serde_json::Value, mode: &str| n["ran"][mode].as_u64().unwrap();
    let m = members_until(&gw, "heartbeats report what ran, by mode", |m| {
        m.iter()
            .any(|n| n["id"] == hello_node.as_str() && ran(n, "wasm") >= 10)
            && m.iter()
                .any(|n| n["id"] == greet_node.as_str() && ran(n, "isolate") == 1)
    })
    .await;
    for n in &m {
        assert_eq!((ran(n, "compiled"), ran(n, "process")), (0, 0), "{n}");
        if n["id"] != greet_node.as_str() {
            assert_eq!(ran(n, "isolate"), 0, "{n}");
        }
    }

    // A sub-path and query reach the function as sent.
    let r = gw
        .post("/fn/admin/echo/a%20b/c?x=1")
        .body("ping")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let echoed = r.text().await.unwrap();
    assert!(echoed.contains("ping"), "{echoed}");

    // A wasi:http component runs on a node as a module does: its code comes
    // from the store by hash, its wasi:keyvalue counter is in PostgreSQL.
    gw.deploy("probe", crate::components::component("probe"), &[])
        .await;
    for n in 1..=2 {
        assert_eq!(
            gw.call("probe/kv", "?hits", "").await,
            (200, format!("hits={n} last=hits\n"))
        );
    }

    // KV lives in PostgreSQL: the count continues across the gateway and
    // two nodes called directly.
    let mut counts = Vec::new();
    for d in [&gw, &nodes[0], &nodes[1]] {
        counts.push(d.invoke_body("counter", String::new()).await);
    }
    assert_eq!(counts, ["1\n", "2\n", "3\n"]);

    // A node the gateway never placed anything on reports, in its
    // heartbeats, the function it ran when called directly.
    let m = members(&gw).await;
    let untouched = [&nodes[0], &nodes[1]]
        .into_iter()
        .find(|d| {
            m.iter()
                .any(|n| n["url"] == d.url.as_str() && n["placed"] == 0)
        })
        .expect("the gateway placed everything on one node")
        .url
        .clone();
    members_until(&gw, "a heartbeat reports counter loaded", |m| {
        m.iter()
            .any(|n| n["url"] == untouched.as_str() && n["loaded"] == 1)
    })
    .await;
    let m = members(&gw).await;
    let view = m.iter().find(|n| n["url"] == untouched.as_str()).unwrap();
    assert_eq!(view["tenants"], 1, "{view}");
    let slots = view["pool_free"]["wasm_slots"].as_u64();
    assert!(
        slots.is_some_and(|n| n > 0 && n <= 1000),
        "the heartbeat reports free wasm pool slots: {view}"
    );

    // A tenant's colocation mode, set through the gateway, is what every
    // node reads (the cluster store holds it).
    let r = gw
        .http
        .put(format!("{}/v1/tenants/admin", gw.url))
        .bearer_auth(&gw.token)
        .json(&serde_json::json!({"colocation": "function"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let on_node = nodes[2].get_json("/v1/tenants/admin").await;
    assert_eq!(on_node["colocation_override"], "function", "{on_node}");

    // Code is deployed through the gateway only: a node has no way to
    // give it to the others.
    let (status, _, message) = error_of(
        nodes[0]
            .deploy_raw("elsewhere", crate::harness::example("hello.wat"), &[])
            .await,
    )
    .await;
    assert_eq!(status, 409, "{message}");
    assert!(message.contains(&gw.url), "{message}");

    // The code every node ran came from the store, one row per artifact;
    // cluster calls on a node that is not a gateway are not found.
    let artifacts = pg
        .count("cluster", "SELECT count(*) FROM artifacts")
        .unwrap();
    assert_eq!(
        artifacts, 5,
        "hello, echo, counter, greet and probe; not the refused one"
    );
    let r = nodes[0].get("/v1/cluster/nodes").send().await.unwrap();
    assert_eq!(r.status(), 404);

    // Kill the node running `effect` while it has invocations in flight,
    // each past its one outbound call: every call is answered, by a retry
    // on another node, and no call is made twice, because the retry gets
    // the first attempt's answer from the journal.
    let (upstream, hits) = counting_upstream().await;
    gw.deploy("slow", SLOW.as_bytes().to_vec(), &[]).await;
    gw.deploy(
        "effect",
        fetch_then_spin(),
        &[("allow_host", &upstream.to_string())],
    )
    .await;
    let r = gw
        .post("/fn/admin/effect")
        .body(format!("http://{upstream}/hit/warm"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let victim_id = header(&r, "hearth-node");
    let m = members(&gw).await;
    let victim_url = m.iter().find(|n| n["id"] == victim_id.as_str()).unwrap()["url"]
        .as_str()
        .unwrap()
        .to_string();
    let victim = nodes.iter().position(|d| d.url == victim_url).unwrap();
    // The warm-up call's journal is forgotten once it is answered (off the
    // answer's path): wait for that, so the count below is the load's.
    let journaled = || pg.count("cluster", "SELECT count(*) FROM journal").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while journaled() > 0 {
        assert!(
            Instant::now() < deadline,
            "the warm-up call's journal stayed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let load: Vec<_> = (0..16)
        .map(|i| {
            let req = gw
                .post("/fn/admin/effect")
                // Two digits: no call's URL is a prefix of another's.
                .body(format!("http://{upstream}/hit/{i:02}"));
            tokio::spawn(async move { (i, req.send().await.unwrap()) })
        })
        .collect();
    // Every call still running has made its outbound call and its node
    // has journaled the answer when the node dies. Checked call by call
    // (its URL is in its journal entry): an answered call's journal is
    // forgotten off the response's path, so a count of entries could
    // still include one that has finished and miss one not yet written.
    let journaled_call = |i: usize| {
        let sql = format!(
            "SELECT count(*) FROM journal WHERE position(convert_to('/hit/{i:02}', 'UTF8') IN event) > 0"
        );
        pg.count("cluster", &sql).unwrap() > 0
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all_hit = hits.lock().unwrap().len() == 17;
        if all_hit
            && load
                .iter()
                .enumerate()
                .all(|(i, c)| c.is_finished() || journaled_call(i))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the calls never got their answers journaled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nodes[victim].kill9();
    let mut retried = 0;
    let mut retried_ids = Vec::new();
    for call in load {
        let (i, r) = call.await.unwrap();
        let (status, from, node) = (
            r.status().as_u16(),
            header(&r, "hearth-retried-from"),
            header(&r, "hearth-node"),
        );
        let id = header(&r, "hearth-invocation-id");
        let body = r.text().await.unwrap();
        // Every call is answered: by the victim before it died, or by
        // another node on the one retry.
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, format!("hit {i:02}"));
        if !from.is_empty() {
            assert_eq!(from, victim_id);
            assert_ne!(node, victim_id);
            retried += 1;
            retried_ids.push(id);
        }
    }
    assert!(
        retried > 0,
        "no invocation was in flight on the killed node"
    );
    let hits = hits.lock().unwrap().clone();
    assert!(
        hits.values().all(|&n| n == 1),
        "a retry repeated an outbound call the first attempt made: {hits:?}"
    );
    // The retry says it was given the first attempt's answer.
    gw.logs_until("effect", |l| {
        l.iter().any(|x| {
            x["message"]
                .as_str()
                .is_some_and(|m| m.contains("1 answer(s) its first attempt got"))
        })
    })
    .await;

    // The gateway lists the recordings its nodes keep: each retried
    // invocation has one tape, under the id the caller was given, on the
    // node that answered; it shows, exports and replays from there.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let list = gw
            .get_json("/v1/functions/effect/recordings?limit=100")
            .await;
        let ids: Vec<String> = list["recordings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        if retried_ids.iter().all(|id| ids.contains(id)) {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "{list:#}\nwanted {retried_ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let tapes = listed["recordings"].as_array().unwrap();
    assert!(
        tapes.iter().all(|t| t["node"] != victim_id.as_str()),
        "{listed}"
    );
    let id = &retried_ids[0];
    let shown = gw
        .get(&format!("/v1/recordings/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), 200);
    assert!(!header(&shown, "hearth-node").is_empty());
    let timeline = shown.text().await.unwrap();
    assert!(timeline.contains("http.fetch"), "{timeline}");
    let replayed = gw.replay(id).await;
    assert_eq!(replayed["verdict"], "identical", "{replayed}");
    let exported = gw
        .get(&format!("/v1/recordings/{id}/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(exported.status(), 200);
    assert!(header(&exported, "content-disposition").contains(".tape"));
    let missing = gw
        .get(&format!("/v1/recordings/{}", "0".repeat(32)))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let m = members_until(&gw, "the killed node leaves placement", |m| alive(m) == 2).await;
    let dead = m.iter().find(|n| n["id"] == victim_id.as_str()).unwrap();
    assert!(dead["out_because"].is_string(), "{dead}");
    for _ in 0..10 {
        let r = gw.invoke("slow", b"").await;
        assert_eq!(r.status(), 200);
        assert_ne!(header(&r, "hearth-node"), victim_id);
        assert!(header(&r, "hearth-retried-from").is_empty());
    }

    // A node stopped cleanly says goodbye rather than going silent.
    let leaving = (0..3).find(|&i| i != victim).unwrap();
    let leaving_url = nodes[leaving].url.clone();
    drop(nodes.remove(leaving));
    members_until(&gw, "the stopped node has left", |m| {
        m.iter()
            .any(|n| n["url"] == leaving_url.as_str() && n["out_because"] == "left")
    })
    .await;
    // It handed its tape index to the store as it went: the gateway says
    // how many of counter's tapes (it ran once there, called directly)
    // stay on its machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = gw.get_json("/v1/functions/counter/recordings").await;
        let away = list["away"].as_array().unwrap();
        if let Some(a) = away.iter().find(|a| a["node"] == leaving_url.as_str()) {
            assert!(a["tapes"].as_u64().unwrap() >= 1, "{list}");
            break;
        }
        assert!(Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two gateways on one store: each knows every node from the nodes' rows,
/// not from being told; what one deploys or removes the other serves at
/// once (it hears the change); either keeps serving when the other dies.
#[tokio::test(flavor = "multi_thread")]
async fn any_gateway_serves_any_request_and_hears_the_others_deploys() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("gateways").unwrap();
    let mut gw1 = gateway(&store);
    let node = node(&gw1, &store, &[]);
    let gw2 = gateway(&store);
    let seen1 = members_until(&gw1, "the node joins", |m| alive(m) == 1).await;
    let seen2 = members_until(&gw2, "gw2 knows the node", |m| alive(m) == 1).await;
    assert_eq!(seen1[0]["id"], seen2[0]["id"], "one node, one row");
    // The admin token is the operator's, on both; the examples exist once.
    assert_eq!(gw1.token, gw2.token);
    assert_eq!(
        gw2.call("hello", "", "").await.1,
        "hello from wasm
"
    );
    let listed = gw2.get_json("/v1/functions").await;
    assert_eq!(listed["functions"].as_array().unwrap().len(), 3, "{listed}");

    // gw2 has cached f's newest version; gw1 deploys another.
    gw1.deploy("f", crate::harness::example("hello.wat"), &[])
        .await;
    let r = gw2.invoke("f", b"").await;
    assert_eq!(header(&r, "hearth-version"), "1");
    gw1.deploy("f", crate::harness::example("echo.wat"), &[])
        .await;
    let deployed = Instant::now();
    loop {
        let r = gw2.invoke("f", b"ping").await;
        if header(&r, "hearth-version") == "2" {
            assert!(r.text().await.unwrap().contains("ping"));
            break;
        }
        assert!(
            deployed.elapsed() < Duration::from_secs(10),
            "gw2 still serves version 1 of f"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "figure: a new version deployed through one gateway served by another (which had the old one cached) after {:?}",
        deployed.elapsed()
    );

    // A rollback through gw1 (gw2 has version 2 cached as live) reaches
    // gw2 as a deploy does; so does a promotion back.
    for (path, body, want) in [
        ("/v1/functions/f/aliases/live/rollback", None, "1"),
        (
            "/v1/functions/f/aliases/live",
            Some(serde_json::json!({"version": 2})),
            "2",
        ),
    ] {
        let mut rb = gw1.post(path);
        if let Some(body) = &body {
            rb = rb.json(body);
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
        let moved = Instant::now();
        while header(&gw2.invoke("f", b"").await, "hearth-version") != want {
            assert!(
                moved.elapsed() < Duration::from_secs(10),
                "gw2 still serves the old live version of f after {path}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        eprintln!(
            "figure: {path} through one gateway served by another after {:?}",
            moved.elapsed()
        );
    }

    // A token revoked through gw1 fails on gw2, which had it cached,
    // within a second.
    let made: serde_json::Value = gw1
        .post("/v1/tokens")
        .json(&serde_json::json!({"scope": "read"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (token, id) = (
        made["token"].as_str().unwrap(),
        made["id"].as_str().unwrap(),
    );
    let whoami = |gw: &Daemon| {
        gw.http
            .get(format!("{}/v1/whoami", gw.url))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(whoami(&gw2).await.unwrap().status(), 200);
    let r = gw1
        .delete(&format!("/v1/tokens/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let revoked = Instant::now();
    assert_eq!(
        whoami(&gw1).await.unwrap().status(),
        401,
        "at once where revoked"
    );
    while whoami(&gw2).await.unwrap().status() != 401 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = revoked.elapsed();
    eprintln!("figure: a token revoked through one gateway refused by another after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");

    // A secret rotated through gw2 reaches the node, which had the
    // function prepared with the old value.
    let put = |gw: &Daemon, value: &'static str| {
        gw.http
            .put(format!("{}/v1/secrets/API_KEY", gw.url))
            .bearer_auth(&gw.token)
            .body(value)
            .send()
    };
    assert_eq!(put(&gw1, "one").await.unwrap().status(), 200);
    gw1.deploy(
        "sec",
        b"export default { fetch(req, env) { return new Response(env.API_KEY); } };".to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("secret", "API_KEY"),
        ],
    )
    .await;
    assert_eq!(gw1.invoke_body("sec", String::new()).await, "one");
    assert_eq!(put(&gw2, "two").await.unwrap().status(), 200);
    let rotated = Instant::now();
    while gw1.invoke_body("sec", String::new()).await != "two" {
        assert!(
            rotated.elapsed() < Duration::from_secs(10),
            "the node still runs the old value"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "figure: a secret rotated through one gateway read by the node after {:?}",
        rotated.elapsed()
    );

    // A removal through gw2 is heard by gw1.
    let r = gw2.delete("/v1/functions/f").send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let removed = Instant::now();
    while gw1.invoke("f", b"").await.status() != 404 {
        assert!(
            removed.elapsed() < Duration::from_secs(10),
            "gw1 still serves f"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // gw1 dies; gw2 and the node carry on, with attempts the node accepts
    // (both gateways sign with the cluster's key).
    gw1.kill9();
    for _ in 0..5 {
        let r = gw2.invoke("hello", b"").await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "hearth-node"), seen2[0]["id"].as_str().unwrap());
    }

    // Readiness is the store's and the membership's: with the database
    // gone, neither the gateway nor the node should be sent work.
    for d in [&gw2, &node] {
        let r = d.get("/readyz").send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    drop(pg);
    for d in [&gw2, &node] {
        let r = d.get("/readyz").send().await.unwrap();
        assert_eq!(r.status(), 503);
        let why = r.text().await.unwrap();
        assert!(why.contains("store"), "{why}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_without_room_answers_429_with_retry_after() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("small").unwrap();
    let gw = gateway(&store);
    // Less room than one invocation of hello (64 MiB) needs.
    let _node = node(&gw, &store, &["--capacity-mib", "32"]);
    members_until(&gw, "the node joins", |m| alive(m) == 1).await;
    let r = gw.invoke("hello", b"").await;
    assert_eq!(header(&r, "retry-after"), "1");
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (429, "no_capacity"), "{message}");
    assert!(message.contains("no node has room"), "{message}");
}

/// Nodes tell the gateway how many invocations they run at once, and it
/// places within that; a node whose slots are taken by work the gateway
/// does not see refuses before running anything, and the gateway places
/// the invocation on another node, answering 503 with `Retry-After` only
/// when the node it asks next is full too.
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_node_pushes_back_and_the_gateway_places_elsewhere() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("busy").unwrap();
    // Two nodes spinning on two cores starve their heartbeats: past
    // 600 ms the gateway took both out ("missed heartbeats") and answered
    // "no node" instead of what this test is about. A second's heartbeat
    // (out after 3 s) outlasts the spins.
    let gw = gateway_with(&store, &["--heartbeat-ms", "1000"]);
    let a = node(&gw, &store, &["--max-concurrency", "1"]);
    let b = node(&gw, &store, &["--max-concurrency", "1"]);
    let m = members_until(&gw, "both nodes join", |m| alive(m) == 2).await;
    assert!(m.iter().all(|n| n["max_concurrency"] == 1), "{m:#?}");
    // ~1 s or more of spinning, so calls made together overlap.
    let slow = SLOW.replace("150000000", "3000000000");
    gw.deploy("slow", slow.into_bytes(), &[("timeout_ms", "30000")])
        .await;

    // Three at once through the gateway: one per node, and no room for
    // the third (429), without asking a node that is full.
    let answers = futures::future::join_all((0..3).map(|_| gw.invoke("slow", b""))).await;
    let mut statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 429]);
    for r in answers {
        assert_eq!(header(&r, "hearth-retried-from"), "", "nothing was refused");
        if r.status() == 429 {
            assert_eq!(header(&r, "retry-after"), "1");
            let (_, kind, message) = error_of(r).await;
            assert_eq!(kind, "no_capacity");
            assert!(message.contains("no node has room"), "{message}");
        }
    }

    // The gateway's first choice (both nodes have the function; the first
    // to join wins the tie) is kept busy by a call made on it directly: it
    // refuses, and the gateway's retry runs on the other node.
    let m = members(&gw).await;
    let (first, other) = if m[0]["url"] == a.url.as_str() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let gw = &gw;
    // Through the gateway once the direct calls run on `busy` (a fixed
    // pause raced them on a loaded machine).
    let once_running = async |busy: &[&Daemon]| {
        for n in busy {
            n.until_in_flight(1).await;
        }
        gw.invoke("slow", b"").await
    };
    // The calls above were answered, but a node may give a slot back just
    // after its answer: a call made on it at once could be refused (the
    // likely cause of a CI run that waited 20 s for one in flight).
    for n in [first, other] {
        n.until_idle().await;
    }
    let just_first = [first];
    let (direct, r) = tokio::join!(first.invoke("slow", b""), once_running(&just_first));
    assert_eq!(direct.status(), 200);
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "hearth-retried-from"),
        m[0]["id"].as_str().unwrap()
    );
    assert_eq!(header(&r, "hearth-node"), m[1]["id"].as_str().unwrap());
    assert_eq!(r.text().await.unwrap(), "done\n");

    // Both kept busy directly: both refuse, and the caller is told so.
    for n in [first, other] {
        n.until_idle().await;
    }
    let both = [first, other];
    let (d1, d2, r) = tokio::join!(
        first.invoke("slow", b""),
        other.invoke("slow", b""),
        once_running(&both)
    );
    assert_eq!((d1.status().as_u16(), d2.status().as_u16()), (200, 200));
    assert_eq!(header(&r, "retry-after"), "1");
    assert_eq!(header(&r, "hearth-refused"), "", "the gateway's to act on");
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (503, "unavailable"), "{message}");
    assert!(
        message.contains("is at its limit too; try again shortly"),
        "{message}"
    );
    // Busy is not dead: both nodes are still in placement. A refusal
    // never takes a node out; a heartbeat late because this machine's two
    // cores ran both spinners and the rest of the suite may, until the
    // node's next one, so the check waits for that, not for a restart.
    let both = async || alive(&members(gw).await) == 2;
    crate::harness::until("both nodes in placement", Duration::from_secs(5), both).await;

    // Only a node can refuse: a function answering 503 with the header
    // itself gets its own answer back, once, without the header.
    let body = "Status: 503\nHearth-Refused: overloaded\n\nmy own 503\n";
    let hello = String::from_utf8(crate::harness::example("hello.wat")).unwrap();
    let impostor = hello
        .replace(
            r"Content-Type: text/plain\n\nhello from wasm\n",
            &body.replace('\n', r"\n"),
        )
        .replace("(i32.const 42)", &format!("(i32.const {})", body.len()));
    assert_ne!(impostor, hello, "hello.wat changed shape");
    gw.deploy("impostor", impostor.into_bytes(), &[]).await;
    let r = gw.invoke("impostor", b"").await;
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "hearth-refused"), "");
    assert_eq!(header(&r, "hearth-retried-from"), "");
    assert_eq!(r.text().await.unwrap(), "my own 503\n");
}

/// A request body longer than a gateway holds streams through it to its
/// node, and the node's answer streams back, in the gateway's flat memory.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_body_passes_through_a_gateway_in_flat_memory() {
    require!(Postgres);
    use crate::streaming::{echo_through, generated};
    use futures::StreamExt;

    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("streams").unwrap();
    let gw = gateway_with(&store, &["--max-body-bytes", "1048576"]);
    let _node = node(&gw, &store, &[]);
    members_until(&gw, "the node joins", |m| alive(m) == 1).await;
    let q = [("stream", "true"), ("timeout_ms", "120000")];
    gw.deploy("echo", crate::harness::example("echo.wat"), &q)
        .await;
    assert_eq!(gw.call("echo", "", "warm").await, (200, "warm".into()));

    // 128 MiB sent without a length: past what the gateway holds.
    const CHUNKS: u64 = 2048;
    let grew_mib = echo_through(&gw, "/fn/admin/echo", CHUNKS).await;
    assert!(grew_mib < 64, "the gateway grew by {grew_mib} MiB");

    // A declared length past it streams too.
    let big = vec![7u8; 8 << 20];
    let resp = gw.post("/fn/admin/echo").body(big).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap().len(), 8 << 20);

    // An answer still streaming is an invocation still running on its
    // node: the gateway counts it until the body has passed.
    let running = |m: &[serde_json::Value]| m[0]["running"].as_u64().unwrap();
    let resp = gw
        .post("/fn/admin/echo")
        .body(reqwest::Body::wrap_stream(generated(CHUNKS)))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    let m = members(&gw).await;
    assert_eq!(running(&m), 1, "{m:#?}");
    assert_eq!(m[0]["committed_mib"], 64, "{m:#?}");
    while let Some(chunk) = body.next().await {
        chunk.unwrap();
    }
    members_until(&gw, "the stream's lease is released", |m| running(m) == 0).await;
}

/// A cluster's certificates in `dir` (`ca.crt`, `tls.crt`, `tls.key`),
/// made by the operator's own tool, `deploy/kubernetes/make-certs.sh`.
pub(crate) fn member_certs(dir: &std::path::Path) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes/make-certs.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(dir)
        .arg("2")
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "make-certs.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The console's data through a gateway: each function's minutes summed
/// over the nodes that ran it, and the tenant's tapes merged from every
/// node, each naming its node; another tenant gets none of it. The
/// gateway serves the console's page itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_sums_the_console_stats_and_merges_the_tapes_of_its_nodes() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("console").unwrap();
    let gw = gateway(&store);
    let _a = node(&gw, &store, &[]);
    let _b = node(&gw, &store, &[]);
    members_until(&gw, "both nodes join", |m| alive(m) == 2).await;
    let mut ids = HashSet::new();
    for _ in 0..20 {
        let r = gw.invoke("hello", b"").await;
        assert_eq!(r.status(), 200);
        ids.insert(header(&r, "hearth-invocation-id"));
    }

    let stats = gw.get_json("/v1/stats").await;
    let count: u64 = stats["functions"]["hello"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["count"].as_u64().unwrap())
        .sum();
    assert_eq!(count, 20, "{stats}");

    let deadline = Instant::now() + Duration::from_secs(15);
    let listed = loop {
        let v = gw.get_json("/v1/recordings?function=hello&limit=100").await;
        let listed = v["recordings"].as_array().unwrap().clone();
        if listed.len() >= 20 {
            break listed;
        }
        assert!(Instant::now() < deadline, "tapes written: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let got: HashSet<String> = listed
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ids, "every invocation's tape, once");
    assert!(
        listed.iter().all(|t| t["node"].as_str().is_some()),
        "each names its node"
    );

    // A gated promotion through the gateway replays the tapes of both
    // nodes: a version that answers otherwise is refused on all 20, one
    // that answers the same passes on all 20.
    let gated = async |code: &str| {
        let v = gw
            .deploy(
                "hello",
                crate::harness::example(code),
                &[("promote", "false")],
            )
            .await;
        let r = gw
            .post("/v1/functions/hello/aliases/live")
            .json(&serde_json::json!({"version": v["version"], "gate": {}}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    let (status, refused) = gated("echo.wat").await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["gate"]["replayed"], 20, "{refused}");
    assert_eq!(refused["gate"]["differing"].as_array().unwrap().len(), 20);
    assert_eq!(refused["gate"]["not_identical"], 20);
    let (status, promoted) = gated("hello.wat").await;
    assert_eq!(status, 200, "{promoted}");
    assert_eq!(
        (
            promoted["gate"]["replayed"].as_u64(),
            promoted["version"].as_u64()
        ),
        (Some(20), Some(3)),
        "{promoted}"
    );
    assert_eq!(
        (
            &promoted["gate"]["not_identical"],
            &promoted["gate"]["differing"]
        ),
        (&serde_json::json!(0), &serde_json::json!([])),
        "identical replays are counted, not kept: {promoted}"
    );

    let other = gw.create_tenant("other").await;
    let theirs = gw.get_json_as(&other, "/v1/stats").await;
    assert_eq!(theirs["functions"], serde_json::json!({}), "{theirs}");
    let theirs = gw.get_json_as(&other, "/v1/recordings").await;
    assert_eq!(theirs["recordings"], serde_json::json!([]), "{theirs}");

    let page = gw
        .http
        .get(format!("{}/console/", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers().contains_key("content-security-policy"));
}

/// A cluster whose store serves TLS only: gateway and node connect with
/// `sslmode=verify-full` and the store's CA, deploys and their change
/// notices (LISTEN/NOTIFY) reach the node, and every TCP connection the
/// server holds is encrypted.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_runs_on_a_store_that_serves_only_tls() {
    require!(Postgres);
    let pg = TempPostgres::start_tls().unwrap();
    pg.create_database("cluster").unwrap();
    let store = format!(
        "postgres://hearth@localhost:{}/cluster?sslmode=verify-full&sslrootcert={}",
        pg.port(),
        pg.ca().display()
    );
    let gw = gateway(&store);
    let n = node(&gw, &store, &[]);
    members_until(&gw, "the node joins", |m| alive(m) == 1).await;
    let r = gw.invoke("hello", b"").await;
    assert_eq!(r.status(), 200);
    // A new version reaches the node through the store's change notices.
    let v = gw
        .deploy("hello", crate::harness::example("echo.wat"), &[])
        .await;
    assert_eq!(v["version"], 2, "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = gw.invoke("hello", b"ping").await;
        if r.text().await.unwrap() == "ping" {
            break;
        }
        assert!(Instant::now() < deadline, "version 2 never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let plain = pg
        .count(
            "cluster",
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.client_addr IS NOT NULL AND NOT s.ssl",
        )
        .unwrap();
    let encrypted = pg
        .count(
            "cluster",
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.client_addr IS NOT NULL AND s.ssl",
        )
        .unwrap();
    assert_eq!(plain, 0);
    assert!(
        encrypted >= 2,
        "the gateway's and the node's listeners at least: {encrypted}"
    );
    drop(n);
}

/// The store goes away and comes back at the same address, as a failover
/// to a standby looks to its clients (every connection drops; a managed
/// database's or CloudNativePG's `-rw` address then answers from the new
/// primary): members serve again without being restarted, with the KV
/// they had, and hear deploys again (the change listener reconnects).
#[tokio::test(flavor = "multi_thread")]
async fn members_serve_again_when_the_store_comes_back() {
    require!(Postgres);
    let pg = TempPostgres::start().unwrap();
    let store = pg.create_database("failover").unwrap();
    let gw = gateway(&store);
    let _node = node(&gw, &store, &[]);
    members_until(&gw, "the node joins", |m| alive(m) == 1).await;
    let counter = |tag: &str| {
        format!(
            r#"export default {{ async fetch() {{
                 const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
                 await hearth.kv.set("n", String(n));
                 return new Response("{tag} " + n);
               }} }};"#
        )
        .into_bytes()
    };
    let js = [("runtime", "js"), ("file_name", "index.mjs")];
    gw.deploy("count", counter("v1"), &js).await;
    assert_eq!(gw.invoke_body("count", String::new()).await, "v1 1");

    pg.stop().unwrap();
    let down = Instant::now();
    // While it is away a call fails, and says so, rather than hanging.
    let r = gw
        .post("/fn/admin/count")
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let said = r.text().await.unwrap();
    eprintln!(
        "figure: with the store away a call failed with {status} after {:?}: {said}",
        down.elapsed()
    );
    assert!(status.is_server_error(), "{status} {said}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.start_again().unwrap();
    let back = Instant::now();
    let answer = loop {
        let r = gw.invoke("count", b"").await;
        if r.status() == 200 {
            break r.text().await.unwrap();
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "still {} 30 s after the store came back",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "figure: members served again {:?} after the store came back",
        back.elapsed()
    );
    assert_eq!(answer, "v1 2", "the KV written before the outage is there");
    // A deploy now reaches the node that ran version 1: its listener is
    // back, so it forgot what it cached.
    gw.deploy("count", counter("v2"), &js).await;
    let deployed = Instant::now();
    loop {
        let text = gw.invoke_body("count", String::new()).await;
        if text.starts_with("v2") {
            break;
        }
        assert!(
            deployed.elapsed() < Duration::from_secs(10),
            "the node still runs version 1: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
