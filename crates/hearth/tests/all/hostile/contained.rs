//! Bad input and hostile functions: refused or contained with a clear
//! status and message, while other functions keep serving.

use hearth_test_support::require;
use std::time::{Duration, Instant};

use crate::harness::{Daemon, JsonExt, error_of, example};

#[tokio::test]
async fn invalid_and_non_wasi_modules_are_refused_with_the_reason() {
    let d = Daemon::start();
    let (status, _, msg) = error_of(
        d.deploy_raw("bad", b"\0asm\x01\0\0\0garbage".to_vec(), &[])
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(msg.contains("invalid module"), "{msg}");
    let (status, _, msg) = error_of(
        d.deploy_raw(
            "bad",
            b"(module (memory (export \"memory\") 1))".to_vec(),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(msg.contains("_start"), "{msg}");
    let lib = b"(module (import \"env\" \"puts\" (func)) (memory (export \"memory\") 1) (func (export \"_start\")))";
    let (status, _, msg) = error_of(d.deploy_raw("bad", lib.to_vec(), &[]).await).await;
    assert_eq!(status, 400);
    assert!(msg.contains("env") && msg.contains("puts"), "{msg}");
    // A name the route takes but the rule refuses is a 400 naming the
    // rule; one with a `/` is another route, which does not exist.
    let (status, _, msg) = error_of(d.deploy_raw("BadName", example("hello.wat"), &[]).await).await;
    assert_eq!(status, 400, "{msg}");
    assert!(
        msg.contains("\"BadName\"") && msg.contains("a-z, 0-9"),
        "{msg}"
    );
    let (status, _, msg) =
        error_of(d.deploy_raw("Bad/Name", example("hello.wat"), &[]).await).await;
    assert_eq!(status, 404, "{msg}");
    let (status, _, msg) = error_of(
        d.deploy_raw("big", example("hello.wat"), &[("memory_mib", "100000")])
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(msg.contains("memory limit"), "{msg}");
    let (status, _, msg) = error_of(
        d.deploy_raw("typo", example("hello.wat"), &[("memroy_mib", "1")])
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(msg.contains("memroy_mib"), "{msg}");
    // Nothing half-made was registered.
    let fns: serde_json::Value = d.get("/v1/functions").json_value().await;
    assert_eq!(
        fns["functions"].as_array().unwrap().len(),
        3,
        "only the examples"
    );
}

/// A bundle whose entry names hold control characters (the `bundle` fuzz
/// target's find: a NUL passed the path check and then panicked the
/// deploy) is refused with a 400 naming the entry, and the node goes on.
#[tokio::test]
async fn bundle_names_with_control_characters_are_refused_at_deploy() {
    require!(Node);
    let d = Daemon::start();
    for name in ["a\0b.js", "index.js\n"] {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, b"exports.handler = async () => 'hi'\n").unwrap();
        let upload = zip.finish().unwrap().into_inner();
        let resp = d
            .post("/v1/functions/named")
            .query(&[("runtime", "node")])
            .body(upload)
            .send()
            .await
            .unwrap();
        let (status, kind, msg) = error_of(resp).await;
        assert_eq!(
            (status, kind.as_str()),
            (400, "bad_request"),
            "{name:?}: {msg}"
        );
        assert!(msg.contains("control character"), "{msg}");
    }
    d.deploy("hello", example("hello.wat"), &[]).await;
}

#[tokio::test]
async fn unknown_functions_and_oversized_bodies() {
    let d = Daemon::start_with(&["--max-body-bytes", "1024"]);
    let (status, _, msg) = error_of(d.invoke("nope", b"").await).await;
    assert_eq!(status, 404);
    assert!(msg.contains("admin/nope"), "{msg}");
    let big = vec![b'x'; 4096];
    let resp = d
        .http
        .post(format!("{}/fn/admin/echo", d.url))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    // Chunked bodies without a length are cut off too.
    let stream = futures_stream(vec![b'y'; 4096]);
    let resp = d
        .http
        .post(format!("{}/fn/admin/echo", d.url))
        .body(stream)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let small = d
        .http
        .post(format!("{}/fn/admin/echo", d.url))
        .body(vec![b'z'; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(small.status(), 200);
}

fn futures_stream(data: Vec<u8>) -> reqwest::Body {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        data.chunks(512).map(|c| Ok(c.to_vec())).collect();
    reqwest::Body::wrap_stream(futures::stream::iter(chunks))
}

#[tokio::test]
async fn traps_overflows_floods_and_memory_bombs_get_clear_errors() {
    let d = Daemon::start_with(&["--max-response-bytes", "1048576"]);
    d.deploy("trap", example("trap.wat"), &[]).await;
    d.deploy("deep", example("deep.wat"), &[]).await;
    d.deploy("flood", example("flood.wat"), &[]).await;
    d.deploy("bomb", example("membomb.wat"), &[("memory_mib", "16")])
        .await;

    let (status, kind, msg) = error_of(d.invoke("trap", b"").await).await;
    assert_eq!((status, kind.as_str()), (500, "trap"));
    assert!(msg.contains("divide by zero"), "{msg}");
    let (status, _, msg) = error_of(d.invoke("deep", b"").await).await;
    assert_eq!(status, 500);
    assert!(msg.contains("stack overflow"), "{msg}");
    let (status, kind, msg) = error_of(d.invoke("flood", b"").await).await;
    assert_eq!((status, kind.as_str()), (500, "response_too_large"));
    assert!(msg.contains("1048576"), "{msg}");
    let (status, kind, msg) = error_of(d.invoke("bomb", b"").await).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"));
    assert!(msg.contains("16 MiB"), "{msg}");
    assert_eq!(
        d.invoke("hello", b"").await.status(),
        200,
        "the node still serves"
    );
}

#[tokio::test]
async fn spinning_functions_hit_their_deadline_while_hello_keeps_answering() {
    let d = Daemon::start();
    d.deploy("spin", example("spin.wat"), &[("timeout_ms", "3000")])
        .await;
    // More spinners than this machine has cores.
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let req = d.post("/fn/admin/spin").send();
            tokio::spawn(async move {
                let started = Instant::now();
                let resp = req.await.unwrap();
                (
                    resp.status().as_u16(),
                    resp.json::<serde_json::Value>().await.unwrap(),
                    started.elapsed(),
                )
            })
        })
        .collect();
    d.until_in_flight(4).await;
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        let resp = d.invoke("hello", b"").await;
        assert_eq!(resp.status(), 200);
        worst = worst.max(started.elapsed());
    }
    // Fair scheduling: hello waits at most a few 5 ms slices, not 3 s.
    assert!(
        worst < Duration::from_millis(1000),
        "hello took {worst:?} while spinners ran"
    );
    for s in spinners {
        let (status, body, took) = s.await.unwrap();
        assert_eq!(status, 504);
        assert_eq!(body["error"]["kind"], "timeout");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("3000 ms")
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}

/// Reads what an earlier invocation would have left behind (its mark in
/// the data segment's page, a mutable global, a page it zero-filled, and
/// 100 KiB past its initial memory: more than a pool slot keeps resident,
/// so both of the slot's reset paths are crossed), then leaves the same
/// marks itself. Prints `clean` or `dirty`.
const SNOOP: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (data (i32.const 1000) "a")
  (data (i32.const 2000) "clean\n")
  (data (i32.const 2010) "dirty\n")
  (func (export "_start")
    (local $dirty i32)
    (drop (memory.grow (i32.const 3)))
    (local.set $dirty
      (i32.or
        (i32.or (i32.ne (i32.load8_u (i32.const 1000)) (i32.const 97))
                (i32.ne (global.get $g) (i32.const 0)))
        (i32.or (i32.load8_u (i32.const 40000))
                (i32.or (i32.load8_u (i32.const 131072))
                        (i32.load8_u (i32.const 233000))))))
    (i32.store8 (i32.const 1000) (i32.const 88))
    (i32.store8 (i32.const 40000) (i32.const 1))
    (memory.fill (i32.const 131072) (i32.const 1) (i32.const 102400))
    (global.set $g (i32.const 1))
    (i32.store (i32.const 0) (select (i32.const 2010) (i32.const 2000) (local.get $dirty)))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

#[tokio::test]
async fn nothing_an_invocation_writes_survives_into_the_next() {
    let d = Daemon::start();
    d.deploy("snoop", SNOOP.as_bytes().to_vec(), &[]).await;
    // One after another (the pool hands a version the slot it just
    // used), then in parallel.
    for i in 0..20 {
        let body = d.invoke_body("snoop", String::new()).await;
        assert_eq!(
            body, "clean\n",
            "invocation {i} saw an earlier one's memory"
        );
    }
    let calls = (0..32).map(|_| d.invoke_body("snoop", String::new()));
    for body in futures::future::join_all(calls).await {
        assert_eq!(body, "clean\n");
    }
}

/// Calls Hearth's WASI with pointers past its one page of memory, one
/// that wraps past 4 GiB, and a scatter list longer than any host walks,
/// and answers with each call's errno (two digits each).
const BAD_POINTERS: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 1024) "Content-Type: text/plain\n\n")
  (global $at (mut i32) (i32.const 1050))
  (func $say (param $errno i32)
    (i32.store8 (global.get $at) (i32.add (i32.const 48) (i32.div_u (local.get $errno) (i32.const 10))))
    (i32.store8 (i32.add (global.get $at) (i32.const 1)) (i32.add (i32.const 48) (i32.rem_u (local.get $errno) (i32.const 10))))
    (i32.store8 (i32.add (global.get $at) (i32.const 2)) (i32.const 32))
    (global.set $at (i32.add (global.get $at) (i32.const 3))))
  (func (export "_start")
    ;; the iovec list itself past the end, wrapping
    (call $say (call $fd_write (i32.const 1) (i32.const 0xFFFFFFF8) (i32.const 1) (i32.const 8)))
    ;; an iovec whose buffer runs past the end
    (i32.store (i32.const 0) (i32.const 65530))
    (i32.store (i32.const 4) (i32.const 100))
    (call $say (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $say (call $args_get (i32.const 65535) (i32.const 65534)))
    (call $say (call $random_get (i32.const 65500) (i32.const 100)))
    (call $say (call $clock (i32.const 0) (i64.const 0) (i32.const 65532)))
    (call $say (call $poll (i32.const 65520) (i32.const 0) (i32.const 1) (i32.const 0)))
    ;; two billion iovecs
    (call $say (call $fd_write (i32.const 1) (i32.const 16) (i32.const 0x7FFFFFFF) (i32.const 8)))
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.sub (global.get $at) (i32.const 1024)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// A module that hands Hearth's WASI addresses outside its memory gets
/// `EFAULT` (21) for each, and `EINVAL` (28) for a scatter list past
/// 1024 entries: the host neither reads nor writes outside the guest's
/// memory, nor panics (which would be a 500), nor walks two billion
/// entries. The `wasi` fuzz target tries every call so, with any
/// arguments.
#[tokio::test]
async fn wasi_calls_with_pointers_outside_memory_get_efault() {
    let d = Daemon::start();
    d.deploy("pointers", BAD_POINTERS.as_bytes().to_vec(), &[])
        .await;
    let (status, body) = d.call("pointers", "", "").await;
    assert_eq!((status, body.as_str()), (200, "21 21 21 21 21 21 28 "));
}

/// What a handler reports it imported decides what its zygote imports
/// next — so a zygote every tenant shares (`--colocation full`) never
/// learns: one tenant's handler (whose report it controls) would choose
/// what other tenants' handlers inherit. The tenant's own zygote does.
#[tokio::test]
async fn a_zygote_every_tenant_shares_does_not_learn_from_one_tenants_handler() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    crate::process::write_wheel_with(
        wheels.path(),
        "tinypkg",
        "1.2.0",
        &[("__init__.py", ""), ("extra.py", "PATCHED = True\n")],
        &[],
    );
    let code = "from tinypkg import extra\ndef handler(e, c):\n    return 'ok'\n";
    let bundle = crate::harness::tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    use crate::harness::zygote_modules_learned as learned;
    for (mode, learns) in [("full", false), ("tenant", true)] {
        let d = Daemon::start_with(&[
            "--offline-packages",
            wheels.path().to_str().unwrap(),
            "--colocation",
            mode,
        ]);
        d.deploy(
            "f",
            bundle.clone(),
            &[("runtime", "python"), ("file_name", "fn.tar")],
        )
        .await;
        assert_eq!(d.call("f", "", "{}").await.0, 200);
        let deadline = Instant::now() + Duration::from_secs(if learns { 30 } else { 3 });
        while learned(&d).await == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(learned(&d).await > 0, learns, "colocation {mode}");
    }
}

/// A Lambda streaming handler whose caller leaves mid-stream may still be
/// writing: its process is not kept, so the next invocation does not read
/// the last one's leftover chunks.
#[tokio::test]
async fn a_handler_left_mid_stream_does_not_serve_the_next_invocation() {
    require!(Node);
    const ENDLESS: &str = r#"export const handler = awslambda.streamifyResponse(async (event, responseStream) => {
  if (event.rawQueryString !== "endless") { responseStream.end("short and whole"); return; }
  const block = Buffer.alloc(64 << 10, 98);
  for (;;) {
    if (!responseStream.write(block)) await new Promise((r) => responseStream.once("drain", r));
  }
});
"#;
    let d = Daemon::start();
    let q = [
        ("runtime", "node"),
        ("file_name", "index.mjs"),
        ("stream", "true"),
    ];
    d.deploy("endless", ENDLESS.as_bytes().to_vec(), &q).await;
    for _ in 0..3 {
        let resp = d.post("/fn/admin/endless?endless").send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        let first = futures::StreamExt::next(&mut body).await.unwrap().unwrap();
        assert!(first.iter().all(|&b| b == b'b'));
        drop(body);
        let resp = d.post("/fn/admin/endless").send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), "short and whole");
    }
}

