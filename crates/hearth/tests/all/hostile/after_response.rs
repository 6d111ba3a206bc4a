//! A tenant uses work after the response (`waitUntil`) to run forever,
//! to hold more of the node than its calls would, or to outlive its
//! function's removal.

use std::time::{Duration, Instant};

use hearth_test_support::require;

use crate::after_response::kv;
use crate::harness::{Daemon, until};

/// Invocations working after their response, from `/metrics`.
async fn after_response(d: &Daemon) -> u64 {
    let metrics = d.get_text("/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("hearth_invocations_after_response "))
        .expect("the gauge is exported")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn work_after_the_response_ends_at_the_functions_timeout() {
    require!(Python);
    let d = Daemon::start();
    let js = "export default { async fetch(req, env, ctx) { \
        ctx.waitUntil((async () => { \
          await new Promise((r) => setTimeout(r, 50)); for (;;) {} })()); \
        return new Response('answered'); } };";
    let python = "import hearth\n\ndef spin():\n    while True:\n        pass\n\n\
        def handler(event, context):\n    hearth.wait_until(spin)\n    return 'answered'\n";
    for (name, file, runtime, code) in [
        ("js", "index.mjs", "js", js),
        ("py", "handler.py", "python", python),
    ] {
        d.deploy(
            name,
            code.as_bytes().to_vec(),
            &[
                ("runtime", runtime),
                ("file_name", file),
                ("timeout_ms", "1000"),
            ],
        )
        .await;
        let r = d.invoke(name, b"").await;
        assert_eq!(r.status(), 200, "{name}");
        // It spins after its answer, until its timeout and no longer.
        until(
            &format!("{name}'s spinning work to be ended"),
            Duration::from_secs(10),
            async || after_response(&d).await == 0,
        )
        .await;
        let id = r.headers()["hearth-invocation-id"]
            .to_str()
            .unwrap()
            .to_string();
        let tape = d.recording_when_written(&id).await;
        assert_eq!(tape["outcome"]["kind"], "timeout", "{name}: {tape}");
        // Its next call is answered as any.
        let r = d.invoke(name, b"").await;
        assert_eq!(r.status(), 200, "{name}");
    }
}

#[tokio::test]
async fn a_tenant_has_only_its_bound_of_invocations_working_after_their_response() {
    let d = Daemon::start_with(&["--max-after-response-per-tenant", "1"]);
    // Answers, then writes its request's body as a key 1.5 s later.
    let code = "export default { async fetch(req, env, ctx) { \
        const key = await req.text(); \
        ctx.waitUntil((async () => { \
          await new Promise((r) => setTimeout(r, 1500)); \
          await env.hearth.kv.set(key, 'done'); })()); \
        return new Response('answered'); } };";
    let other = d.create_tenant("other").await;
    for token in [&d.token, &other] {
        let r = d
            .deploy_as(
                token,
                "later",
                &[("runtime", "js"), ("file_name", "index.mjs")],
                code,
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let call = async |token: &str, tenant: &str, key: &'static str| {
        let r = d
            .invoke_as(token, tenant, "later")
            .body(key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        kv(&d, token, "later", key).await
    };
    // The first answers before its work; the tenant's second, while the
    // first still works, waits for its own work.
    assert_eq!(call(&d.token, "admin", "a").await, None, "answered early");
    assert_eq!(
        call(&d.token, "admin", "b").await.as_deref(),
        Some("done"),
        "the second answered only after its work"
    );
    // Another tenant's bound is its own.
    assert_eq!(call(&other, "other", "c").await, None, "answered early");
}

#[tokio::test]
async fn work_after_the_response_stops_when_its_function_is_removed() {
    require!(Python);
    let d = Daemon::start();
    // Each would work a minute after answering.
    let js = "export default { async fetch(req, env, ctx) { \
        ctx.waitUntil((async () => { \
          for (let i = 0; ; i++) { \
            await env.hearth.kv.set('tick', String(i)); \
            await new Promise((r) => setTimeout(r, 50)); } })()); \
        return new Response('answered'); } };";
    let python = "import time\nimport hearth\n\ndef tick():\n    i = 0\n    while True:\n        \
        hearth.kv.set('tick', str(i))\n        i += 1\n        time.sleep(0.05)\n\n\
        def handler(event, context):\n    hearth.wait_until(tick)\n    return 'answered'\n";
    for (name, file, runtime, code) in [
        ("js", "index.mjs", "js", js),
        ("py", "handler.py", "python", python),
    ] {
        d.deploy(
            name,
            code.as_bytes().to_vec(),
            &[
                ("runtime", runtime),
                ("file_name", file),
                ("timeout_ms", "60000"),
            ],
        )
        .await;
        let r = d.invoke(name, b"").await;
        assert_eq!(r.status(), 200, "{name}");
        until(
            &format!("{name}'s work to start"),
            Duration::from_secs(10),
            async || kv(&d, &d.token, name, "tick").await.is_some(),
        )
        .await;
        assert_eq!(after_response(&d).await, 1, "{name}");
        let removed = Instant::now();
        let r = d
            .delete(&format!("/v1/functions/{name}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{name}");
        until(
            &format!("{name}'s work to stop with its removal"),
            Duration::from_secs(5),
            async || after_response(&d).await == 0,
        )
        .await;
        eprintln!(
            "figure: {name}'s work after the response stopped {:?} after its function was removed",
            removed.elapsed()
        );
    }
}
