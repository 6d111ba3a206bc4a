//! Work after the response: `ctx.waitUntil` (JavaScript in the isolate
//! and in Node.js) and `hearth.wait_until` (Python) answer the caller
//! first and run the work after, on the same tape (docs/events.md).

use std::time::Duration;

use hearth_test_support::require;

use crate::events::said;
use crate::harness::{Daemon, until};

/// A Workers module that answers, then (1.5 s later) writes `after`.
pub(crate) const WORKERS: &str = "export default { async fetch(req, env, ctx) { \
    ctx.waitUntil((async () => { \
      await new Promise((r) => setTimeout(r, 1500)); \
      await env.hearth.kv.set('after', 'js'); })()); \
    return new Response('answered'); } };";

/// The same in Node.js, as a Lambda handler with `hearth.waitUntil`.
const NODE: &str = "exports.handler = async () => { \
    hearth.waitUntil((async () => { \
      await new Promise((r) => setTimeout(r, 1500)); \
      await hearth.kv.set('after', 'node'); })()); \
    return { statusCode: 200, body: 'answered' }; };\n";

/// The same in Python, with `hearth.wait_until`.
const PYTHON: &str = "import time\nimport hearth\n\n\
def later():\n    time.sleep(1.5)\n    hearth.kv.set('after', 'python')\n\n\
def handler(event, context):\n    hearth.wait_until(later)\n    \
return {'statusCode': 200, 'body': 'answered'}\n";

/// `name`'s KV value at `key`, if it has one.
pub(crate) async fn kv(d: &Daemon, token: &str, name: &str, key: &str) -> Option<String> {
    let r = d
        .http
        .get(format!("{}/v1/functions/{name}/kv/{key}", d.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    match r.status().as_u16() {
        200 => Some(r.text().await.unwrap()),
        404 => None,
        other => panic!("reading {name}'s {key}: {other}"),
    }
}

#[tokio::test]
async fn each_runtime_answers_before_its_work_after_the_response_which_is_taped() {
    require!(Python, Node);
    let d = Daemon::start();
    for (name, file, runtime, code, wrote) in [
        ("js", "index.mjs", "js", WORKERS, "js"),
        ("node", "index.js", "node", NODE, "node"),
        ("py", "handler.py", "python", PYTHON, "python"),
    ] {
        d.deploy(
            name,
            code.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", file)],
        )
        .await;
        let r = d.invoke(name, b"").await;
        assert_eq!(r.status(), 200, "{name}");
        let id = r.headers()["hearth-invocation-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(r.text().await.unwrap(), "answered");
        // The caller has its answer; the work is still waiting 1.5 s.
        assert_eq!(
            kv(&d, &d.token, name, "after").await,
            None,
            "{name} answered only after its work"
        );
        until(
            &format!("{name}'s work after the response"),
            Duration::from_secs(20),
            async || kv(&d, &d.token, name, "after").await.as_deref() == Some(wrote),
        )
        .await;
        // One tape: the answer, then the work's KV write after it.
        let tape = d.recording_when_written(&id).await;
        let calls: Vec<String> = tape["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call"].as_str().unwrap().to_string())
            .collect();
        let answered = calls
            .iter()
            .position(|c| c.contains("answered 200 to the caller"))
            .unwrap_or_else(|| panic!("{name}: no answer on the tape: {calls:?}"));
        let wrote = calls
            .iter()
            .position(|c| c.starts_with("kv.set"))
            .unwrap_or_else(|| panic!("{name}: no write on the tape: {calls:?}"));
        assert!(answered < wrote, "{name}: {calls:?}");
        assert!(
            tape["calls"][answered]["at_us"].as_u64().unwrap()
                < tape["calls"][wrote]["at_us"].as_u64().unwrap(),
            "{name}: the timeline has the answer before the write"
        );
        assert_eq!(tape["outcome"]["kind"], "ok", "{name}: {}", tape["outcome"]);
    }
}

#[tokio::test]
async fn a_rejected_promise_is_logged_and_a_throwing_handlers_work_still_runs() {
    let d = Daemon::start();
    let code = "export default { async fetch(req, env, ctx) { \
        ctx.waitUntil(Promise.reject(new Error('boom'))); \
        ctx.waitUntil(env.hearth.kv.set('second', 'ran')); \
        if (new URL(req.url).searchParams.has('throw')) throw new Error('handler failed'); \
        return new Response('answered'); } };";
    d.deploy(
        "rejects",
        code.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let (status, body) = d.call("rejects", "", "").await;
    assert_eq!((status, body.as_str()), (200, "answered"));
    let lines = d
        .logs_until("rejects", |l| {
            !said(l, "a promise passed to waitUntil rejected: Error: boom").is_empty()
        })
        .await;
    assert!(!lines.is_empty());
    until("the work beside it", Duration::from_secs(10), async || {
        kv(&d, &d.token, "rejects", "second").await.is_some()
    })
    .await;
    // The handler throws: its error is the answer, and its work ran.
    d.delete("/v1/functions/rejects/kv/second")
        .send()
        .await
        .unwrap();
    let (status, _) = d.call("rejects", "?throw", "").await;
    assert_eq!(status, 500);
    assert_eq!(
        kv(&d, &d.token, "rejects", "second").await.as_deref(),
        Some("ran")
    );
}

/// A wasi:http component that finishes its body and works on: the caller
/// has the whole body at once, and the work follows on the same tape.
#[tokio::test]
async fn a_component_that_finishes_its_body_works_on_after_the_response() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("after", crate::components::component("after"), &[])
        .await;
    let r = d.invoke("after", b"").await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(r.text().await.unwrap(), "answered\n");
    assert_eq!(
        kv(&d, &d.token, "after", "after").await,
        None,
        "the body ended only after the work"
    );
    until(
        "the component's work",
        Duration::from_secs(20),
        async || kv(&d, &d.token, "after", "after").await.as_deref() == Some("component"),
    )
    .await;
    let tape = d.recording_when_written(&id).await;
    let calls: Vec<String> = tape["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap().to_string())
        .collect();
    let answered = calls
        .iter()
        .position(|c| c.contains("answered 200 to the caller"))
        .unwrap_or_else(|| panic!("no answer on the tape: {calls:?}"));
    let wrote = calls
        .iter()
        .position(|c| c.starts_with("kv.set"))
        .unwrap_or_else(|| panic!("no write on the tape: {calls:?}"));
    assert!(answered < wrote, "{calls:?}");
}
