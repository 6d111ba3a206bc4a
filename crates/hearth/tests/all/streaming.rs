//! Bodies that stream through a wasi:http component and a CGI module: a
//! gigabyte through the echo in flat memory, and what the tape keeps of
//! streamed bodies.

use hearth_test_support::require;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::components::component;
use crate::harness::{Daemon, example};

/// A body of `chunks` chunks of 64 KiB, each filled with its index (so a
/// chunk lost, repeated or reordered changes the hash).
pub(crate) fn generated(
    chunks: u64,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::iter(0..chunks).map(|i| Ok(vec![i as u8; 64 << 10]))
}

pub(crate) fn sha256_of_generated(chunks: u64) -> Vec<u8> {
    let mut h = Sha256::new();
    for i in 0..chunks {
        h.update(vec![i as u8; 64 << 10]);
    }
    h.finalize().to_vec()
}

/// The BLAKE3 hash a tape's digest gives the same body, in hex.
fn blake3_of_generated(chunks: u64) -> String {
    let mut h = blake3::Hasher::new();
    for i in 0..chunks {
        h.update(&vec![i as u8; 64 << 10]);
    }
    h.finalize().to_hex().to_string()
}

/// Samples the daemon's resident memory until dropped; the highest seen.
pub(crate) struct PeakRss {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    pub(crate) fn watch(d: &Daemon) -> PeakRss {
        let pid = d.pid();
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(crate::harness::rss_kib_of(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        PeakRss {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    pub(crate) fn peak_kib(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.peak.load(Ordering::Relaxed)
    }
}

/// Streams `chunks` of [`generated`] to `path` on `d` and reads the answer
/// as it comes: asserts it is an echo of them, chunked, and returns how far
/// `d`'s resident memory rose meanwhile, in MiB.
pub(crate) async fn echo_through(d: &Daemon, path: &str, chunks: u64) -> u64 {
    let before = d.rss_kib();
    let watch = PeakRss::watch(d);
    let resp = d
        .post(path)
        .body(reqwest::Body::wrap_stream(generated(chunks)))
        .timeout(Duration::from_secs(240))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let mut hash = Sha256::new();
    let mut len = 0u64;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("the response streams whole");
        len += chunk.len() as u64;
        hash.update(&chunk);
    }
    let peak = watch.peak_kib();
    assert_eq!(len, chunks << 16);
    assert_eq!(hash.finalize().to_vec(), sha256_of_generated(chunks));
    peak.saturating_sub(before) / 1024
}

#[tokio::test]
async fn a_gigabyte_streams_through_a_component_in_flat_memory() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("echo", component("echo"), &[("timeout_ms", "240000")])
        .await;
    // Warm: the component is loaded before memory is measured.
    assert_eq!(d.call("echo", "", "warm").await, (200, "warm".into()));
    const CHUNKS: u64 = 16 * 1024; // 1 GiB
    let grew_mib = echo_through(&d, "/fn/admin/echo", CHUNKS).await;
    // Buffered, the body alone would be 1 GiB (twice over, in and out).
    assert!(grew_mib < 64, "the daemon grew by {grew_mib} MiB");

    // The tape keeps the start of each body, its length and its hash.
    let id = d.newest_tape("echo", 2).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    let streamed = &tape["streamed"];
    assert_eq!(streamed["request"]["len"], CHUNKS << 16, "{streamed}");
    assert_eq!(streamed["response"]["len"], CHUNKS << 16, "{streamed}");
    assert_eq!(streamed["response"]["blake3"], blake3_of_generated(CHUNKS));
    assert_eq!(
        tape["request"]["body"]["bytes"],
        64 << 10,
        "{}",
        tape["request"]
    );
    // Its request cannot be given to the function again: the tape says so.
    let resp = d
        .post(&format!("/v1/recordings/{id}/replay"))
        .send()
        .await
        .unwrap();
    let (status, _, message) = crate::harness::error_of(resp).await;
    assert_eq!(status, 400, "{message}");
    assert!(
        message.contains("streamed a request body of 1073741824 bytes"),
        "{message}"
    );
}

#[tokio::test]
async fn a_streamed_invocation_whose_bodies_the_tape_holds_replays_identically() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("echo", component("echo"), &[]).await;
    // Within what a tape keeps of a body (64 KiB), in pieces.
    let pieces = futures::stream::iter(0..5u8).map(|i| Ok::<_, std::io::Error>(vec![i; 10_000]));
    let resp = d
        .post("/fn/admin/echo")
        .body(reqwest::Body::wrap_stream(pieces))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.bytes().await.unwrap().len(), 50_000);
    let id = d.newest_tape("echo", 1).await;
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");

