//! Compiled js (`docs/js-tier.md`, "Compiled from its traces") is a wasm
//! module the node wrote from a tenant's code, so the tenant steers what
//! it does: it must be held to the function's limits exactly as the
//! isolate and any module are.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Deploys `source` as `name` (with `extra` options) and calls it with
/// `warm` until it is compiled.
async fn deploy_compiled(d: &Daemon, name: &str, source: &str, extra: &[(&str, &str)], warm: &str) {
    let mut query = vec![
        ("runtime", "js"),
        ("file_name", "index.mjs"),
        ("timeout_ms", "2000"),
    ];
    query.extend_from_slice(extra);
    d.deploy(name, source.as_bytes().to_vec(), &query).await;
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
    deploy_compiled(&d, "loop", LOOP, &[], "200000").await;
    deploy_compiled(&d, "clocks", CLOCKS, &[], "3000").await;

    // 200,000 clock reads: taped, they pass the 1 MiB budget.
    let (status, kind, message) = error_of(d.invoke("clocks", b"200000").await).await;
    assert_eq!(
        (status, kind.as_str()),
        (500, "tape_budget_exceeded"),
        "{message}"
    );
    // A failure is not held against the compiled code: its tape is cut at
    // the budget, so an isolate replaying it would part from it and drop
    // the version (live checks take answers only). What must not come has
    // no event to wait for: it is given a window.
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

/// Sums the list in the JSON request.
const SUM: &str = r#"
export default {
  async fetch(request) {
    const v = await request.json();
    let n = 0;
    for (let i = 0; i < v.list.length; i++) n += v.list[i];
    return new Response(String(n));
  },
};
"#;

/// The compiled JSON parser runs in the sandbox, so hostile JSON meets
/// the sandbox's limits, and what it cannot take goes to the isolate:
/// nesting 100,000 deep leaves at the parser's depth bound (a recursion
/// that deep would overflow the wasm stack and fail the request), and 4
/// MiB of zeros leave at the function's memory limit. Neither is a
/// failure of the compiled code.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_json_leaves_the_compiled_parser_for_the_isolate() {
    let d = Daemon::start();
    let warm = format!(
        r#"{{"list":[{}]}}"#,
        (0..20_000)
            .map(|i| (i % 97).to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    deploy_compiled(&d, "sum", SUM, &[], &warm).await;
    let left = |m: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix("hearth_js_compiled_left_total "))
            .map_or(0, |n| n.trim().parse::<u64>().unwrap())
    };
    let before = left(&d.get_text("/metrics").await);

    let deep = format!(
        r#"{{"list":[1],"deep":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let r = d.post("/fn/admin/sum").body(deep).send().await.unwrap();
    let status = r.status();
    assert!(status != 200 || r.text().await.unwrap() == "1");
    let zeros = format!(r#"{{"list":[{}0]}}"#, "0,".repeat(2 << 20));
    let r = d.post("/fn/admin/sum").body(zeros).send().await.unwrap();
    let status = r.status();
    assert!(status != 200 || r.text().await.unwrap() == "0");

    let metrics = d.get_text("/metrics").await;
    assert_eq!(left(&metrics), before + 2, "{metrics}");
    assert!(
        metrics.contains(r#"hearth_invocations_total{tier="compiled",outcome="error"} 0"#),
        "no failure in compiled code: {metrics}"
    );
    assert_eq!(
        d.call("sum", "", r#"{"list":[2,3]}"#).await,
        (200, "5".into())
    );
}

/// Fetches the URL the request names; answers the status, the text's
/// length and a hash of it.
const RELAY: &str = r#"
export default {
  async fetch(request) {
    const r = await fetch(await request.text());
    const t = await r.text();
    let n = 0;
    for (let i = 0; i < t.length; i++) n = (n * 31 + t.charCodeAt(i)) % 1000003;
    return new Response(r.status + " " + t.length + " " + n);
  },
};
"#;

/// What `RELAY` answers for `text`.
fn relayed(text: &str) -> String {
    let hash = text
        .bytes()
        .fold(0u64, |n, b| (n * 31 + u64::from(b)) % 1_000_003);
    format!("200 {} {hash}", text.len())
}

/// Serves `/small` (200 KB) and `/big` (1.5 MiB, past compiled code's
/// answer room) of text, counting every request.
async fn texts() -> (std::net::SocketAddr, Arc<AtomicUsize>, String, String) {
    let hits = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let text = |n: usize| -> String {
        (0..n)
            .map(|i| (b'a' + (i * 7 % 26) as u8) as char)
            .collect()
    };
    let (small, big) = (text(200_000), text(3 << 19));
    let (s, b) = (small.clone(), big.clone());
    let (h1, h2) = (hits.clone(), hits.clone());
    let app = axum::Router::new()
        .route(
            "/small",
            axum::routing::get(move || {
                h1.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                async move { s }
            }),
        )
        .route(
            "/big",
            axum::routing::get(move || {
                h2.fetch_add(1, Ordering::SeqCst);
                let b = b.clone();
                async move { b }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, hits, small, big)
}

/// A tenant steers the URL its compiled code fetches and the size of the
/// answer. The request goes through the host layer, so the allow-list
/// holds for compiled code as for the isolate (a host outside it is never
/// reached); and an answer past the 1 MiB room compiled code reads it
/// into leaves with the answer kept, so the isolate answers from it
/// without asking again (read past its room, the compiled code would
/// answer garbage).
#[tokio::test(flavor = "multi_thread")]
async fn compiled_fetch_is_held_to_the_allow_list_and_its_answer_to_its_room() {
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let (addr, hits, small, big) = texts().await;
    let (outside, outside_hits, _, _) = texts().await;
    let allowed = addr.to_string();
    let warm = format!("http://{addr}/small");
    deploy_compiled(&d, "relay", RELAY, &[("allow_host", &allowed)], &warm).await;
    assert_eq!(d.call("relay", "", &warm).await, (200, relayed(&small)));
    let left = |m: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix("hearth_js_compiled_left_total "))
            .map_or(0, |n| n.trim().parse::<u64>().unwrap())
    };
    let before = (
        left(&d.get_text("/metrics").await),
        hits.load(Ordering::SeqCst),
    );

    let answer = d.call("relay", "", &format!("http://{addr}/big")).await;
    assert_eq!(answer, (200, relayed(&big)));
    assert_eq!(hits.load(Ordering::SeqCst), before.1 + 1, "asked once");

    let (status, text) = d
        .call("relay", "", &format!("http://{outside}/small"))
        .await;
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains(&format!("outbound HTTP to {outside} is not allowed")),
        "{text}"
    );
    assert_eq!(
        outside_hits.load(Ordering::SeqCst),
        0,
        "a host outside the allow-list was reached"
    );

    let metrics = d.get_text("/metrics").await;
    assert_eq!(left(&metrics), before.0 + 2, "{metrics}");
    assert!(
        metrics.contains(r#"hearth_invocations_total{tier="compiled",outcome="error"} 0"#),
        "no failure in compiled code: {metrics}"
    );
}

/// Compiled modules import their memory and functions from the compiled
/// tier's runtime (`hearth_rt`, a library the wasm tier links: a second
/// instance in the sandbox's store). A tenant's own module may import it
/// too, as it may bundle the same code; but a module that takes the
/// runtime's memory and defines one of its own would hold two memories,
/// each up to the limit: refused at deploy, as is an import the runtime
/// does not export with that type. A module that takes the runtime as
/// compiled modules do runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_module_importing_the_runtime_gets_no_second_memory_and_is_checked_at_deploy() {
    let d = Daemon::start();
    let refused = [
        (
            r#"(module
                 (import "hearth_rt" "memory" (memory 1))
                 (memory $own 1)
                 (export "memory" (memory 0))
                 (func (export "_start")))"#,
            "must import its memory from it and define none",
        ),
        (
            r#"(module
                 (import "hearth_rt" "alloc" (func (param i64) (result i32)))
                 (memory (export "memory") 1)
                 (func (export "_start")))"#,
            "`hearth_rt::alloc` is not a function the library exports",
        ),
        (
            r#"(module
                 (import "hearth_rt" "memory" (memory 1))
                 (import "hearth_rt" "no_such_thing" (func))
                 (export "memory" (memory 0))
                 (func (export "_start")))"#,
            "`hearth_rt::no_such_thing` is not a function the library exports",
        ),
    ];
    for (wat, says) in refused {
        let resp = d
            .post("/v1/functions/lib")
            .query(&[("runtime", "wasm")])
            .body(wat.as_bytes().to_vec())
            .send()
            .await
            .unwrap();
        let (status, _, msg) = error_of(resp).await;
        assert_eq!(status, 400, "{wat}: {msg}");
        assert!(msg.contains(says), "{msg}");
    }
    // The runtime's heap and strings, used as compiled code uses them: a
    // string made by `num_to_str` (`[len: u32][u16 × len]`), its units
    // written out after a CGI head with the module's own WASI.
    let ok = r#"(module
        (import "hearth_rt" "memory" (memory 1))
        (import "hearth_rt" "heap_set" (func $heap_set (param i32)))
        (import "hearth_rt" "num_to_str" (func $num_to_str (param f64) (result i32)))
        (import "wasi_snapshot_preview1" "fd_write"
          (func $fd_write (param i32 i32 i32 i32) (result i32)))
        (export "memory" (memory 0))
        (data (i32.const 61000) "content-type: text/plain\n\n")
        (func (export "_start") (local $s i32) (local $i i32)
          (call $heap_set (i32.const 60000))
          (local.set $s (call $num_to_str (f64.const 0.1)))
          (loop $copy
            (i32.store8
              (i32.add (i32.const 61026) (local.get $i))
              (i32.load16_u offset=4
                (i32.add (local.get $s) (i32.shl (local.get $i) (i32.const 1)))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $copy (i32.lt_u (local.get $i) (i32.load (local.get $s)))))
          (i32.store (i32.const 50000) (i32.const 61000))
          (i32.store (i32.const 50004) (i32.add (i32.const 26) (i32.load (local.get $s))))
          (drop (call $fd_write (i32.const 1) (i32.const 50000) (i32.const 1) (i32.const 50008)))))"#;
    d.deploy("lib", ok.as_bytes().to_vec(), &[("runtime", "wasm")])
        .await;
    assert_eq!(d.call("lib", "", "").await, (200, "0.1".to_string()));
}
