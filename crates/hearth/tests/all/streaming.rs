//! Bodies that stream through a wasi:http component: a gigabyte through
//! the echo in flat memory, and what the tape keeps of streamed bodies.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::components::component;
use crate::harness::Daemon;

/// A body of `chunks` chunks of 64 KiB, each filled with its index (so a
/// chunk lost, repeated or reordered changes the hash).
pub fn generated(chunks: u64) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::iter(0..chunks).map(|i| Ok(vec![i as u8; 64 << 10]))
}

fn sha256_of_generated(chunks: u64) -> Vec<u8> {
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
struct PeakRss {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    fn watch(d: &Daemon) -> PeakRss {
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

    fn peak_kib(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.peak.load(Ordering::Relaxed)
    }
}

#[tokio::test]
async fn a_gigabyte_streams_through_a_component_in_flat_memory() {
    let d = Daemon::start();
    d.deploy("echo", component("echo"), &[("timeout_ms", "240000")])
        .await;
    // Warm: the component is loaded before memory is measured.
    assert_eq!(d.call("echo", "", "warm").await, (200, "warm".into()));
    let before = d.rss_kib();
    let watch = PeakRss::watch(&d);

    const CHUNKS: u64 = 16 * 1024; // 1 GiB
    let resp = d
        .post("/fn/admin/echo")
        .body(reqwest::Body::wrap_stream(generated(CHUNKS)))
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
    assert_eq!(len, CHUNKS << 16);
    assert_eq!(hash.finalize().to_vec(), sha256_of_generated(CHUNKS));
    // Buffered, the body alone would be 1 GiB (twice over, in and out).
    let grew_mib = peak.saturating_sub(before) / 1024;
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