    // A response longer than the tape keeps is compared by its start, its
    // length and its hash.
    d.deploy("probe", component("probe"), &[]).await;
    let (status, body) = d.call("probe/big", "?200000", "").await;
    assert_eq!((status, body.len()), (200, 200_000));
    let id = d.newest_tape("probe", 1).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    assert_eq!(tape["streamed"]["response"]["len"], 200_000, "{tape}");
    assert_eq!(tape["outcome"]["body"]["bytes"], 64 << 10);
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");
}

/// A CGI module that answers 201 with a header block, then ten 64 KiB
/// pieces of `a`: more than one piece of stdout, so it streams.
const PIECES: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "Status: 201 Created\r\nContent-Type: text/x-pieces\r\n\r\n")
  (func (export "_start") (local $i i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 52))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (memory.fill (i32.const 1024) (i32.const 97) (i32.const 65536))
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 65536))
    (loop $again
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $again (i32.lt_u (local.get $i) (i32.const 10))))))"#;

#[tokio::test]
async fn a_module_streams_its_stdin_and_stdout() {
    let d = Daemon::start();
    let streams = [("stream", "true"), ("timeout_ms", "120000")];
    d.deploy("echo", example("echo.wat"), &streams).await;
    assert_eq!(d.call("echo", "", "warm").await, (200, "warm".into()));

    // 256 MiB through the echo: buffered, the daemon would hold it twice.
    const CHUNKS: u64 = 4 * 1024;
    let grew_mib = echo_through(&d, "/fn/admin/echo", CHUNKS).await;
    assert!(grew_mib < 64, "the daemon grew by {grew_mib} MiB");
    let id = d.newest_tape("echo", 2).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    assert_eq!(tape["streamed"]["response"]["len"], CHUNKS << 16);
    assert_eq!(
        tape["streamed"]["response"]["blake3"],
        blake3_of_generated(CHUNKS)
    );

    // Output that ends within one piece is answered whole, with its length.
    let resp = d.post("/fn/admin/echo").body("short").send().await.unwrap();
    assert_eq!(resp.headers()["content-length"], "5");
    assert!(resp.headers().get("transfer-encoding").is_none());
    assert_eq!(resp.text().await.unwrap(), "short");

    // A longer one streams, its CGI header block still its head; the tape
    // keeps its start, and a replay compares the rest by its digest.
    d.deploy("pieces", PIECES.as_bytes().to_vec(), &streams)
        .await;
    let resp = d.post("/fn/admin/pieces").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["content-type"], "text/x-pieces");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let body = resp.bytes().await.unwrap();
    assert_eq!(body.len(), 10 << 16);
    assert!(body.iter().all(|&b| b == b'a'));
    let id = d.newest_tape("pieces", 1).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    assert_eq!(tape["streamed"]["response"]["len"], 10 << 16, "{tape}");
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");
}

/// Echoes its request as it arrives, through a ReadableStream of its own.
const JS_ECHO: &str = r#"export default {
  async fetch(request) {
    const reader = request.body.getReader();
    return new Response(new ReadableStream({
      async pull(c) { const { value, done } = await reader.read(); if (done) c.close(); else c.enqueue(value); },
    }), { headers: { "content-type": "application/octet-stream" } });
  },
};
"#;

/// Answers with ten pieces from a generator, then (`?fail`) throws.
const JS_PIECES: &str = r#"export default {
  async fetch(request) {
    const fail = new URL(request.url).search === "?fail";
    async function* pieces() {
      for (let i = 0; i < 10; i++) yield new TextEncoder().encode(`piece ${i}\n`);
      if (fail) throw new Error("broke after ten pieces");
    }
    return new Response(ReadableStream.from(pieces()), { status: 201, headers: { "x-made": "by-a-stream" } });
  },
};
"#;

