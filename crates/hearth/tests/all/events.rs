//! Events: schedules fire functions of every runtime with their
//! platform's event, through the store's queue, and are listed, paused,
//! resumed and removed (docs/events.md).

use std::time::Duration;

use hearth_test_support::require;

use crate::cli::hearth;
use crate::harness::{Daemon, error_of, until};

/// The messages of `name`'s log lines that start with `prefix`.
pub(crate) fn said(lines: &[serde_json::Value], prefix: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["message"].as_str())
        .filter(|m| m.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// What each firing logged as JSON after `prefix`.
fn fired(lines: &[serde_json::Value], prefix: &str) -> Vec<serde_json::Value> {
    said(lines, prefix)
        .iter()
        .map(|m| serde_json::from_str(&m[prefix.len()..]).unwrap())
        .collect()
}

const EVERY_SECOND: &str = "@every 1s";

#[tokio::test]
async fn a_schedule_fires_every_runtime_with_its_platforms_event_and_each_firing_is_taped() {
    require!(Python);
    let d = Daemon::start();
    // A Workers module with only scheduled(): the controller it gets.
    let workers = "export default { async scheduled(controller, env, ctx) { \
        console.log('fired ' + JSON.stringify({ cron: controller.cron, type: controller.type, \
        t: controller.scheduledTime })); } };";
    let node = "exports.handler = async (event, context) => { console.log('fired ' + \
        JSON.stringify({ source: event.source, type: event['detail-type'], \
        t: event.detail.scheduledTime, id: context.awsRequestId })); };\n";
    let python = "import json\ndef handler(event, context):\n    print('fired ' + \
        json.dumps({'source': event['source'], 'type': event['detail-type'], \
        't': event['detail']['scheduledTime'], 'time': event['time']}))\n";
    for (name, file, runtime, code) in [
        ("js", "index.mjs", "js", workers),
        ("node", "index.js", "node", node),
        ("py", "handler.py", "python", python),
    ] {
        let deployed = d
            .deploy(
                name,
                code.as_bytes().to_vec(),
                &[
                    ("runtime", runtime),
                    ("file_name", file),
                    ("schedule", EVERY_SECOND),
                ],
            )
            .await;
        let schedules = deployed["schedules"].as_array().unwrap();
        assert_eq!(schedules.len(), 1, "{deployed}");
        assert_eq!(schedules[0]["expr"], EVERY_SECOND);
    }
    // A wasm module is a CGI program: echo.wat answers its body.
    d.deploy(
        "wasm",
        crate::harness::example("echo.wat"),
        &[("schedule", EVERY_SECOND)],
    )
    .await;

    let js = d.logs_until("js", |l| said(l, "fired ").len() >= 2).await;
    let js = fired(&js, "fired ");
    assert_eq!(
        (&js[0]["cron"], &js[0]["type"]),
        (&EVERY_SECOND.into(), &"scheduled".into())
    );
    let (t0, t1) = (js[0]["t"].as_i64().unwrap(), js[1]["t"].as_i64().unwrap());
    assert_eq!(t0 % 1000, 0, "a tick is a whole second: {t0}");
    assert!(t1 > t0, "each firing its own tick: {js:?}");

    for name in ["node", "py"] {
        let lines = d.logs_until(name, |l| said(l, "fired ").len() >= 2).await;
        let events = fired(&lines, "fired ");
        assert_eq!(events[0]["source"], "aws.events", "{name}: {events:?}");
        assert_eq!(events[0]["type"], "Scheduled Event", "{name}");
        assert!(events[1]["t"].as_i64() > events[0]["t"].as_i64(), "{name}");
    }
    let py = fired(&d.logs_until("py", |l| !l.is_empty()).await, "fired ");
    let when = py[0]["time"].as_str().unwrap();
    assert!(
        when.ends_with('Z') && when.len() == 20,
        "EventBridge's time: {when}"
    );

    // Each firing is an invocation, taped: the wasm module's tape holds
    // the CGI request it was given and the event it echoed.
    let mut taped = serde_json::Value::Null;
    until(
        "a taped firing of the wasm module",
        Duration::from_secs(30),
        async || {
            let list = d.get_json("/v1/functions/wasm/recordings").await;
            match list["recordings"].as_array().and_then(|r| r.first()) {
                Some(r) => {
                    taped = d.recording_when_written(r["id"].as_str().unwrap()).await;
                    true
                }
                None => false,
            }
        },
    )
    .await;
    let request = &taped["request"];
    assert_eq!(request["method"], "POST", "{taped:#}");
    let headers = request["headers"].to_string();
    assert!(
        headers.contains("hearth-event") && headers.contains("scheduled"),
        "{headers}"
    );
    let body = taped["outcome"]["body"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        body.contains("Scheduled Event"),
        "the module read the event: {taped:#}"
    );
}

#[tokio::test]
async fn schedules_are_listed_paused_resumed_and_removed_and_a_bad_one_is_refused_at_deploy() {
    let d = Daemon::start();
    let code = crate::harness::example("hello.wat");
    // A schedule that does not parse is refused before anything is kept.
    let resp = d
        .deploy_raw("tick", code.clone(), &[("schedule", "61 * * * *")])
        .await;
    let (status, _, message) = error_of(resp).await;
    assert_eq!(status, 400);
    assert!(message.contains("minute field \"61\""), "{message}");
    assert!(message.contains("@every 30s"), "names the forms: {message}");
    let resp = d
        .deploy_raw(
            "tick",
            code.clone(),
            &[("schedule", "TZ=Mars/Olympus 0 9 * * *")],
        )
        .await;
    let (status, _, message) = error_of(resp).await;
    assert_eq!(status, 400);
    assert!(message.contains("IANA"), "{message}");
    let (status, _) = (
        d.get("/v1/functions/tick").send().await.unwrap().status(),
        (),
    );
    assert_eq!(status, 404, "nothing was deployed");

    let deployed = d
        .deploy(
            "tick",
            code.clone(),
            &[
                ("schedule", "TZ=Europe/Paris 0 9 * * 1-5"),
                ("schedule", "@hourly"),
            ],
        )
        .await;
    let ids: Vec<String> = deployed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    let (ok, out, err) = hearth(&d, &["schedules", "tick"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("TZ=Europe/Paris 0 9 * * 1-5") && out.contains("@hourly"),
        "{out}"
    );
    assert!(out.contains(&ids[0]), "{out}");

    let (ok, out, err) = hearth(&d, &["schedules", "pause", "tick", &ids[1]]);
    assert!(ok, "{err}");
    assert!(out.contains("paused"), "{out}");
    let listed = d.get_json("/v1/functions/tick/schedules").await;
    assert_eq!(listed["schedules"][1]["paused"], true, "{listed}");

    // A redeploy without schedules keeps them, the pause too; one that
    // names one of them keeps that one and drops the other.
    d.deploy("tick", code.clone(), &[]).await;
    let listed = d.get_json("/v1/functions/tick/schedules").await;
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 2);
    assert_eq!(listed["schedules"][1]["paused"], true);
    d.deploy("tick", code.clone(), &[("schedule", "@hourly")])
        .await;
    let listed = d.get_json("/v1/functions/tick/schedules").await;
    let kept = listed["schedules"].as_array().unwrap();
    assert_eq!((kept.len(), &kept[0]["id"]), (1, &ids[1].clone().into()));
    assert_eq!(kept[0]["paused"], true, "kept with its pause");

    let (ok, out, err) = hearth(&d, &["schedules", "resume", "tick", &ids[1]]);
    assert!(ok, "{err}");
    assert!(out.contains("resumed"), "{out}");
    let listed = d.get_json("/v1/schedules").await;
    let one = &listed["schedules"][0];
    assert_eq!(
        (one["function"].as_str(), one["paused"].as_bool()),
        (Some("tick"), Some(false))
    );
    let next = one["next_ms"].as_i64().unwrap();
    assert!(
        next > hearth_core::unix_time_ms() && next % 3_600_000 == 0,
        "{one}"
    );

    let resp = d
        .post("/v1/functions/tick/schedules/nope/pause")
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(resp).await;
    assert_eq!(status, 404);
    assert!(message.contains("hearth schedules tick"), "{message}");
    let (ok, _, err) = hearth(&d, &["schedules", "rm", "tick", &ids[1]]);
    assert!(ok, "{err}");
    let listed = d.get_json("/v1/functions/tick/schedules").await;
    assert!(listed["schedules"].as_array().unwrap().is_empty());
    // `none` removes them all at deploy.
    d.deploy("tick", code.clone(), &[("schedule", "@daily")])
        .await;
    let deployed = d.deploy("tick", code, &[("schedule", "none")]).await;
    assert!(deployed.get("schedules").is_none(), "{deployed}");
    assert!(
        d.get_json("/v1/schedules").await["schedules"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let resp = d
        .post("/v1/functions/missing/schedules/x/pause")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

/// A Workers module whose every firing GETs `/hit/{scheduledTime}` from
/// `upstream` (an effect the test counts per tick), then takes 0.8 s more
/// (a js isolate waits out its timers on its thread: a node has as many as
/// it has cores, so longer would queue the firings).
fn hitting(upstream: std::net::SocketAddr) -> String {
    format!(
        "export default {{ async scheduled(controller) {{ \
         const r = await fetch('http://{upstream}/hit/' + controller.scheduledTime); \
         await new Promise((done) => setTimeout(done, 800)); \
         console.log('fired ' + await r.text()); }} }};"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_tick_fires_once_across_gateways_even_as_they_are_killed() {
    require!(Postgres);
    let pg = hearth_test_support::TempPostgres::start().unwrap();
    let store = pg.create_database("ticks").unwrap();
    // A short longest timeout makes a short claim: a killed gateway's
    // firings are taken over 3 + 5 s after they were claimed.
    let short = ["--max-timeout-ms", "3000", "--examples", "false"];
    let gateway = || crate::cluster::gateway_with(&store, &short);
    let mut first = gateway();
    let _node = crate::cluster::node(&first, &store, &[]);
    crate::cluster::members_until(&first, "the node joins", |m| crate::cluster::alive(m) == 1)
        .await;
    let (upstream, hits) = crate::cluster::counting_upstream().await;
    let allow = upstream.to_string();
    first
        .deploy(
            "tick",
            hitting(upstream).into_bytes(),
            &[
                ("runtime", "js"),
                ("file_name", "index.mjs"),
                ("allow_host", &allow),
                ("timeout_ms", "3000"),
                ("schedule", EVERY_SECOND),
            ],
        )
        .await;
    // The only gateway fires a tick; its firing has made its call and is
    // waiting to answer when the gateway is killed: its claim is unsettled,
    // the call journaled.
    until("a firing's call", Duration::from_secs(20), async || {
        !hits.lock().unwrap().is_empty()
    })
    .await;
    first.kill9();
    let unsettled: i64 = hits.lock().unwrap().keys().next().unwrap().parse().unwrap();
    // Two others share the ticks from then on; one of them takes the
    // unsettled firing over when its claim lapses, and one of them is
    // killed in turn.
    let mut gateways = [gateway(), gateway()];
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    gateways[0].kill9();
    let killed = hearth_core::unix_time_ms();
    let survivor = &gateways[1];
    let lines = survivor
        .logs_until("tick", |l| {
            !said(l, "retry of a queued invocation: 1 answer").is_empty()
        })
        .await;
    assert!(!said(&lines, "retry of a queued invocation").is_empty());
    let mut fired = 0;
    until(
        "ticks well after the kills",
        Duration::from_secs(40),
        async || {
            let done = survivor.get_json("/v1/functions/tick/schedules").await;
            fired = done["schedules"][0]["fired_ms"].as_i64().unwrap_or(0);
            fired > killed + 10_000
        },
    )
    .await;
    // The firings of ticks up to then have made their calls.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let hits: std::collections::BTreeMap<i64, u32> = hits
        .lock()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.parse().unwrap(), *n))
        .filter(|(t, _)| *t <= fired)
        .collect();
    assert_eq!(
        hits.get(&unsettled),
        Some(&1),
        "the taken-over firing repeated its call"
    );
    let ticks: Vec<i64> = hits.keys().copied().collect();
    assert!(ticks.len() >= 12, "{hits:?}");
    assert!(
        hits.values().all(|&n| n == 1),
        "a tick's effect happened more than once: {hits:?}"
    );
    // No tick from the first to the last went unfired.
    let (first, last) = (ticks.iter().min().unwrap(), ticks.iter().max().unwrap());
    assert_eq!(
        ticks.len() as i64,
        (last - first) / 1000 + 1,
        "a tick was skipped: {ticks:?}"
    );
}

/// Each tick a function logged as `fired <scheduledTime>` after
/// `after_ms`, with how late it ran (the line's time less the tick),
/// by tick.
fn lateness(lines: &[serde_json::Value], after_ms: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = lines
        .iter()
        .filter_map(|l| {
            let tick: i64 = l["message"]
                .as_str()?
                .strip_prefix("fired ")?
                .parse()
                .ok()?;
            Some((tick, l["ts_ms"].as_i64()? - tick))
        })
        .filter(|(tick, _)| *tick > after_ms)
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn ticks_missed_while_down_are_skipped_or_caught_up_as_the_schedule_says() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(dir.path(), &[]);
    let logs = "export default { scheduled(c) { console.log('fired ' + c.scheduledTime); } };";
    for (name, catch_up) in [("late", "2"), ("skip", "0")] {
        d.deploy(
            name,
            logs.as_bytes().to_vec(),
            &[
                ("runtime", "js"),
                ("file_name", "index.mjs"),
                ("schedule", EVERY_SECOND),
                ("schedule_catch_up", catch_up),
            ],
        )
        .await;
    }
    for name in ["late", "skip"] {
        d.logs_until(name, |l| !said(l, "fired ").is_empty()).await;
    }
    // Down for 4.5 s: four or five ticks pass with nothing to fire them.
    d.kill9();
    let killed = hearth_core::unix_time_ms();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let d = Daemon::start_in(dir.path(), &[]);
    // A tick after the kill was fired by the restarted daemon. Both
    // functions missed the same ticks; at its first pass it fires the
    // tick that has just come for both, and for `late` the two before it.
    let fired = async |name: &str| {
        let lines = d
            .logs_until(name, |l| {
                lateness(l, killed).len() >= 4 && !said(l, "schedule ").is_empty()
            })
            .await;
        let ticks: Vec<i64> = lateness(&lines, killed).iter().map(|(t, _)| *t).collect();
        (ticks, lines)
    };
    let (late, _) = fired("late").await;
    let (on_time, skip) = fired("skip").await;
    let upto = *late.last().unwrap().min(on_time.last().unwrap());
    let first = on_time[0];
    let mut want = vec![first - 2_000, first - 1_000];
    want.extend(on_time.iter().filter(|t| **t <= upto));
    let late: Vec<i64> = late.into_iter().filter(|t| *t <= upto).collect();
    assert_eq!(
        late, want,
        "the last two missed ticks, no more, then the same as `skip`"
    );
    assert!(
        first - 2_000 > killed,
        "ticks were missed: {first} {killed}"
    );
    let note = &said(&skip, "schedule ")[0];
    assert!(
        note.contains("tick(s) while no member ran; they were skipped")
            && note.contains("schedule_catch_up"),
        "{note}"
    );
}

/// Fetches `/hit/{body}` from `upstream`, then fails unless its KV holds
/// `ok`.
fn flaky(upstream: std::net::SocketAddr) -> String {
    format!(
        "export default {{ async fetch(req) {{ \
         const r = await fetch('http://{upstream}/hit/' + await req.text()); \
         if (!(await hearth.kv.get('ok'))) throw new Error('not yet'); \
         console.log('ran ' + await r.text()); return new Response('done'); }} }};"
    )
}

#[tokio::test]
async fn an_async_call_answers_202_runs_from_the_queue_and_its_failures_retry_then_dead_letter() {
    let d = Daemon::start_with(&[
        "--allow-private-egress",
        "true",
        "--metrics-per-function",
        "true",
    ]);
    let (upstream, hits) = crate::cluster::counting_upstream().await;
    let allow = upstream.to_string();
    d.deploy(
        "flaky",
        flaky(upstream).into_bytes(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("allow_host", &allow),
        ],
    )
    .await;
    // Answered at once, before it ran.
    let r = d
        .post("/fn/admin/flaky")
        .header("hearth-invocation-type", "Event")
        .body("a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let id = r.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (body["invocation_id"].as_str(), body["status"].as_str()),
        (Some(&*id), Some("queued"))
    );

    // Three attempts fail (a backoff of 0.5-1 s, then 1-2 s, between
    // them); then it is a dead letter, which says why.
    let mut dead = serde_json::Value::Null;
    until("the dead letter", Duration::from_secs(20), async || {
        dead = d.get_json("/v1/functions/flaky/dlq").await;
        !dead["dead"].as_array().unwrap().is_empty()
    })
    .await;
    let letter = &dead["dead"][0];
    assert_eq!(
        (letter["id"].as_str(), letter["attempts"].as_i64()),
        (Some(&*id), Some(3))
    );
    let error = letter["error"].as_str().unwrap();
    assert!(
        error.contains("attempt 3 of 3 failed") && error.contains("not yet"),
        "{error}"
    );
    // Each retry was given the first attempt's answer: the call was made
    // once across three attempts.
    assert_eq!(
        hits.lock().unwrap().get("a"),
        Some(&1),
        "{:?}",
        hits.lock().unwrap()
    );
    let lines = d
        .logs_until("flaky", |l| said(l, "queued invocation").len() == 1)
        .await;
    assert!(said(&lines, "queued invocation")[0].contains("hearth dlq flaky"));
    let (ok, out, err) = hearth(&d, &["dlq", "flaky"]);
    assert!(ok, "{err}");
    assert!(out.contains(&id) && out.contains("not yet"), "{out}");
    // /metrics counts it, in sum and for the function.
    until(
        "the dead letter in /metrics",
        Duration::from_secs(10),
        async || {
            let m = d.get_text("/metrics").await;
            m.contains("hearth_queue_dead 1")
                && m.contains("hearth_function_queue_dead{tenant=\"admin\",function=\"flaky\"} 1")
                && m.contains("hearth_queue_ready 0")
        },
    )
    .await;

    // Fixed, it is replayed from a first attempt, and runs.
    let (ok, out, err) = hearth(&d, &["kv", "set", "flaky", "ok", "yes"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = hearth(&d, &["dlq", "replay", "flaky"]);
    assert!(ok, "{err}");
    assert!(out.contains("queued 1 dead letter"), "{out}");
    d.logs_until("flaky", |l| !said(l, "ran hit a").is_empty())
        .await;
    assert!(
        d.get_json("/v1/functions/flaky/dlq").await["dead"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Every attempt is taped under the id the caller was given: three
    // failures, then the run.
    let mut statuses = Vec::new();
    until(
        "the tapes of every attempt",
        Duration::from_secs(20),
        async || {
            let list = d.get_json("/v1/functions/flaky/recordings?limit=100").await;
            statuses = list["recordings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["id"] == id.as_str())
                .map(|r| r["status"].as_i64().unwrap_or(0))
                .collect();
            statuses.len() == 4
        },
    )
    .await;
    statuses.sort();
    assert_eq!(statuses, [200, 500, 500, 500]);

    // `hearth invoke --async` queues one too; a purge empties the list.
    let (ok, out, err) = hearth(&d, &["kv", "rm", "flaky", "ok"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = hearth(&d, &["invoke", "flaky", "--async", "-d", "b"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"status\":\"queued\""), "{out}");
    until(
        "the second dead letter",
        Duration::from_secs(20),
        async || {
            !d.get_json("/v1/functions/flaky/dlq").await["dead"]
                .as_array()
                .unwrap()
                .is_empty()
        },
    )
    .await;
    let (ok, out, err) = hearth(&d, &["dlq", "purge", "flaky"]);
    assert!(ok, "{err}");
    assert!(out.contains("purged 1"), "{out}");
}
