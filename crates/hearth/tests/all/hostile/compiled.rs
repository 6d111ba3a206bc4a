//! Compiled js (`docs/js-tier.md`, "Compiled from its traces") is a wasm
//! module the node wrote from a tenant's code, so the tenant steers what
//! it does: it must be held to the function's limits exactly as the
//! isolate and any module are.

use std::time::{Duration, Instant};

use crate::harness::{Daemon, error_of};

/// Loops as many times as the request says.
const LOOP: &str = r#"
export default {
  async fetch(request) {
    const n = Number(await request.text());
    let s = 0;
    for (let i = 0; i < n; i++) s = (s + i * 7) % 1000003;
    return new Response(String(s));
  },
};
"#;

/// Reads the clock as many times as the request says.
const CLOCKS: &str = r#"
export default {
  async fetch(request) {
    const n = Number(await request.text());
    let s = 0;
    for (let i = 0; i < n; i++) s = (s + Date.now()) % 1000003;
    return new Response(String(s));
  },
};
"#;

async fn compiled(d: &Daemon, name: &str) -> bool {
    let list = d.get_json("/v1/functions").await;
    let f = list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .cloned()
        .unwrap();
    assert!(f["not_compiled"].is_null(), "refused: {f}");
    f["compiled"] == "compiled"
}

/// Deploys `source` as `name` and calls it with `warm` until it is
/// compiled.
async fn deploy_compiled(d: &Daemon, name: &str, source: &str, warm: &str) {
    d.deploy(
        name,
        source.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("timeout_ms", "2000"),
        ],
    )
    .await;
    let started = Instant::now();
    while !compiled(d, name).await {
        let (status, text) = d.call(name, "", warm).await;
        assert_eq!(status, 200, "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never compiled"
        );
    }
}

/// A compiled loop that would run for years is stopped at the function's
/// timeout (the wasm tier's epochs), and a compiled clock bomb fails at
/// the tape budget (its clock is the host's), while another function keeps
/// answering; neither answers 200.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_code_is_held_to_the_functions_timeout_and_tape_budget() {
    let budget = 1 << 20;
    let d = Daemon::start_with(&["--max-tape-bytes", &budget.to_string()]);
    deploy_compiled(&d, "loop", LOOP, "200000").await;
    deploy_compiled(&d, "clocks", CLOCKS, "3000").await;

    // 200,000 clock reads: taped, they pass the 1 MiB budget.
    let (status, kind, message) = error_of(d.invoke("clocks", b"200000").await).await;
    assert_eq!(
        (status, kind.as_str()),
        (500, "tape_budget_exceeded"),
        "{message}"
    );
    // A failure is not held against the compiled code: its tape is cut at
    // the budget, so an isolate replaying it would part from it and drop
    // the version (live checks take answers only).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(compiled(&d, "clocks").await, "dropped after the bomb");

    let call = Instant::now();
    let (status, kind, message) = error_of(d.invoke("loop", b"100000000000000").await).await;
    assert_eq!((status, kind.as_str()), (504, "timeout"), "{message}");
    assert!(
        call.elapsed() < Duration::from_secs(10),
        "{:?}",
        call.elapsed()
    );

    assert_eq!(d.invoke("hello", b"").await.status(), 200);
    let metrics = d.get_text("/metrics").await;
    assert!(
        metrics.contains("hearth_js_compiled_diverged_total 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hearth_invocations_total{tier="compiled",outcome="error"} 2"#),
        "both failed in compiled code: {metrics}"
    );
}