#[tokio::test]
async fn a_js_function_streams_its_request_and_response() {
    require!(Python);
    let d = Daemon::start();
    let js = |file| [("runtime", "js"), ("file_name", file), ("stream", "true")];
    d.deploy("echo", JS_ECHO.as_bytes().to_vec(), &js("echo.mjs"))
        .await;
    assert_eq!(d.call("echo", "", "warm").await, (200, "warm".into()));

    // 64 MiB through the isolate, chunk by chunk, in the daemon's flat memory.
    const CHUNKS: u64 = 1024;
    let grew_mib = echo_through(&d, "/fn/admin/echo", CHUNKS).await;
    assert!(grew_mib < 64, "the daemon grew by {grew_mib} MiB");
    let id = d.newest_tape("echo", 2).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    assert_eq!(tape["streamed"]["response"]["len"], CHUNKS << 16, "{tape}");

    // A generator's pieces leave as they are made, under the function's head.
    d.deploy("pieces", JS_PIECES.as_bytes().to_vec(), &js("pieces.mjs"))
        .await;
    let resp = d.post("/fn/admin/pieces").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["x-made"], "by-a-stream");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let text = resp.text().await.unwrap();
    assert_eq!(text.lines().count(), 10);
    assert!(
        text.starts_with("piece 0\n") && text.ends_with("piece 9\n"),
        "{text}"
    );
    // Its small tape replays identically.
    let id = d.newest_tape("pieces", 1).await;
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");
    // A stream that fails after its head cuts the body off: never a short 201.
    let resp = d.post("/fn/admin/pieces?fail").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert!(
        resp.bytes().await.is_err(),
        "a cut response reads as broken"
    );

    // Without `stream`, the same function answers whole, with its length.
    d.deploy(
        "pieces-whole",
        JS_PIECES.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "pieces.mjs")],
    )
    .await;
    let resp = d.post("/fn/admin/pieces-whole").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert!(resp.headers().get("transfer-encoding").is_none());
    let length: usize = resp.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(resp.text().await.unwrap().len(), length);

    // The Workers way: a TransformStream written after the handler returned.
    const TICKS: &str = r#"export default {
  async fetch() {
    const { readable, writable } = new TransformStream();
    const writer = writable.getWriter();
    const text = new TextEncoder();
    (async () => {
      for (let i = 0; i < 5; i++) {
        await writer.write(text.encode(`tick ${i}\n`));
        await new Promise((r) => setTimeout(r, 10));
      }
      await writer.close();
    })();
    return new Response(readable, { headers: { "content-type": "text/plain" } });
  },
};
"#;
    d.deploy("ticks", TICKS.as_bytes().to_vec(), &js("ticks.mjs"))
        .await;
    let resp = d.post("/fn/admin/ticks").send().await.unwrap();
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let ticks = "tick 0\ntick 1\ntick 2\ntick 3\ntick 4\n";
    assert_eq!(resp.text().await.unwrap(), ticks);
    let whole = [("runtime", "js"), ("file_name", "ticks.mjs")];
    d.deploy("ticks-whole", TICKS.as_bytes().to_vec(), &whole)
        .await;
    let resp = d.post("/fn/admin/ticks-whole").send().await.unwrap();
    let id = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(resp.text().await.unwrap(), ticks);
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "js", "the isolate ran it, not Node.js");

    // What the isolate cannot do fails: Node.js cannot take over a request
    // that is being read.
    let needs_node =
        b"export default { async fetch() { return new Response(Buffer.from('x')); } };";
    d.deploy("node-only", needs_node.to_vec(), &js("node.mjs"))
        .await;
    let (status, kind, message) =
        crate::harness::error_of(d.post("/fn/admin/node-only").send().await.unwrap()).await;
    assert_eq!(
        (status, kind.as_str()),
        (500, "function_error"),
        "{message}"
    );
    assert!(
        message.contains("Buffer") && message.contains("without stream"),
        "{message}"
    );

    // Streaming is refused at deploy where a tier cannot do it.
    let resp = d
        .deploy_raw(
            "py",
            b"def handler(event, context):\n    return 'hi'\n".to_vec(),
            &[
                ("runtime", "python"),
                ("file_name", "h.py"),
                ("stream", "true"),
            ],
        )
        .await;
    let (status, _, message) = crate::harness::error_of(resp).await;
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("stream=true applies to"), "{message}");
}

