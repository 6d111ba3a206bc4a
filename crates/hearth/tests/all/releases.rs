//! Releases: aliases, promotion, rollback, deploys kept out of traffic,
//! and a kept version's code downloaded, through the API and the CLI.

use crate::cli::hearth;
use crate::harness::{Daemon, JsonExt, error_of, example};

/// Which version answered an invocation of admin's `target`, and its body.
async fn served(d: &Daemon, target: &str) -> (String, String) {
    let resp = d.invoke(target, b"echoed").await;
    assert_eq!(resp.status(), 200, "{target}");
    let version = resp.headers()["hearth-version"]
        .to_str()
        .unwrap()
        .to_string();
    (version, resp.text().await.unwrap())
}

async fn promote(d: &Daemon, name: &str, alias: &str, version: u32) -> reqwest::Response {
    d.post(&format!("/v1/functions/{name}/aliases/{alias}"))
        .json(&serde_json::json!({ "version": version }))
        .send()
        .await
        .unwrap()
}

async fn roll_back(d: &Daemon, name: &str, alias: &str) -> reqwest::Response {
    d.post(&format!("/v1/functions/{name}/aliases/{alias}/rollback"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn live_moves_by_promotion_and_rollback_and_aliases_pin_without_a_redeploy() {
    let d = Daemon::start();
    d.deploy("greet", example("hello.wat"), &[]).await;
    d.deploy("greet", example("echo.wat"), &[]).await;
    let kept = d
        .deploy("greet", example("hello.wat"), &[("promote", "false")])
        .await;
    assert_eq!(
        (kept["version"].as_u64(), kept["live"].as_bool()),
        (Some(3), Some(false))
    );
    assert_eq!(
        kept["url"], "/fn/admin/greet@3",
        "where the kept version answers"
    );
    let hello = "hello from wasm\n".to_string();
    let echoed = "echoed".to_string();
    assert_eq!(
        served(&d, "greet").await,
        ("2".into(), echoed.clone()),
        "3 is not live"
    );
    assert_eq!(served(&d, "greet@3").await, ("3".into(), hello.clone()));

    // Promote 3, then roll back one move at a time: 3 → 2 → 1.
    let moved: serde_json::Value = promote(&d, "greet", "live", 3).await.json().await.unwrap();
    assert_eq!(
        (moved["version"].as_u64(), moved["previous"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(served(&d, "greet").await.0, "3");
    let back = roll_back(&d, "greet", "live").await;
    assert_eq!(back.status(), 200);
    let back: serde_json::Value = back.json().await.unwrap();
    assert_eq!(
        (back["version"].as_u64(), back["rollback"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(served(&d, "greet").await, ("2".into(), echoed.clone()));
    roll_back(&d, "greet", "live").await;
    assert_eq!(served(&d, "greet").await, ("1".into(), hello.clone()));
    let (status, kind, message) = error_of(roll_back(&d, "greet", "live").await).await;
    assert_eq!((status, kind.as_str()), (409, "conflict"), "{message}");
    assert!(message.contains("promote"), "the fix is named: {message}");
    assert_eq!(
        served(&d, "greet").await.0,
        "1",
        "a refused rollback moves nothing"
    );

    // Another alias: by path or header, live stays where it is.
    assert_eq!(promote(&d, "greet", "canary", 2).await.status(), 200);
    assert_eq!(
        served(&d, "greet@canary").await,
        ("2".into(), echoed.clone())
    );
    let by_header = d
        .post("/fn/admin/greet")
        .header("hearth-version", "canary")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.headers()["hearth-version"], "2");
    assert_eq!(served(&d, "greet").await.0, "1");
    let aliases = d.get("/v1/functions/greet/aliases").json_value().await;
    assert_eq!(
        aliases["aliases"],
        serde_json::json!([{"alias": "canary", "version": 2}, {"alias": "live", "version": 1}])
    );
    let versions = d.get("/v1/functions/greet").json_value().await;
    assert_eq!(versions["aliases"], aliases["aliases"]);
    let history = d
        .get("/v1/functions/greet/aliases/live/history")
        .json_value()
        .await;
    let moves: Vec<(u64, bool)> = history["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["version"].as_u64().unwrap(),
                m["rollback"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        moves,
        [(1, true), (2, true), (3, false), (2, false), (1, false)]
    );

    // Bad input: a clear 4xx, and nothing moved.
    for (alias, body, want) in [
        ("Canary", serde_json::json!({"version": 1}), 400),
        ("7", serde_json::json!({"version": 1}), 400),
        ("live", serde_json::json!({"version": 9}), 404),
        ("live", serde_json::json!({"version": "2"}), 422),
        ("live", serde_json::json!({"version": 1, "weight": 5}), 422),
    ] {
        let r = d
            .post(&format!("/v1/functions/greet/aliases/{alias}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "{alias} {body}");
    }
    assert_eq!(
        error_of(roll_back(&d, "greet", "staging").await).await.0,
        404
    );
    assert_eq!(
        error_of(promote(&d, "nobody", "live", 1).await).await.0,
        404
    );
    let (status, _, message) = error_of(d.invoke("greet@staging", b"").await).await;
    assert_eq!(status, 404, "{message}");
    assert!(message.contains("staging"), "{message}");
    assert_eq!(error_of(d.invoke("greet@Nope!", b"").await).await.0, 400);
    assert_eq!(served(&d, "greet").await.0, "1");

    // Another tenant learns nothing from aliases: one 404 for all.
    let other = d.create_tenant("other").await;
    let mut answers = Vec::new();
    for target in ["greet", "greet@canary", "greet@staging", "ghost@canary"] {
        let r = d.invoke_as(&other, "admin", target).send().await.unwrap();
        assert_eq!(r.status(), 404, "{target}");
        let (_, kind, message) = error_of(r).await;
        answers.push((kind, message.replace(target, "NAME")));
    }
    answers.dedup();
    assert_eq!(answers.len(), 1, "{answers:?}");

    // A function deployed only without promotion serves nothing unpinned.
    d.deploy("fresh", example("echo.wat"), &[("promote", "false")])
        .await;
    let (status, _, message) = error_of(d.invoke("fresh", b"").await).await;
    assert_eq!(status, 404);
    assert!(message.contains("hearth promote fresh"), "{message}");
    assert_eq!(served(&d, "fresh@1").await.1, "echoed");
}

#[tokio::test]
async fn a_kept_versions_code_downloads_and_deploys_again_to_the_same_answer() {
    let d = Daemon::start();
    d.deploy("say", example("echo.wat"), &[]).await;
    d.deploy("say", example("hello.wat"), &[]).await;
    let resp = d
        .get("/v1/functions/say/versions/1/code")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    let code = resp.bytes().await.unwrap().to_vec();
    assert!(code.starts_with(b"\0asm"), "the stored module");
    d.deploy("copy", code, &[]).await;
    assert_eq!(served(&d, "copy").await.1, "echoed");
    assert_eq!(
        error_of(
            d.get("/v1/functions/say/versions/7/code")
                .send()
                .await
                .unwrap()
        )
        .await
        .0,
        404
    );
    let other = d.create_tenant("other").await;
    let theirs = d
        .http
        .get(format!("{}/v1/functions/say/versions/1/code", d.url))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(
        theirs.status(),
        404,
        "another tenant's code is not reachable"
    );
}

#[tokio::test]
async fn the_cli_releases_promotes_rolls_back_lists_and_downloads() {
    let d = Daemon::start();
    let dir = crate::harness::crate_dir().join("../../examples/wasm");
    let (hello, echo) = (dir.join("hello.wat"), dir.join("echo.wat"));
    let deploy = |file: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["deploy", file.to_str().unwrap(), "--name", "app"];
        args.extend_from_slice(extra);
        hearth(&d, &args)
    };
    assert!(deploy(&hello, &[]).0);
    let (ok, out, err) = deploy(&echo, &["--no-promote"]);
    assert!(ok, "{err}");
    assert!(out.contains("hearth promote app 2"), "{out}");
    let invoke = |extra: &[&str]| {
        let mut args = vec!["invoke", "app", "-d", "hi"];
        args.extend_from_slice(extra);
        hearth(&d, &args).1
    };
    assert_eq!(invoke(&[]), "hello from wasm\n");
    assert_eq!(invoke(&["--version", "2"]), "hi");

    let (ok, out, err) = hearth(&d, &["promote", "app", "2"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "promoted app@live: version 2 (was version 1)");
    assert_eq!(invoke(&[]), "hi");
    let (ok, out, err) = hearth(&d, &["promote", "app", "1", "--alias", "stable"]);
    assert!(ok, "{err}");
    assert!(out.contains("(was nothing)"), "{out}");
    assert_eq!(invoke(&["--version", "stable"]), "hello from wasm\n");

    let (ok, out, err) = hearth(&d, &["rollback", "app"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "rolled back app@live: version 1 (was version 2)"
    );
    assert_eq!(invoke(&[]), "hello from wasm\n");
    let (ok, _, err) = hearth(&d, &["rollback", "app"]);
    assert!(!ok, "nothing before version 1");
    assert!(
        err.contains("409") && err.contains("promote one instead"),
        "{err}"
    );

    let (ok, out, err) = hearth(&d, &["aliases", "app", "--history", "live"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let row = |alias: &str, version: u32| format!("{alias:<16} {version}");
    assert_eq!(lines[..2], [row("live", 1), row("stable", 1)], "{out}");
    assert!(
        lines[3].ends_with("rolled back app@live: version 1 (was version 2)"),
        "{out}"
    );
    assert!(
        lines[4].ends_with("promoted app@live: version 2 (was version 1)"),
        "{out}"
    );

    let (ok, out, _) = hearth(&d, &["versions", "app"]);
    assert!(ok);
    let row = |v: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(v))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row("1 ").contains("live,stable"), "{out}");

    let saved = tempfile::tempdir().unwrap();
    let path = saved.path().join("v2.wasm");
    let (ok, _, err) = hearth(
        &d,
        &[
            "versions",
            "app",
            "--download",
            "2",
            "-o",
            path.to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    let code = std::fs::read(&path).unwrap();
    assert!(code.starts_with(b"\0asm"));
    d.deploy("again", code, &[]).await;
    assert_eq!(served(&d, "again").await.1, "echoed");
    let (ok, _, err) = hearth(&d, &["versions", "app", "--download", "9", "-o", "-"]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
}

/// `live` split between two versions: the share holds over many calls,
/// a caller's `Hearth-Split-Key` keeps it on one side, `hearth ls` shows
/// it, a replay runs the version the call ran, and a rollback ends it.
#[tokio::test]
async fn a_split_sends_its_share_keeps_keyed_callers_and_replays_the_version_taken() {
    let d = Daemon::start();
    d.deploy("app", example("hello.wat"), &[]).await;
    d.deploy("app", example("echo.wat"), &[("promote", "false")])
        .await;
    let (ok, out, err) = hearth(&d, &["split", "app", "2", "30"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "promoted app@live: version 1, 30% to version 2 (was version 1)"
    );
    let (_, ls, _) = hearth(&d, &["ls"]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("app ") && l.contains("1+2@30%")),
        "{ls}"
    );

    let mut twos = 0;
    let mut an_echo = None;
    for _ in 0..1000 {
        let r = d.invoke("app", b"echoed").await;
        if r.headers()["hearth-version"] == "2" {
            twos += 1;
            an_echo = Some(
                r.headers()["hearth-invocation-id"]
                    .to_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    // 30% of 1,000: 300, with a standard deviation of 14.5.
    assert!((240..=360).contains(&twos), "{twos} of 1000 ran version 2");

    // One key, one side: 3 calls with each of 30 keys, which between
    // them reach both sides (all 30 on one: p < 0.0001).
    let mut sides = std::collections::BTreeSet::new();
    for k in 0..30 {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            let r = d
                .post("/fn/admin/app")
                .header("hearth-split-key", format!("user-{k}"))
                .body("x")
                .send()
                .await
                .unwrap();
            seen.insert(r.headers()["hearth-version"].to_str().unwrap().to_string());
        }
        assert_eq!(seen.len(), 1, "user-{k} saw {seen:?}");
        sides.extend(seen);
    }
    assert_eq!(sides.len(), 2, "keys split between the versions: {sides:?}");

    // The tape keeps the version the split chose: its replay is identical.
    let id = an_echo.expect("some call ran version 2");
    d.recording_when_written(&id).await;
    let replayed = d
        .post(&format!("/v1/recordings/{id}/replay"))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(replayed["identical"], true, "{replayed}");

    // Bad splits are refused, and nothing moves.
    for split in [
        serde_json::json!({"version": 2, "percent": 0}),
        serde_json::json!({"version": 2, "percent": 100}),
        serde_json::json!({"version": 1, "percent": 10}),
    ] {
        let r = d
            .post("/v1/functions/app/aliases/live")
            .json(&serde_json::json!({"version": 1, "split": split}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{split}");
    }
    let r = d
        .post("/v1/functions/app/aliases/live")
        .json(&serde_json::json!({"version": 1, "split": {"version": 7, "percent": 5}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // A rollback ends the split: every call runs version 1 again.
    let (ok, out, err) = hearth(&d, &["rollback", "app"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "rolled back app@live: version 1 (was version 1, 30% to version 2)"
    );
    for _ in 0..50 {
        assert_eq!(served(&d, "app").await.0, "1");
    }
}

/// Version 1 shouts what it is sent; `same` does too, written another
/// way; `other` whispers it; `flaky` shouts, except that `boom` fails.
const SHOUT: &str = "export default { async fetch(req) { \
    return new Response((await req.text()).toUpperCase()); } };";
const SAME: &str = "export default { async fetch(req) { \
    const t = await req.text(); return new Response(t.toUpperCase()); } };";
const OTHER: &str = "export default { async fetch(req) { \
    return new Response((await req.text()).toLowerCase()); } };";
const FLAKY: &str = "export default { async fetch(req) { const t = await req.text(); \
    if (t === 'boom') throw new Error('boom'); return new Response(t.toUpperCase()); } };";

async fn deploy_js(d: &Daemon, code: &str, promote: bool) -> u64 {
    let v = d
        .deploy(
            "say",
            code.as_bytes().to_vec(),
            &[
                ("runtime", "js"),
                ("file_name", "index.mjs"),
                ("promote", if promote { "true" } else { "false" }),
            ],
        )
        .await;
    v["version"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_promotion_replays_lives_tapes_and_refuses_a_version_that_answers_differently() {
    let d = Daemon::start();
    deploy_js(&d, SHOUT, true).await;
    for word in ["alpha", "Beta", "gamma"] {
        let body = d.invoke_body("say", word.to_string()).await;
        assert_eq!(body, word.to_uppercase());
    }
    d.newest_tape("say", 3).await;
    let same = deploy_js(&d, SAME, false).await;
    let other = deploy_js(&d, OTHER, false).await;

    // A version that answers differently is refused, with each tape that
    // differs and its diff; nothing moves.
    let (ok, _, err) = hearth(&d, &["promote", "say", &other.to_string(), "--gate"]);
    assert!(!ok);
    assert!(
        err.contains("gate refused version 3: 3 of 3 tapes"),
        "{err}"
    );
    assert!(
        err.contains("+") && err.contains("alpha"),
        "the diff: {err}"
    );
    let r = d
        .post("/v1/functions/say/aliases/live")
        .json(&serde_json::json!({"version": other, "gate": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let refused: serde_json::Value = r.json().await.unwrap();
    assert_eq!(refused["error"]["kind"], "gate_refused");
    assert_eq!(refused["gate"]["replayed"], 3);
    assert_eq!(refused["gate"]["differing"].as_array().unwrap().len(), 3);
    assert_eq!(refused["gate"]["not_identical"], 3);
    assert_eq!(
        d.invoke_body("say", "x".into()).await,
        "X",
        "live did not move"
    );
    // That call is a fourth tape of version 1; the next gate replays it
    // too, once it is written.
    d.newest_tape("say", 4).await;

    // The same behaviour, written another way, passes and moves.
    let (ok, out, err) = hearth(&d, &["promote", "say", &same.to_string(), "--gate"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("gate: 4 tapes of version 1 replayed against version 2")
            && out.contains("4 identical"),
        "{out}"
    );
    assert!(
        out.contains("promoted say@live: version 2 (was version 1)"),
        "{out}"
    );

    // Differences may be accepted, and are shown; a window with no tapes
    // proves nothing and is refused.
    assert_eq!(d.invoke_body("say", "delta".into()).await, "DELTA");
    d.newest_tape("say", 5).await;
    let (ok, out, err) = hearth(
        &d,
        &[
            "promote",
            "say",
            &other.to_string(),
            "--gate",
            "--accept-diff",
        ],
    );
    assert!(ok, "{err}");
    assert!(err.contains("delta") || err.contains("DELTA"), "{err}");
    assert!(out.contains("differing (accepted)"), "{out}");
    assert_eq!(d.invoke_body("say", "Q".into()).await, "q");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (ok, _, err) = hearth(&d, &["promote", "say", "1", "--gate", "--gate-since", "1s"]);
    assert!(!ok);
    assert!(err.contains("found no tapes"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_steps_up_through_its_gate_and_rolls_back_by_itself_on_a_breach() {
    let d = std::sync::Arc::new(Daemon::start());
    deploy_js(&d, SHOUT, true).await;
    for word in ["one", "two"] {
        d.invoke_body("say", word.to_string()).await;
    }
    d.newest_tape("say", 2).await;
    let flaky = deploy_js(&d, FLAKY, false).await;

    // Traffic during the canary: every third call is `boom`, which the
    // recorded traffic never held, so the gate passes and the canary's
    // own calls fail.
    let (ok, out, err) = canary_under_load(&d, flaky, true).await;
    assert!(!ok, "{out}");
    assert!(out.contains("gate: 2 tapes of version 1"), "{out}");
    assert!(
        err.contains("the canary at 50% breached") && err.contains("back on version 1"),
        "{err}"
    );
    let aliases: serde_json::Value = d.get("/v1/functions/say/aliases").json_value().await;
    assert_eq!(
        aliases["aliases"][0],
        serde_json::json!({"alias": "live", "version": 1}),
        "no split is left behind"
    );

    // A version that fails nothing steps through to every call.
    let same = deploy_js(&d, SAME, false).await;
    let (ok, out, err) = canary_under_load(&d, same, false).await;
    assert!(ok, "{err}");
    assert!(out.contains("canary at 50%: 0 of"), "{out}");
    assert!(out.contains("promoted say@live: version 3"), "{out}");
    assert_eq!(d.invoke_body("say", "z".into()).await, "Z");
}

/// Runs `hearth promote say VERSION --gate --steps 50,100` while calls
/// flow (every third `boom` if `booms`).
async fn canary_under_load(
    d: &std::sync::Arc<Daemon>,
    version: u64,
    booms: bool,
) -> (bool, String, String) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (d, stop) = (d.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            // Calls only once the canary is under way: one taped on
            // version 1 before the gate reads its tapes would be replayed
            // by the gate (a slow machine starts the CLI late).
            let mut split = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if !split {
                    let aliases: serde_json::Value =
                        d.get("/v1/functions/say/aliases").json_value().await;
                    split =
                        aliases["aliases"][0] != serde_json::json!({"alias": "live", "version": 1});
                    if !split {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        continue;
                    }
                }
                let body: &'static [u8] = if booms && n.is_multiple_of(3) {
                    b"boom"
                } else {
                    b"fine"
                };
                d.invoke("say", body).await;
                n += 1;
            }
        })
    };
    let d = d.clone();
    let run = tokio::task::spawn_blocking(move || {
        hearth(
            &d,
            &[
                "promote",
                "say",
                &version.to_string(),
                "--gate",
                "--steps",
                "50,100",
                "--step-wait",
                "2s",
                "--max-error-rate",
                "5",
            ],
        )
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await.unwrap();
    run
}
