//! The web console in a real headless chromium: log in with a token, see a
//! function, invoke it, open its invocation, replay it, and see nothing of
//! it with another tenant's token. Each page's screenshot lands in
//! `docs/console/`, which `docs/console.md` shows.

use crate::browser::Browser;
use crate::harness::Daemon;
use hearth_test_support::require;

const GREET: &str = r#"
exports.handler = async (event) => {
  const name = JSON.parse(event.body || "{}").name || "world";
  console.log(`greeting ${name}`);
  await hearth.kv.set("last", name);
  return { greeting: `hello, ${name}`, at: Date.now() };
};
"#;

/// `hearth-bench trace`'s report on the Azure 2021 excerpt, kept in the
/// docs (its command is in docs/console.md).
fn trace_report() -> String {
    let dir = crate::harness::crate_dir().join("../../docs/console/trace-report");
    dir.to_str().unwrap().to_string()
}

#[tokio::test]
async fn a_tenant_logs_in_invokes_opens_and_replays_and_another_sees_none_of_it() {
    require!(Chromium);
    let d = Daemon::start_with(&["--trace-report", &trace_report()]);
    d.deploy(
        "greet",
        GREET.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    let other = d.create_tenant("other").await;
    let b = Browser::start().await;

    // Log in; the function is there, with its mode and charts.
    b.log_in(&d.url, &d.token).await;
    b.wait_for_text("#tenant", "admin").await;
    let card = b.wait_for("[data-fn=greet]").await;
    let text = card.text().await.unwrap();
    assert!(text.contains("isolate") && text.contains("js"), "{text}");
    b.wait_for("#rate-greet canvas").await;
    b.wait_for("#latency-greet canvas").await;

    // Invoke it from the console.
    b.wait_for("#body-greet")
        .await
        .send_keys(r#"{"name":"console"}"#)
        .await
        .unwrap();
    b.click("#invoke-greet").await;
    let link = b.wait_for("#open-invocation").await;
    let href = link.attr("href").await.unwrap().unwrap();
    let id = href.rsplit('/').next().unwrap().to_string();
    b.wait_for_text("[data-fn=greet] .answer", "hello, console")
        .await;
    // The charts count it.
    b.client.refresh().await.unwrap();
    b.wait_for_text("[data-fn=greet]", "1 invocations in the last hour")
        .await;
    // The y axes' ticks say a count in a few characters: uPlot's axis is
    // 50 px wide, and 214,637 showed as "0,000".
    let ticks: Option<Vec<String>> = b
        .wait_for_js(
            "the charts' tick labels",
            "if (!window.__ticks) import('/console/app.js').then((m) => { \
               window.__ticks = [0, 950, 214637, 1.5e6].map(m.tick); }); \
             return window.__ticks || null;",
            |t: &Option<Vec<String>>| t.is_some(),
        )
        .await;
    assert_eq!(ticks.unwrap(), ["0", "950", "214.6K", "1.5M"]);
    b.screenshot("functions").await;

    // Its invocation: request, host calls, response, logs.
    d.recording_when_written(&id).await;
    b.client
        .goto(&format!("{}/console/{href}", d.url))
        .await
        .unwrap();
    b.wait_for_text("#outcome", "200").await;
    let calls = b.wait_for("#calls").await.text().await.unwrap();
    assert!(
        calls.contains("kv.set") && calls.contains("took"),
        "{calls}"
    );
    b.wait_for("#calls .waterfall .bar").await;
    b.wait_for_text("#logs", "greeting console").await;
    let page = b.text().await;
    assert!(
        page.contains(r#"{"name":"console"}"#),
        "the request body: {page}"
    );

    // Replay: identical.
    b.click("#replay").await;
    b.wait_for_text("#verdict", "identical").await;
    b.screenshot("invocation").await;

    // A second version that answers differently: the replay against it
    // shows where the responses part.
    d.deploy(
        "greet",
        GREET.replace("hello, ", "hi, ").into_bytes(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    let against = b.wait_for("#against").await;
    against.clear().await.unwrap();
    against.send_keys("2").await.unwrap();
    b.click("#replay-against").await;
    b.wait_for_text("#verdict", "differs").await;
    b.wait_for_text("#diff", "hi, console").await;
    b.screenshot("replay-against").await;

    // The live list has it, and follows new invocations.
    b.click("#nav-invocations").await;
    b.wait_for(&format!("tr[data-id='{id}']")).await;
    const ROWS: &str = "return document.querySelectorAll('tr.link').length";
    let before: usize = b.wait_for_js("rows", ROWS, |_| true).await;
    let (status, _) = d.call("greet", "", r#"{"name":"later"}"#).await;
    assert_eq!(status, 200);
    b.wait_for_js("the list did not update", ROWS, |&rows: &usize| {
        rows > before
    })
    .await;
    b.screenshot("invocations").await;

    // The cluster page: this server, and the trace bench's charts, drawn.
    b.click("#nav-cluster").await;
    b.wait_for_text("main", "invocations running").await;
    // What ran here, by mode: greet's calls in the isolate, nothing else.
    let ran = &d.get_json("/v1/status").await["ran"];
    let isolate = ran["isolate"].as_u64().unwrap();
    assert!(isolate >= 2, "{ran}");
    b.wait_for_text(
        "#ran",
        &format!("wasm 0 · isolate {isolate} · compiled 0 · process 0"),
    )
    .await;
    b.wait_for("#trace-report img.chart + img.chart").await;
    b.wait_for_js(
        "the charts were not drawn",
        "return [...document.querySelectorAll('#trace-report img')].map(i => i.complete ? i.naturalWidth : 0)",
        |widths: &Vec<u64>| widths.len() == 2 && widths.iter().all(|&w| w > 100),
    )
    .await;
    b.screenshot("cluster").await;

    // Another tenant: no function, no invocation, and the first's id is
    // not found.
    b.click("#logout").await;
    b.log_in(&d.url, &other).await;
    b.wait_for_text("#tenant", "other").await;
    b.wait_for_text("main", "No functions yet").await;
    assert!(!b.text().await.contains("greet"));
    b.click("#nav-invocations").await;
    b.wait_for_text("main", "No invocations match").await;
    assert!(!b.text().await.contains("greet"));
    // The trace report is the operator's: not on a tenant's cluster page.
    b.click("#nav-cluster").await;
    b.wait_for_text("main", "Nodes are shown to the operator's token")
        .await;
    assert!(!b.text().await.contains("Trace bench"));
    assert!(!b.text().await.contains("Ran since start"));
    b.client
        .goto(&format!("{}/console/#/invocation/{id}", d.url))
        .await
        .unwrap();
    b.wait_for_text("main", &format!("no recording {id}")).await;
    let page = b.text().await;
    assert!(!page.contains("greeting"), "{page}");
    b.screenshot("other-tenant").await;
    b.close().await;
}

/// A function's versions page: promote a kept version to live, roll live
/// back, and see why a rollback with nothing before is refused.
#[tokio::test]
async fn the_versions_view_promotes_and_rolls_back_live() {
    require!(Chromium);
    let d = Daemon::start();
    d.deploy("rel", crate::harness::example("hello.wat"), &[])
        .await;
    d.deploy(
        "rel",
        crate::harness::example("echo.wat"),
        &[("promote", "false")],
    )
    .await;
    let served = async || {
        let r = d.invoke("rel", b"x").await;
        r.headers()["hearth-version"].to_str().unwrap().to_string()
    };
    let b = Browser::start().await;
    b.log_in(&d.url, &d.token).await;
    b.wait_for_text("[data-fn=rel]", "live v1").await;
    b.click("#versions-rel").await;
    b.wait_for_text("#live-version", "v1").await;
    b.wait_for_text("#versions [data-version='1']", "live")
        .await;

    b.click("#promote-2").await;
    b.wait_for_text("#moved", "live is v2 (was v1)").await;
    b.wait_for_text("#live-version", "v2").await;
    assert_eq!(served().await, "2");
    b.wait_for_text("#history", "promotion").await;
    b.screenshot("versions").await;

    b.click("#rollback").await;
    b.wait_for_text("#moved", "live is v1 (was v2)").await;
    assert_eq!(served().await, "1");
    b.wait_for_text("#history", "rollback").await;
    // Nothing before v1: the API's reason is shown, and nothing moves.
    b.click("#rollback").await;
    b.wait_for_text("#release-error", "promote one instead")
        .await;
    assert_eq!(served().await, "1");

    // Gated by replay: v2 echoes where v1 said hello, so the gate refuses
    // it with its reason, and nothing moves.
    d.newest_tape("rel", 3).await;
    b.click("#gate-2").await;
    b.wait_for_text("#release-error", "the gate refused version 2")
        .await;
    assert_eq!(served().await, "1");
    // A split sends the share typed to a version.
    b.click("#split-2").await;
    b.wait_for_text("#moved", "live is v1 with 10% to v2").await;
    b.wait_for_text("#live-split", "10% to v2").await;

    // Secrets are listed by name, with who binds them, and no value.
    let r = d
        .http
        .put(format!("{}/v1/secrets/API_KEY", d.url))
        .bearer_auth(&d.token)
        .body("value-never-shown")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    b.click("#nav-secrets").await;
    b.wait_for_text("#secrets [data-secret='API_KEY']", "API_KEY")
        .await;
    b.screenshot("secrets").await;
    assert!(!b.text().await.contains("value-never-shown"));
}

/// A function's events on its versions page: pause and resume a
/// schedule; see a dead letter and why, queue it again, purge it.
#[tokio::test]
async fn the_versions_view_pauses_schedules_and_triggers_and_replays_and_purges_dead_letters() {
    require!(Chromium, Nats);
    let nats = hearth_test_support::TempNats::start().unwrap();
    crate::triggers::add_stream(
        &crate::triggers::jetstream_of(&nats).await,
        "ORDERS",
        &["orders.>"],
        async_nats::jetstream::stream::RetentionPolicy::Limits,
    )
    .await;
    let d = Daemon::start_with(&["--broker-allow", &nats.address()]);
    let trigger = format!("{}/ORDERS?subject=orders.>&batch=5", nats.url());
    d.deploy(
        "cron",
        crate::harness::example("hello.wat"),
        &[("schedule", "@every 1h"), ("trigger", &trigger)],
    )
    .await;
    let fails = "export default { fetch() { throw new Error('always fails'); } };";
    d.deploy(
        "fails",
        fails.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let queue = async || {
        let r = d
            .post("/fn/admin/fails")
            .header("hearth-invocation-type", "Event")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    };
    queue().await;
    let paused =
        async || d.get_json("/v1/functions/cron/schedules").await["schedules"][0]["paused"].clone();

    let b = Browser::start().await;
    b.log_in(&d.url, &d.token).await;
    b.click("#versions-cron").await;
    b.wait_for_text("#schedules", "@every 1h").await;
    let id = d.get_json("/v1/functions/cron/schedules").await["schedules"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    b.click(&format!("#pause-{id}")).await;
    b.wait_for_text("#events-done", "paused").await;
    b.wait_for_text("#schedules", "paused").await;
    assert_eq!(paused().await, true);
    b.click(&format!("#resume-{id}")).await;
    b.wait_for_text("#events-done", "resumed").await;
    assert_eq!(paused().await, false);
    b.wait_for("#no-dead").await;

    // Its binding, paused and resumed the same way.
    let binding = d.get_json("/v1/functions/cron/triggers").await["triggers"][0].clone();
    let id = binding["id"].as_str().unwrap().to_string();
    b.wait_for_text(
        "#triggers",
        &format!("nats://127.0.0.1:{}/ORDERS (orders.>)", nats.port()),
    )
    .await;
    b.wait_for_text("#triggers", "batch 5, 3 attempts").await;
    b.click(&format!("#pause-{id}")).await;
    b.wait_for_text("#triggers", "paused").await;
    assert_eq!(
        d.get_json("/v1/functions/cron/triggers").await["triggers"][0]["paused"],
        true
    );
    b.click(&format!("#resume-{id}")).await;
    b.wait_for_text("#events-done", "resumed").await;
    assert_eq!(
        d.get_json("/v1/functions/cron/triggers").await["triggers"][0]["paused"],
        false
    );

    // Three attempts (about 3 s of backoff), then a dead letter.
    b.click("#nav-functions").await;
    b.click("#versions-fails").await;
    b.wait_for("#no-schedules").await;
    b.wait_for("#no-triggers").await;
    let dead = async || {
        d.get_json("/v1/functions/fails/dlq").await["dead"]
            .as_array()
            .unwrap()
            .len()
    };
    crate::harness::until(
        "the dead letter",
        std::time::Duration::from_secs(20),
        async || dead().await == 1,
    )
    .await;
    b.wait_for_text("#dlq", "always fails").await;
    b.wait_for_text("#queue", "0 waiting or running; 1 dead")
        .await;
    b.screenshot("events").await;
    b.click("#dlq-replay").await;
    b.wait_for_text("#events-done", "queued again: 1").await;
    crate::harness::until(
        "the dead letter again",
        std::time::Duration::from_secs(20),
        async || dead().await == 1,
    )
    .await;
    b.wait_for("#dlq-purge").await;
    b.click("#dlq-purge").await;
    b.wait_for_text("#events-done", "purged: 1").await;
    b.wait_for("#no-dead").await;
    assert_eq!(dead().await, 0);
    b.close().await;
}

/// The charts' numbers belong to the function, not its version: a new
/// version keeps them, and removing the function takes them away.
#[tokio::test]
async fn a_functions_stats_outlive_a_new_version_and_go_with_the_function() {
    let d = Daemon::start();
    let hello = crate::harness::example("hello.wat");
    d.deploy("h", hello.clone(), &[]).await;
    for _ in 0..2 {
        assert_eq!(d.call("h", "", "").await.0, 200);
    }
    let counted = |stats: &serde_json::Value| -> u64 {
        stats["functions"]["h"]
            .as_array()
            .map(|m| m.iter().map(|m| m["count"].as_u64().unwrap()).sum())
            .unwrap_or(0)
    };
    assert_eq!(counted(&d.get_json("/v1/stats").await), 2);
    d.deploy("h", hello, &[]).await;
    assert_eq!(
        counted(&d.get_json("/v1/stats").await),
        2,
        "kept across versions"
    );
    let r = d.delete("/v1/functions/h").send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let stats = d.get_json("/v1/stats").await;
    assert!(stats["functions"].get("h").is_none(), "{stats}");
}

/// The charts' last hour outlives a restart: a clean stop saves it, the
/// next start takes it up, and calls after the restart add to it.
#[tokio::test]
async fn a_functions_last_hour_of_stats_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let counted = |stats: &serde_json::Value| -> (u64, u64) {
        stats["functions"]["h"].as_array().map_or((0, 0), |m| {
            m.iter().fold((0, 0), |(c, e), m| {
                (
                    c + m["count"].as_u64().unwrap(),
                    e + m["errors"].as_u64().unwrap(),
                )
            })
        })
    };
    {
        let d = Daemon::start_in(tmp.path(), &[]);
        d.deploy("h", crate::harness::example("hello.wat"), &[])
            .await;
        d.deploy("t", crate::harness::example("trap.wat"), &[])
            .await;
        for _ in 0..3 {
            assert_eq!(d.call("h", "", "").await.0, 200);
        }
        assert_eq!(counted(&d.get_json("/v1/stats").await), (3, 0));
        assert_eq!(d.call("t", "", "").await.0, 500);
    }
    let d = Daemon::start_in(tmp.path(), &[]);
    let stats = d.get_json("/v1/stats").await;
    assert_eq!(counted(&stats), (3, 0), "{stats}");
    let trapped = &stats["functions"]["t"][0];
    assert_eq!(
        (trapped["count"].as_u64(), trapped["errors"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(d.call("h", "", "").await.0, 200);
    assert_eq!(counted(&d.get_json("/v1/stats").await).0, 4);
}

/// A 5xx the function answers itself is an error in its charts, as a
/// failure is; a 4xx is its caller's and is not.
#[tokio::test]
async fn a_functions_own_5xx_counts_as_an_error_in_its_stats() {
    let d = Daemon::start();
    let answers = r#"export default {
  fetch(request) {
    const status = Number(new URL(request.url).searchParams.get("status"));
    return new Response("", { status });
  },
};"#;
    d.deploy(
        "answers",
        answers.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    for status in [200, 404, 503, 500] {
        let query = format!("?status={status}");
        assert_eq!(d.call("answers", &query, "").await.0, status);
    }
    let stats = d.get_json("/v1/stats").await;
    let sum = |key: &str| -> u64 {
        stats["functions"]["answers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[key].as_u64().unwrap())
            .sum()
    };
    assert_eq!((sum("count"), sum("errors")), (4, 2), "{stats}");
}

/// A gateway serves the console too: its Cluster page lists the nodes
/// with what the gateway placed on each, by the placer's rule, and what
/// each ran, by mode, as their heartbeats report it.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateways_cluster_page_shows_each_nodes_placements_and_modes() {
    require!(Postgres, Chromium);
    use crate::cluster::{alive, gateway, members_until, node};
    let pg = hearth_test_support::TempPostgres::start().unwrap();
    let store = pg.create_database("console").unwrap();
    let gw = gateway(&store);
    let _nodes: Vec<Daemon> = (0..2).map(|_| node(&gw, &store, &[])).collect();
    members_until(&gw, "two nodes join", |m| alive(m) == 2).await;

    for _ in 0..3 {
        assert_eq!(gw.call("hello", "", "").await.0, 200);
    }
    gw.deploy(
        "greet",
        GREET.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.js")],
    )
    .await;
    assert_eq!(gw.call("greet", "", r#"{"name":"cluster"}"#).await.0, 200);
    let ran = |n: &serde_json::Value, mode: &str| n["ran"][mode].as_u64().unwrap();
    let sum = |m: &[serde_json::Value], mode: &str| m.iter().map(|n| ran(n, mode)).sum::<u64>();
    let m = members_until(&gw, "heartbeats report what ran", |m| {
        sum(m, "wasm") == 3 && sum(m, "isolate") == 1
    })
    .await;

    let b = Browser::start().await;
    b.log_in(&gw.url, &gw.token).await;
    b.wait_for("[data-fn=greet]").await;
    b.click("#nav-cluster").await;
    for n in &m {
        let row = format!("#nodes tr[data-node='{}']", n["id"].as_str().unwrap());
        let by = &n["placed_by"];
        b.wait_for_text(
            &format!("{row} .placed"),
            &format!(
                "{} / {} / {}",
                by["function"], by["tenant"], by["least_loaded"]
            ),
        )
        .await;
        b.wait_for_text(
            &format!("{row} .ran"),
            &format!(
                "wasm {} · isolate {} · compiled 0 · process 0",
                ran(n, "wasm"),
                ran(n, "isolate")
            ),
        )
        .await;
    }
    b.screenshot("cluster-gateway").await;
    b.close().await;
}

/// The invocations view says its filters in its URL (a view can be
/// shared and comes back whole), goes a page at a time past the newest
/// 100, and finds an invocation by its id or a trace's by the trace id.
#[tokio::test]
async fn the_invocations_view_keeps_filters_in_its_url_pages_and_finds_by_id_or_trace() {
    require!(Chromium);
    let d = Daemon::start();
    let hello = crate::harness::example("hello.wat");
    d.deploy("h", hello.clone(), &[]).await;
    d.deploy("g", hello, &[]).await;
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traced = d
        .post("/fn/admin/g")
        .header("traceparent", format!("00-{TRACE}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(traced.status(), 200);
    let traced = traced.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut oldest = None;
    for _ in 0..101 {
        let r = d.post("/fn/admin/h").send().await.unwrap();
        assert_eq!(r.status(), 200);
        let id = r.headers()["hearth-invocation-id"].to_str().unwrap();
        oldest.get_or_insert(id.to_string());
    }
    let oldest = oldest.unwrap();
    d.recording_when_written(&oldest).await;

    let b = Browser::start().await;
    b.log_in(&d.url, &d.token).await;
    b.wait_for_text("#tenant", "admin").await;
    const ROWS: &str = "return document.querySelectorAll('tr.link').length";
    let rows = |n: usize| move |&r: &usize| r == n;

    // A view by URL: its filters are set from it.
    b.client
        .goto(&format!(
            "{}/console/#/invocations?function=h&version=1",
            d.url
        ))
        .await
        .unwrap();
    b.wait_for_js("a page of h's", ROWS, rows(100)).await;
    let shown: (String, String) = b
        .wait_for_js(
            "the filters",
            "return [document.querySelector('#filter-function').value, \
                     document.querySelector('#filter-version').value]",
            |_| true,
        )
        .await;
    assert_eq!(shown, ("h".to_string(), "1".to_string()));

    // The next page: the 101st, and the URL says where it starts.
    b.click("#older").await;
    b.wait_for(&format!("tr[data-id='{oldest}']")).await;
    b.wait_for_js("the older page", ROWS, rows(1)).await;
    let url = b.client.current_url().await.unwrap().to_string();
    assert!(
        url.contains("before=") && url.contains("function=h"),
        "{url}"
    );
    b.click("#newest").await;
    b.wait_for_js("the newest page again", ROWS, rows(100))
        .await;

    // A filter set in the view goes into the URL, and back to page one.
    let version = b.wait_for("#filter-version").await;
    version.clear().await.unwrap();
    version.send_keys("2\n").await.unwrap();
    b.wait_for_text("main", "No invocations match").await;
    let url = b.client.current_url().await.unwrap().to_string();
    assert!(
        url.contains("version=2") && !url.contains("before="),
        "{url}"
    );

    // Found by id: its page opens.
    b.client
        .goto(&format!("{}/console/#/invocations", d.url))
        .await
        .unwrap();
    b.wait_for("#search-id")
        .await
        .send_keys(&traced)
        .await
        .unwrap();
    b.click("#search button").await;
    b.wait_for_text("main", &format!("Invocation {traced}"))
        .await;
    // Its trace, the caller's, links to the trace's invocations: just it.
    b.wait_for_text("#trace-link", TRACE).await;
    b.click("#trace-link").await;
    b.wait_for_text("#trace-filter", TRACE).await;
    b.wait_for(&format!("tr[data-id='{traced}']")).await;
    b.wait_for_js("the trace's one invocation", ROWS, rows(1))
        .await;

    // A trace id in the search box: the same list.
    b.click("#clear-trace").await;
    b.wait_for_js("every function again", ROWS, rows(100)).await;
    b.wait_for("#search-id")
        .await
        .send_keys(TRACE)
        .await
        .unwrap();
    b.click("#search button").await;
    b.wait_for_text("#trace-filter", TRACE).await;
    b.wait_for_js("the trace's one invocation", ROWS, rows(1))
        .await;
    // Not an id at all: said so.
    let search = b.wait_for("#search-id").await;
    search.clear().await.unwrap();
    search.send_keys("nope").await.unwrap();
    b.click("#search button").await;
    b.wait_for_text("#search", "32 hex digits").await;
    b.close().await;
}
