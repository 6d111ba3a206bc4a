//! A hostile wasi:http component: it spins, eats memory, traps, makes the
//! host hold resources for it, or answers more than a response may carry.
//! Each is stopped by its own function's bound, and the node serves others.

use hearth_test_support::require;
use std::time::{Duration, Instant};

use crate::components::component;
use crate::harness::{Daemon, error_of, spin_times_out_while_ok_answers};

/// A module that answers "ok".
const OK: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "ok")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 2))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

#[tokio::test]
async fn a_spinning_component_is_preempted_and_stopped_at_its_deadline() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[("timeout_ms", "1500")])
        .await;
    d.deploy("ok", OK.as_bytes().to_vec(), &[]).await;
    spin_times_out_while_ok_answers(&d, "/fn/admin/probe/spin", Duration::from_millis(500)).await;
}

#[tokio::test]
async fn a_components_memory_is_capped_at_its_limit() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[("memory_mib", "16")])
        .await;
    let t = Instant::now();
    let resp = d.post("/fn/admin/probe/bomb").send().await.unwrap();
    let (status, kind, message) = error_of(resp).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"), "{message}");
    assert!(message.contains("16 MiB"), "{message}");
    assert!(
        message.contains("malloc failed"),
        "it quotes the stderr: {message}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The next request gets a fresh instance.
    assert_eq!(d.call("probe", "", "").await, (200, "probe\n".into()));
}

#[tokio::test]
async fn a_trapping_component_fails_with_its_trap() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[]).await;
    let resp = d.post("/fn/admin/probe/trap").send().await.unwrap();
    let (status, kind, message) = error_of(resp).await;
    assert_eq!((status, kind.as_str()), (500, "trap"), "{message}");
    assert!(message.contains("unreachable"), "{message}");
}

/// Every `fields` a guest makes lives in the host, outside its linear
/// memory: the store's resource table is capped, so a guest making them in
/// a loop traps at once instead of growing the daemon until its deadline.
#[tokio::test]
async fn host_resources_a_component_makes_are_capped() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[("timeout_ms", "20000")])
        .await;
    let before = d.rss_kib();
    let t = Instant::now();
    let resp = d.post("/fn/admin/probe/fields").send().await.unwrap();
    let (status, kind, message) = error_of(resp).await;
    assert_eq!((status, kind.as_str()), (500, "trap"), "{message}");
    assert!(
        message.contains("more than 1024 wasi resources"),
        "{message}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let grew = d.rss_kib().saturating_sub(before);
    assert!(grew < 12 << 10, "the daemon grew by {grew} KiB");
}

/// A component's bodies stream, so what bounds them is not memory but
/// `--max-stream-bytes`: past it, a request is refused (declared) or cut
/// off (chunked), and a response is cut off, the failure on its tape.
#[tokio::test]
async fn a_streamed_body_past_the_limit_is_cut_off() {
    require!(ComponentTools);
    let d = Daemon::start_with(&["--max-stream-bytes", "1048576"]);
    d.deploy("probe", component("probe"), &[]).await;
    d.deploy("echo", component("echo"), &[]).await;
    let (status, body) = d.call("probe/big", "?1000000", "").await;
    assert_eq!((status, body.len()), (200, 1_000_000));

    // The head has gone when the response passes the limit: the
    // connection is cut, so the caller cannot take a short body for the
    // whole.
    let resp = d.post("/fn/admin/probe/big?3000000").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let read = resp.bytes().await;
    assert!(read.is_err(), "a cut response must not end cleanly");
    logged(&d, "probe", "(response_too_large)").await;

    // Declared past the limit: refused before the function runs.
    let resp = d
        .post("/fn/admin/echo")
        .body(vec![b'x'; 2 << 20])
        .send()
        .await
        .unwrap();
    let (status, kind, message) = error_of(resp).await;
    assert_eq!(
        (status, kind.as_str()),
        (413, "payload_too_large"),
        "{message}"
    );
    assert!(message.contains("--max-stream-bytes"), "{message}");

    // Sent without a length: cut off where it passes the limit. The
    // client reads the echo while it sends (a client that does not would
    // stall the echo's writes, and so its reads, until the deadline).
    let answer = d.post_chunked_reading("/fn/admin/echo", 32).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{:.200}", answer);
    assert!(
        !answer.ends_with("0\r\n\r\n"),
        "2 MiB streamed through a 1 MiB limit ended as a whole response"
    );
    logged(&d, "echo", "(request_too_large)").await;
}

/// A caller that asks for a long response and does not read it: the
/// guest's writes wait once a few chunks are queued, so the daemon holds
/// those, not the response; when the caller goes away the invocation ends
/// as `disconnected` instead of running on to its deadline.
#[tokio::test]
async fn a_caller_that_does_not_read_makes_the_daemon_hold_a_few_chunks() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[("timeout_ms", "60000")])
        .await;
    assert_eq!(d.call("probe", "", "").await.0, 200);
    let before = d.rss_kib();
    let resp = d
        .post("/fn/admin/probe/big?1000000000")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grew = d.rss_kib().saturating_sub(before);
    assert!(
        grew < 32 << 10,
        "the daemon grew by {grew} KiB while its caller read nothing"
    );
    let t = Instant::now();
    drop(resp);
    logged(&d, "probe", "(disconnected)").await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// Waits until `function`'s log has a line containing `text`.
async fn logged(d: &Daemon, function: &str, text: &str) {
    d.logs_until(function, |l| {
        l.iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.contains(text)))
    })
    .await;
}
