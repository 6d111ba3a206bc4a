//! Always-on recording and replay, end to end: every tier's tape replays
//! identically without touching KV or the network; a changed version's
//! responses are reported; tapes stay with their tenant, are unreadable on
//! disk, and survive `kill -9`.

use hearth_test_support::require;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Daemon, HEARTH, error_of, tar_of};

/// How long the upstream takes to answer: what a timeline must show.
const UPSTREAM_DELAY: Duration = Duration::from_millis(30);

/// An upstream that answers "up#N", N counting its requests, after
/// [`UPSTREAM_DELAY`]: a replay that reached it would be caught.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/data",
        axum::routing::get(move || {
            let n = h.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::time::sleep(UPSTREAM_DELAY).await;
                format!("up#{n}")
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr.to_string(), hits)
}

const SNAPSHOT_JS: &str = r#"
export default {
  async fetch(request) {
    const url = await request.text();
    const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
    await hearth.kv.set("n", String(n));
    const up = await (await fetch(url)).text();
    return new Response(`GREETING n=${n} t=${Date.now()} r=${Math.random()} up=${up}`);
  },
};
"#;

const SNAPSHOT_PY: &str = r#"
import random, time, uuid, hearth
def handler(event, context):
    n = int(hearth.kv.get("n") or 0) + 1
    hearth.kv.set("n", str(n))
    up = hearth.fetch(event["body"]).text
    return {"statusCode": 200,
            "body": f"GREETING n={n} t={time.time()} r={random.random()} u={uuid.uuid4()} up={up}"}
"#;

const SNAPSHOT_NODE: &str = r#"
exports.handler = async (event) => {
  const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
  await hearth.kv.set("n", String(n));
  const up = await (await hearth.fetch(event.body)).text();
  return { statusCode: 200, body: `GREETING n=${n} t=${Date.now()} r=${Math.random()} up=${up}` };
};
"#;

/// Deploys version `greeting` of the snapshot function in `tier`.
async fn deploy_snapshot(
    d: &Daemon,
    tier: &str,
    greeting: &str,
    allow: &str,
    dir: &std::path::Path,
) {
    let with = |src: &str| src.replace("GREETING", greeting).into_bytes();
    match tier {
        "wasm" => {
            let define = format!("-DGREETING=\"{greeting}\"");
            let code = crate::examples_c::build_with("snapshot", dir, &[&define]);
            d.deploy("snap-wasm", code, &[("allow_host", allow)]).await;
        }
        "js" => {
            d.deploy(
                "snap-js",
                with(SNAPSHOT_JS),
                &[
                    ("runtime", "js"),
                    ("file_name", "index.mjs"),
                    ("allow_host", allow),
                ],
            )
            .await;
        }
        "python" => {
            d.deploy(
                "snap-python",
                with(SNAPSHOT_PY),
                &[
                    ("runtime", "python"),
                    ("file_name", "handler.py"),
                    ("allow_host", allow),
                ],
            )
            .await;
        }
        "node" => {
            let src = String::from_utf8(with(SNAPSHOT_NODE)).unwrap();
            d.deploy(
                "snap-node",
                tar_of(&[("index.js", &src)]),
                &[
                    ("runtime", "node"),
                    ("file_name", "fn.tar"),
                    ("allow_host", allow),
                ],
            )
            .await;
        }
        _ => unreachable!(),
    }
}

async fn recordings(d: &Daemon, name: &str, query: &str) -> Vec<Value> {
    let v = d
        .get_json(&format!("/v1/functions/{name}/recordings{query}"))
        .await;
    v["recordings"].as_array().cloned().unwrap_or_default()
}

/// Waits until `name` has `n` recordings (batched recording writes within
/// one flush interval); newest first.
async fn wait_recordings(d: &Daemon, name: &str, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let r = recordings(d, name, "").await;
        if r.len() >= n {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{name} never had {n} recordings: {:?}",
        recordings(d, name, "").await
    );
}