/// A Lambda response-streaming handler, unchanged: ten pieces, a pause
/// between them, then (`?big`) 16 MiB more.
const NODE_PIECES: &str = r#"export const handler = awslambda.streamifyResponse(async (event, responseStream, context) => {
  responseStream = awslambda.HttpResponseStream.from(responseStream, { statusCode: 201, headers: { "x-made": "by-lambda" } });
  for (let i = 0; i < 10; i++) {
    responseStream.write(`piece ${i}\n`);
    await new Promise((r) => setTimeout(r, 1));
  }
  if (event.rawQueryString === "big") {
    const block = Buffer.alloc(1 << 20, 97);
    for (let i = 0; i < 16; i++) {
      if (!responseStream.write(block)) await new Promise((r) => responseStream.once("drain", r));
    }
  }
  responseStream.end();
});
"#;

#[tokio::test]
async fn a_lambda_streaming_handler_streams_from_node() {
    require!(Node);
    let d = Daemon::start();
    let node = |stream| {
        let mut q = vec![("runtime", "node"), ("file_name", "index.mjs")];
        if stream {
            q.push(("stream", "true"));
        }
        q
    };
    d.deploy("pieces", NODE_PIECES.as_bytes().to_vec(), &node(true))
        .await;
    let resp = d.post("/fn/admin/pieces").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["x-made"], "by-lambda");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let text = resp.text().await.unwrap();
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(
        text.starts_with("piece 0\n") && text.ends_with("piece 9\n"),
        "{text}"
    );

    // 16 MiB more, with the daemon's memory flat.
    let before = d.rss_kib();
    let watch = PeakRss::watch(&d);
    let resp = d.post("/fn/admin/pieces?big").send().await.unwrap();
    let body = resp.bytes().await.unwrap();
    let grew_mib = watch.peak_kib().saturating_sub(before) / 1024;
    assert_eq!(body.len(), 80 + (16 << 20));
    assert!(body[80..].iter().all(|&b| b == b'a'));
    assert!(grew_mib < 64, "the daemon grew by {grew_mib} MiB");

    // Without `stream`, the same handler is answered whole.
    d.deploy(
        "pieces-whole",
        NODE_PIECES.as_bytes().to_vec(),
        &node(false),
    )
    .await;
    let resp = d.post("/fn/admin/pieces-whole").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["content-length"], "80");
    assert_eq!(resp.text().await.unwrap(), text);
}

/// Server-sent events from a CGI module: the head and a first event, a
/// 1.5 s sleep (`poll_oneoff`), a second event.
const EVENTS: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 256) "Content-Type: text/event-stream\n\ndata: 1\n\n")
  (data (i32.const 512) "data: 2\n\n")
  (func $write (param $at i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (call $write (i32.const 256) (i32.const 42))
    ;; one subscription at 64: the monotonic clock, 1.5 s from now
    (i64.store (i32.const 64) (i64.const 7))
    (i32.store8 (i32.const 72) (i32.const 0))
    (i32.store (i32.const 80) (i32.const 1))
    (i64.store (i32.const 88) (i64.const 1500000000))
    (i64.store (i32.const 96) (i64.const 0))
    (i32.store16 (i32.const 104) (i32.const 0))
    (drop (call $poll (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 160)))
    (call $write (i32.const 512) (i32.const 9))))"#;

#[tokio::test]
async fn a_streaming_modules_output_leaves_when_it_waits() {
    let d = Daemon::start();
    d.deploy("events", EVENTS.as_bytes().to_vec(), &[("stream", "true")])
        .await;
    let started = std::time::Instant::now();
    let resp = d.post("/fn/admin/events").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert_eq!(first, "data: 1\n\n");
    assert!(first_at < Duration::from_millis(1200), "{first_at:?}");
    let second = body.next().await.unwrap().unwrap();
    assert_eq!(second, "data: 2\n\n");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(body.next().await.is_none());
}
