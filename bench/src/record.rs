//! `hearth-bench record [N] [THREADS]`: what recording costs per invocation, in
//! process and without the HTTP noise of `bench/record.sh`: the handover
//! on the invocation's thread (`Recorder::record`, which encodes the tape
//! into a shard), and the writer's share (a flush: block assembly, zstd,
//! encryption, append, sync, index), each per tape. Both are CPU time
//! (this thread's clock, the writer thread's schedstat), not wall time:
//! on this shared machine a run's wall time moved by a third from one
//! run to the next.
//!
//! The tape is the one `hello` makes under `wrk`: a `GET /` with a `host`
//! header, no host calls, a 16-byte `text/plain` answer. With THREADS
//! above 1, that many threads hand tapes over at once (as a node's
//! workers do), and the handover is their CPU time per tape.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hearth_core::{InvocationId, Request, Response, Tier};
use hearth_host::Tape;
use hearth_record::{Archive, OutcomeRef, RecordConfig, Recorder, RecordingRef};
use hearth_store::SqliteStore;

/// Tapes handed over between two flushes: well under the queue's bound,
/// so none is dropped.
const BATCH: usize = 5_000;

pub fn run(n: usize, threads: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("db"))?;
    let archive = Arc::new(Archive::open(
        &dir.path().join("rec"),
        Arc::new(store.clone()),
        Arc::new(store),
    )?);
    let recorder = Recorder::open(
        archive,
        RecordConfig {
            // Flushes come from this loop, between timed batches.
            flush_interval: Duration::from_secs(3600),
            ..RecordConfig::default()
        },
    )?;
    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        query: String::new(),
        headers: vec![("host".into(), "127.0.0.1:40697".into())],
        body: Bytes::new(),
    };
    let response = Response {
        status: 200,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: Bytes::from_static(b"hello from wasm\n"),
    };
    let tape = Tape::default();
    let artifact = "ab".repeat(32);

    let writer_thread = find_thread("hearth-recorder")?;
    let writer0 = thread_run_time(&writer_thread)?;
    // `threads` invocation threads hand tapes over at once, as a node's
    // workers do; between batches they wait while one flushes.
    let per_thread = n.div_ceil(threads);
    let batch = BATCH.div_ceil(threads);
    let barrier = std::sync::Barrier::new(threads);
    let handover: Duration = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (recorder, barrier) = (&recorder, &barrier);
                let (request, response, tape, artifact) = (&request, &response, &tape, &artifact);
                scope.spawn(move || -> anyhow::Result<Duration> {
                    let rt = tokio::runtime::Builder::new_current_thread().build()?;
                    let mut spent = Duration::ZERO;
                    let mut done = 0;
                    while done < per_thread {
                        let batch = batch.min(per_thread - done);
                        // Made by the invocation whether or not it is taped.
                        let ids: Vec<InvocationId> =
                            (0..batch).map(|_| InvocationId::new()).collect();
                        let t0 = thread_cpu_time();
                        for invocation in &ids {
                            // What `Node::record` does per invocation: the
                            // id as hex, the start time from the id, the
                            // tape by reference.
                            let mut id = [0u8; 32];
                            let id = invocation.0.simple().encode_lower(&mut id);
                            ready(recorder.record(RecordingRef {
                                id,
                                tenant: "admin",
                                function: "hello",
                                version: 1,
                                artifact,
                                tier: Tier::Wasm,
                                started_ms: invocation.unix_ms().unwrap_or(0),
                                duration_us: 40,
                                request,
                                tape,
                                outcome: OutcomeRef::Response(response),
                                streamed: None,
                            }))?;
                        }
                        spent += thread_cpu_time() - t0;
                        done += batch;
                        if barrier.wait().is_leader() {
                            rt.block_on(recorder.flush())?;
                        }
                        barrier.wait();
                    }
                    Ok(spent)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .sum::<anyhow::Result<Duration>>()
    })?;
    let n = per_thread * threads;
    let writer = thread_run_time(&writer_thread)? - writer0;
    let stats = recorder.stats();
    let per = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
    println!(
        "| tapes | threads handing over | handover per tape | writer per tape | bytes on disk per tape |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| {n} | {threads} | {:.0} ns | {:.0} ns | {:.1} B |",
        per(handover),
        per(writer),
        stats.bytes.load(std::sync::atomic::Ordering::Relaxed) as f64 / n as f64
    );
    recorder.close();
    Ok(())
}

/// The value of a future that is ready at once, as a batched handover is
/// (entering a runtime per tape would cost more than the handover).
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("a batched handover never waits"),
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `/proc/self/task/TID` of this process's thread named `name` (a new
/// thread names itself, so it may take a moment to show).
fn find_thread(name: &str) -> anyhow::Result<PathBuf> {
    for _ in 0..100 {
        for task in std::fs::read_dir("/proc/self/task")? {
            let path = task?.path();
            if std::fs::read_to_string(path.join("comm"))?.trim() == name {
                return Ok(path);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    anyhow::bail!("no thread named {name}")
}

/// Time `task` has spent on a CPU (the first field of its schedstat).
fn thread_run_time(task: &Path) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(task.join("schedstat"))?;
    let ns: u64 = stat.split_whitespace().next().unwrap_or("0").parse()?;
    Ok(Duration::from_nanos(ns))
}