/// A package runs its tenant's code in the zygote that imports it, and
/// that code can end the zygote: here a timer, two seconds on (a handler
/// forked from the zygote has no such thread). The zygote's death takes
/// only its own tenant's handlers with it; the next call finds it dead,
/// drops it from the tree and forks from a new one — a 200, not the
/// "broken pipe" of every call after it.
#[tokio::test]
async fn a_package_that_ends_its_zygote_costs_its_function_a_new_zygote_not_its_calls() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    crate::process::write_wheel_of(
        wheels.path(),
        "ender",
        "1.0",
        "import os, threading\nthreading.Timer(2.0, os._exit, (1,)).start()\n",
    );
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let bundle = crate::harness::tar_of(&[
        (
            "handler.py",
            "import ender\ndef handler(e, c):\n    return 'ok'\n",
        ),
        ("requirements.txt", "ender==1.0\n"),
    ]);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    d.deploy("ender", bundle, &q).await;
    d.deploy(
        "hello",
        b"def handler(e, c):\n    return 'hello'\n".to_vec(),
        &[("runtime", "python"), ("file_name", "handler.py")],
    )
    .await;
    let mut ended = Vec::new();
    for round in 0..2 {
        let (status, body) = d.call("ender", "", "{}").await;
        assert_eq!(
            (status, body.as_str()),
            (200, "ok"),
            "round {round}: {body}"
        );
        let zygote = package_zygote_pid(&d).await;
        assert!(!ended.contains(&zygote), "a dead zygote was kept: {zygote}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while process_lives(zygote) {
            assert!(Instant::now() < deadline, "zygote {zygote} lives");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ended.push(zygote);
        assert_eq!(d.call("hello", "", "").await, (200, "hello".into()));
    }
}

/// The pid of the node's one package zygote.
async fn package_zygote_pid(d: &Daemon) -> i64 {
    let status = d.get_json("/v1/status").await;
    let zygotes = status["tiers"]["process"]["details"]["zygotes"]
        .as_array()
        .unwrap();
    let packaged: Vec<i64> = zygotes
        .iter()
        .filter(|z| z["packages"].as_u64() != Some(0))
        .map(|z| z["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(packaged.len(), 1, "{zygotes:?}");
    packaged[0]
}

/// Whether process `pid` runs: not gone, and not exiting (an exiting
/// process has let go of its memory, and with it its command line; a
/// namespace's PID 1 stays exiting until the last of its paused handlers
/// is gone).
fn process_lives(pid: i64) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| !line.is_empty())
}