async fn tape_of_each_tier_replays_identically_and_a_new_version_is_diffed(tier: &str) {
    let tmp = tempfile::tempdir().unwrap();
    // The upstream is on loopback, which only an operator's flag opens.
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let (up, hits) = upstream().await;
    let name = format!("snap-{tier}");
    deploy_snapshot(&d, tier, "v1", &up, tmp.path()).await;
    let url = format!("http://{up}/data");
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let resp = d
            .post(&format!("/fn/admin/{name}"))
            .body(url.clone())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 200, "{text}");
        bodies.push(text.trim_end().to_string());
    }
    assert!(bodies[1].starts_with("v1 n=2 "), "{bodies:?}");
    assert!(
        bodies[1].ends_with("up=200:up#2") || bodies[1].ends_with("up=up#2"),
        "{bodies:?}"
    );
    let tapes = wait_recordings(&d, &name, 2).await;
    assert_eq!(tapes[0]["tier"], tier_of(tier));
    let id = tapes[0]["id"].as_str().unwrap();

    // The timeline names every kind of host call.
    let show = d.get_json(&format!("/v1/recordings/{id}")).await;
    let calls: Vec<&str> = show["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    for kind in ["clock.wall", "random", "kv.get", "kv.set", "http.fetch"] {
        assert!(
            calls.iter().any(|c| c.starts_with(kind)),
            "{kind} in {calls:?}"
        );
    }
    calls_are_timed(&show);

    let report = d.replay(id).await;
    assert_eq!(report["identical"], true, "{report:#}");
    assert_eq!(
        report["replayed"]["body"]["text"]
            .as_str()
            .unwrap()
            .trim_end(),
        bodies[1]
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the replay did not reach upstream"
    );
    let count = d.invoke_body(&name, url.clone()).await;
    assert!(
        count.starts_with("v1 n=3 "),
        "the replay's kv.set wrote nothing: {count}"
    );

    // A new version, replayed on the newest two tapes (n=2 and n=3): every
    // response changed.
    wait_recordings(&d, &name, 3).await;
    deploy_snapshot(&d, tier, "v2", &up, tmp.path()).await;
    let resp = d
        .post(&format!("/v1/functions/{name}/replay?against=2&last=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["replayed"], 2, "{v:#}");
    assert_eq!(v["changed"], 2, "{v:#}");
    let diff = v["results"][0]["diff"].as_str().unwrap();
    assert!(
        diff.contains("-v1 n=2 ") && diff.contains("+v2 n=2 "),
        "{diff}"
    );
    // And the old version still replays its own tape identically.
    assert_eq!(d.replay(id).await["identical"], true);
}

/// The KV and HTTP calls of a timeline say when they ran and for how
/// long, in order and within the invocation; the fetch took at least the
/// upstream's delay; clocks and randomness carry no timing.
fn calls_are_timed(show: &Value) {
    let duration = show["duration_us"].as_u64().unwrap();
    let mut last_at = 0;
    for c in show["calls"].as_array().unwrap() {
        let call = c["call"].as_str().unwrap();
        let effect = call.starts_with("kv.") || call.starts_with("http.");
        assert_eq!(c["at_us"].is_u64(), effect, "{c}");
        if !effect {
            continue;
        }
        let (at, took) = (c["at_us"].as_u64().unwrap(), c["took_us"].as_u64().unwrap());
        assert!(at >= last_at, "in order: {show:#}");
        assert!(at + took <= duration, "within its invocation: {show:#}");
        if call.starts_with("http.fetch") {
            assert!(took >= UPSTREAM_DELAY.as_micros() as u64, "{c}");
        }
        last_at = at + took;
    }
}

fn tier_of(runtime: &str) -> &str {
    match runtime {
        "python" | "node" => "process",
        t => t,
    }
}

#[tokio::test]
async fn wasm_tapes_replay_identically_and_a_new_version_is_diffed() {
    tape_of_each_tier_replays_identically_and_a_new_version_is_diffed("wasm").await;
}

#[tokio::test]
async fn js_tapes_replay_identically_and_a_new_version_is_diffed() {
    tape_of_each_tier_replays_identically_and_a_new_version_is_diffed("js").await;
}

#[tokio::test]
async fn python_tapes_replay_identically_and_a_new_version_is_diffed() {
    require!(Python);
    tape_of_each_tier_replays_identically_and_a_new_version_is_diffed("python").await;
}

#[tokio::test]
async fn node_tapes_replay_identically_and_a_new_version_is_diffed() {
    tape_of_each_tier_replays_identically_and_a_new_version_is_diffed("node").await;
}

#[tokio::test]
async fn a_code_change_that_asks_for_other_calls_is_named_as_a_divergence() {
    let d = Daemon::start();
    for _ in 0..2 {
        assert_eq!(d.invoke("counter", b"").await.status(), 200);
    }
    let id = wait_recordings(&d, "counter", 2).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // echo makes no KV calls: replaying counter's tape against it diverges
    // at the first call the tape holds.
    d.deploy("counter", crate::harness::example("echo.wat"), &[])
        .await;
    let r = d
        .post(&format!("/v1/recordings/{id}/replay?version=2"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(r["identical"], false);
    assert_eq!(r["divergence"]["at"], 1, "{r:#}");
    assert!(
        r["divergence"]["recorded"]
            .as_str()
            .unwrap()
            .starts_with("kv.get"),
        "{r:#}"
    );
    assert!(
        r["verdict"]
            .as_str()
            .unwrap()
            .contains("diverged at call 1"),
        "{r:#}"
    );
}

#[tokio::test]
async fn exported_tapes_replay_from_a_file_and_edited_or_cut_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start();
    d.invoke("counter", b"").await;
    let id = wait_recordings(&d, "counter", 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Through the CLI, as the README shows.
    let cli = |args: &[&str]| {
        std::process::Command::new(HEARTH)
            .arg("--data-dir")
            .arg(&d.dir)
            .args(args)
            .output()
            .unwrap()
    };
    let out = cli(&["replay", "--export", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tape = tmp.path().join("case.tape");
    std::fs::write(&tape, &out.stdout).unwrap();
    let out = cli(&["replay", "--file", tape.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("identical"));
    let out = cli(&["recordings", "show", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kv.get \"count\"") && text.contains("kv.set"),
        "{text}"
    );

    let good = out_of(&cli(&["replay", "--export", &id]));
    let edited = String::from_utf8(good.clone()).unwrap().replacen(
        "\"method\":\"POST\"",
        "\"method\":\"PUT\"",
        1,
    );
    for (bad, why) in [
        (edited.into_bytes(), "checksum"),
        (good[..good.len() / 2].to_vec(), "truncated"),
        (b"\x00\x01garbage".to_vec(), "not a Hearth tape"),
    ] {
        let (status, kind, msg) =
            error_of(d.post("/v1/replay").body(bad).send().await.unwrap()).await;
        assert_eq!((status, kind.as_str()), (400, "bad_request"), "{msg}");
        assert!(msg.contains(why), "{msg}");
    }
}

fn out_of(o: &std::process::Output) -> Vec<u8> {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout.clone()
}

#[tokio::test]
async fn tenants_see_only_their_own_tapes_and_tapes_are_encrypted_on_disk() {
    let d = Daemon::start();
    let body = "a-secret-request-body-0123456789";
    let resp = d.post("/fn/admin/echo").body(body).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), body);
    let id = wait_recordings(&d, "echo", 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let other = d.create_tenant("other").await;
    let as_other = |rb: reqwest::RequestBuilder| rb.bearer_auth(&other).send();
    let list: Value = as_other(
        d.http
            .get(format!("{}/v1/functions/echo/recordings", d.url)),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(list["recordings"], serde_json::json!([]), "{list}");
    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/recordings/{id}")),
        (reqwest::Method::GET, format!("/v1/recordings/{id}/export")),
        (reqwest::Method::POST, format!("/v1/recordings/{id}/replay")),
    ] {
        let resp = as_other(d.http.request(method, format!("{}{path}", d.url)))
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    // The owner can read it, and the bytes on disk do not show it.
    assert_eq!(
        d.get_json(&format!("/v1/recordings/{id}")).await["request"]["body"]["text"],
        body
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(d.dir.join("recordings/segments")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        seen += bytes.len();
        assert!(!bytes.windows(8).any(|w| w == b"a-secret"));
    }
    assert!(seen > 100, "the tape is on disk ({seen} bytes)");
    let status = d.get_json("/v1/status").await;
    let recording = &status["recording"];
    assert!(
        recording["tapes_written"].as_u64().unwrap() >= 1,
        "{status:#}"
    );
    assert!(
        recording["disk_bytes"].as_u64().unwrap() >= seen as u64 / 2,
        "{status:#}"
    );
    assert_eq!(recording["durability"], "batched");
    // The one invocation is the one tape the recorder was handed.
    let metrics = d.get_text("/metrics").await;
    assert!(
        metrics.lines().any(|l| l == "hearth_tapes_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn with_sync_durability_every_acknowledged_invocation_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut d = Daemon::start_in(&dir, &["--record-durability", "sync"]);
    let acked: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (http, url, acked) = (d.http.clone(), d.url.clone(), acked.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let Ok(resp) = http
                    .post(format!("{url}/fn/admin/echo"))
                    .body("x")
                    .send()
                    .await
                else {
                    break;
                };
                if resp.status() != 200 {
                    break;
                }
                let id = resp.headers()["hearth-invocation-id"]
                    .to_str()
                    .unwrap()
                    .to_string();
                if resp.text().await.is_err() {
                    break;
                }
                acked.lock().unwrap().push(id);
            }
        }));
    }
    // Killed under load: once 100 answers are in.
    crate::harness::until("100 answers", Duration::from_secs(30), async || {
        acked.lock().unwrap().len() >= 100
    })
    .await;
    d.kill9();
    for w in workers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    let d = Daemon::start_in(&dir, &[]);
    let listed = recordings(&d, "echo", "?limit=100000").await;
    let ids: std::collections::HashSet<&str> =
        listed.iter().map(|t| t["id"].as_str().unwrap()).collect();
    let missing: Vec<_> = acked
        .iter()
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged tapes lost",
        missing.len(),
        acked.len()
    );
    // And every one of them reads back.
    for id in acked.iter().take(20) {
        assert_eq!(
            d.get_json(&format!("/v1/recordings/{id}")).await["id"],
            id.as_str()
        );
    }
}
