//! The recorder against a real SQLite index and real segment files.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hearth_core::{FunctionSpec, InvocationId, Request, Response, Runtime, Tier};
use hearth_host::{HostEvent, Tape};
use hearth_record::{Archive, Durability, Outcome, RecordConfig, RecordError, Recorder, Recording};
use hearth_store::{MAX_PINS_PER_FUNCTION, SqliteStore, Store, TapeIndex, TapePin, TapeQuery};

/// A caller's `traceparent` (W3C's example).
const CALLERS: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn recording(tenant: &str, function: &str, body: &str, ok: bool, started_ms: i64) -> Recording {
    Recording {
        id: hearth_core::InvocationId::new().to_string(),
        tenant: tenant.into(),
        function: function.into(),
        version: 1,
        artifact: "00".repeat(32),
        tier: Tier::Wasm,
        started_ms,
        duration_us: 50,
        request: Request {
            method: "POST".into(),
            path: "/".into(),
            body: Bytes::from(body.to_string()),
            ..Request::default()
        },
        tape: Tape::of(vec![HostEvent::WallClock { nanos: 42 }]),
        outcome: if ok {
            Outcome::Response(Response {
                status: 200,
                headers: vec![],
                body: Bytes::from(format!("echo {body}")),
            })
        } else {
            Outcome::Error {
                kind: "trap".into(),
                status: 500,
                message: "boom".into(),
            }
        },
        streamed: None,
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    /// The registry, as the node has it.
    store: Arc<dyn Store>,
    /// The same database as the tape index.
    index: SqliteStore,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let index = SqliteStore::open(dir.path().join("db")).unwrap();
        let store: Arc<dyn Store> = Arc::new(index.clone());
        Fixture { dir, store, index }
    }

    fn recorder(&self, config: RecordConfig) -> Recorder {
        let archive = Arc::new(
            Archive::open(
                &self.dir.path().join("rec"),
                Arc::new(self.index.clone()),
                self.store.clone(),
            )
            .unwrap(),
        );
        Recorder::open(archive, config).unwrap()
    }

    fn segments(&self) -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(self.dir.path().join("rec/segments"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    }
}

#[tokio::test]
async fn tapes_round_trip_and_stay_with_their_tenant() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig::default());
    let now = hearth_core::unix_time_ms();
    let a = recording("a", "f", "the-secret-request-body", true, now);
    let big = recording("a", "f", &"x".repeat(100_000), false, now);
    let b = recording("b", "f", "hello", true, now);
    for r in [&a, &big, &b] {
        rec.record(r.borrowed()).await.unwrap();
    }
    rec.flush().await.unwrap();
    let archive = rec.archive();
    assert_eq!(archive.read("a", &a.id).unwrap(), a);
    assert_eq!(archive.read("a", &big.id).unwrap(), big);
    assert_eq!(archive.read("b", &b.id).unwrap(), b);
    assert!(matches!(
        archive.read("b", &a.id),
        Err(RecordError::NotFound(_))
    ));

    let errors = archive
        .list(
            "a",
            &TapeQuery {
                errors_only: true,
                ..TapeQuery::default()
            },
        )
        .unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].id, big.id);
    assert_eq!(archive.list("b", &TapeQuery::default()).unwrap().len(), 1);

    // Encrypted at rest: neither the body nor the function's answer is there.
    for path in fx.segments() {
        let bytes = std::fs::read(path).unwrap();
        assert!(!bytes.windows(10).any(|w| w == b"the-secret"));
        assert!(!bytes.windows(5).any(|w| w == b"hello"));
    }
}

#[tokio::test]
async fn a_large_payload_is_stored_once_per_segment() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig::default());
    // Not compressible, so only deduplication can make it small.
    let mut x: u32 = 1;
    let body: String = (0..50_000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            char::from(b'a' + (x >> 16) as u8 % 26)
        })
        .collect();
    let first = recording("a", "f", &body, true, hearth_core::unix_time_ms());
    rec.record(first.borrowed()).await.unwrap();
    rec.flush().await.unwrap();
    let after_one = rec.stats().bytes.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..10 {
        let r = recording("a", "f", &body, true, hearth_core::unix_time_ms());
        rec.record(r.borrowed()).await.unwrap();
        rec.flush().await.unwrap();
    }
    let total = rec.stats().bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        total - after_one < after_one,
        "ten more tapes with the same payload took {} bytes, the first {after_one}",
        total - after_one
    );
    let all = rec.archive().list("a", &TapeQuery::default()).unwrap();
    assert_eq!(all.len(), 11);
    for e in all {
        assert_eq!(
            rec.archive().read("a", &e.id).unwrap().request.body.len(),
            50_000
        );
    }
}

/// Under load a block's tapes are several shards' buffers of hundreds of
/// kilobytes, each sealed as a zstd frame of its own: the block must read
/// back as one.
#[test]
fn a_block_of_large_batches_from_two_threads_reads_back_whole() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig {
        flush_interval: Duration::from_secs(3600),
        ..RecordConfig::default()
    });
    let now = hearth_core::unix_time_ms();
    let per_thread = 1500;
    let made: Vec<Vec<Recording>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let rec = &rec;
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    (0..per_thread)
                        .map(|i| {
                            let body = format!("thread {t} tape {i} {}", "y".repeat(i % 90));
                            let r = recording("a", "f", &body, i % 7 != 0, now + i as i64);
                            rt.block_on(rec.record(r.borrowed())).unwrap();
                            r
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(rec.flush())
        .unwrap();
    let archive = rec.archive();
    let listed = archive
        .list(
            "a",
            &TapeQuery {
                limit: 10_000,
                ..TapeQuery::default()
            },
        )
        .unwrap();
    assert_eq!(listed.len(), 2 * per_thread);
    for r in made.iter().flatten().step_by(97) {
        assert_eq!(&archive.read("a", &r.id).unwrap(), r);
    }
    // One block (one flush, one tenant), larger than a frame's threshold
    // many times over, yet compressed well.
    let written = rec.stats().bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        written < 100 * 2 * per_thread as u64,
        "{written} bytes on disk for {} tapes",
        2 * per_thread
    );
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_unindexed_blocks_are_found_on_restart() {
    let fx = Fixture::new();
    let now = hearth_core::unix_time_ms();
    let kept = recording("a", "f", "kept", true, now);
    {
        let rec = fx.recorder(RecordConfig::default());
        rec.record(kept.borrowed()).await.unwrap();
        rec.flush().await.unwrap();
        rec.close();
    }
    // A crash mid-write: half a block at the tail.
    let seg = fx.segments().pop().unwrap();
    let whole = std::fs::read(&seg).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut f, &whole[8..whole.len() / 2 + 4]).unwrap();
    drop(f);
    // And a crash between writing a block and indexing it.
    let lost_index = recording("a", "f", "unindexed", true, now);
    {
        let rec = fx.recorder(RecordConfig::default());
        rec.record(lost_index.borrowed()).await.unwrap();
        rec.flush().await.unwrap();
        rec.close();
    }
    // Drop the index rows of the newest segment so it looks unindexed;
    // and of the first too, as if the index were lost or older than it.
    let number = |p: &std::path::Path| {
        u64::from_str_radix(p.file_stem().unwrap().to_str().unwrap(), 16).unwrap()
    };
    fx.index
        .unindex_segment(number(&fx.segments().pop().unwrap()), 0)
        .unwrap();
    fx.index.unindex_segment(number(&seg), 0).unwrap();

    let rec = fx.recorder(RecordConfig::default());
    assert_eq!(std::fs::read(&seg).unwrap(), whole, "the torn tail is cut");
    assert_eq!(
        rec.archive()
            .list("a", &TapeQuery::default())
            .unwrap()
            .len(),
        2
    );
    assert_eq!(rec.archive().read("a", &kept.id).unwrap(), kept);
    assert_eq!(rec.archive().read("a", &lost_index.id).unwrap(), lost_index);
}

#[tokio::test]
async fn sync_durability_acknowledges_only_indexed_tapes() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig {
        durability: Durability::Sync,
        flush_interval: Duration::from_secs(3600),
        ..RecordConfig::default()
    });
    let r = recording("a", "f", "x", true, hearth_core::unix_time_ms());
    // No flush: with an hour's flush interval, only sync mode writes now.
    rec.record(r.borrowed()).await.unwrap();
    assert_eq!(rec.archive().read("a", &r.id).unwrap(), r);
}

#[tokio::test]
async fn retention_keeps_errors_longer_when_a_function_asks_and_caps_size() {
    let fx = Fixture::new();
    fx.store.create_tenant("a").await.unwrap();
    let mut spec = FunctionSpec::new(Runtime::Wasm);
    spec.record.keep_errors_s = Some(30 * 24 * 3600);
    fx.store
        .create_version("a", "f", &"00".repeat(32), &spec, true)
        .await
        .unwrap();
    let day = 24 * 3600 * 1000;
    let old = hearth_core::unix_time_ms() - 10 * day;
    let old_ok = recording("a", "f", "ok", true, old);
    let old_err = recording("a", "f", "err", false, old);
    let fresh = recording("a", "f", "fresh", true, hearth_core::unix_time_ms());
    {
        let rec = fx.recorder(RecordConfig::default());
        for r in [&old_ok, &old_err] {
            rec.record(r.borrowed()).await.unwrap();
        }
        rec.flush().await.unwrap();
        rec.close();
    }
    let rec = fx.recorder(RecordConfig::default()); // the first segment is now closed
    rec.record(fresh.borrowed()).await.unwrap();
    rec.flush().await.unwrap();
    rec.sweep().await.unwrap();
    let a = rec.archive();
    assert!(
        matches!(a.read("a", &old_ok.id), Err(RecordError::NotFound(_))),
        "7 days by default"
    );
    assert_eq!(
        a.read("a", &old_err.id).unwrap(),
        old_err,
        "carried forward: errors kept 30 days"
    );
    assert_eq!(a.read("a", &fresh.id).unwrap(), fresh);
    assert_eq!(fx.segments().len(), 1, "the expired segment is gone");
    rec.close();

    // A size cap of one byte leaves only the segment being written.
    let rec = fx.recorder(RecordConfig {
        max_bytes: 1,
        ..RecordConfig::default()
    });
    assert_eq!(fx.segments().len(), 1);
    assert!(
        rec.archive()
            .list("a", &TapeQuery::default())
            .unwrap()
            .is_empty()
    );
}

/// A pinned tape (one that showed compiled code wrong) outlives its
/// retention while its function exists; an unpinned one of the same age
/// does not; deleting the function lets it go; and a function keeps only
/// its newest pins.
#[tokio::test]
async fn a_pinned_tape_outlives_retention_while_its_function_exists() {
    let fx = Fixture::new();
    fx.store.create_tenant("a").await.unwrap();
    let spec = FunctionSpec::new(Runtime::Wasm);
    for f in ["f", "g"] {
        fx.store
            .create_version("a", f, &"00".repeat(32), &spec, true)
            .await
            .unwrap();
    }
    let old = hearth_core::unix_time_ms() - 10 * 24 * 3600 * 1000;
    let pinned = recording("a", "f", "diverged", true, old);
    let other = recording("a", "g", "plain", true, old);
    let pin = TapePin {
        tenant: "a".into(),
        function: "f".into(),
        id: pinned.id.clone(),
    };
    fx.index.pin_tape(&pin).unwrap();
    {
        let rec = fx.recorder(RecordConfig::default());
        for r in [&pinned, &other] {
            rec.record(r.borrowed()).await.unwrap();
        }
        rec.flush().await.unwrap();
        rec.close();
    }
    let rec = fx.recorder(RecordConfig::default());
    rec.sweep().await.unwrap();
    let a = rec.archive();
    assert_eq!(a.read("a", &pinned.id).unwrap(), pinned, "pinned: kept");
    assert!(
        matches!(a.read("a", &other.id), Err(RecordError::NotFound(_))),
        "as old, not pinned: gone"
    );
    // Swept again (moved forward by the first sweep), still kept.
    rec.sweep().await.unwrap();
    assert_eq!(a.read("a", &pinned.id).unwrap(), pinned);

    assert!(fx.store.delete_function("a", "f").await.unwrap());
    rec.sweep().await.unwrap();
    assert!(fx.index.tape_pins().unwrap().is_empty(), "unpinned");
    rec.close();
    let rec = fx.recorder(RecordConfig::default());
    rec.sweep().await.unwrap();
    assert!(
        matches!(
            rec.archive().read("a", &pinned.id),
            Err(RecordError::NotFound(_))
        ),
        "its function deleted, it ages out"
    );

    // In id order, which is time order for UUIDv7 ids.
    let mut ids: Vec<String> = (0..MAX_PINS_PER_FUNCTION + 3)
        .map(|_| hearth_core::InvocationId::new().to_string())
        .collect();
    ids.sort();
    for id in &ids {
        fx.index
            .pin_tape(&TapePin {
                id: id.clone(),
                function: "g".into(),
                ..pin.clone()
            })
            .unwrap();
    }
    let mut kept: Vec<String> = fx
        .index
        .tape_pins()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    kept.sort();
    assert_eq!(kept, ids[3..], "the newest {MAX_PINS_PER_FUNCTION}");
}

#[tokio::test]
async fn a_flood_of_large_tapes_is_dropped_and_counted_not_queued_without_bound() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig {
        flush_interval: Duration::from_secs(3600),
        queue_bytes: 128 << 10, // one tape here is ~80 KiB (request and echoed response)
        ..RecordConfig::default()
    });
    let now = hearth_core::unix_time_ms();
    let big = "x".repeat(40 << 10);
    let r = recording("a", "f", &big, true, now);
    rec.record(r.borrowed()).await.unwrap();
    let err = rec.record(r.borrowed()).await.unwrap_err();
    assert!(matches!(err, RecordError::Overloaded), "{err}");
    assert_eq!(
        rec.stats()
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // Once the queue is written, there is room again.
    rec.flush().await.unwrap();
    rec.record(r.borrowed()).await.unwrap();
}

#[tokio::test]
async fn listing_walks_blocks_newest_first_and_filters() {
    let fx = Fixture::new();
    let rec = fx.recorder(RecordConfig::default());
    let now = hearth_core::unix_time_ms();
    // Five flushes (five blocks), two functions interleaved, every third
    // invocation failing, versions 1 then 2.
    let mut all = Vec::new();
    for block in 0..5 {
        for i in 0..6 {
            let n = block * 6 + i;
            let mut r = recording(
                "a",
                ["f", "g"][i % 2],
                &format!("{n}"),
                n % 3 != 0,
                now + n as i64,
            );
            r.version = if block < 3 { 1 } else { 2 };
            if n % 5 == 0 {
                r.request.headers = vec![("traceparent".into(), CALLERS.into())];
            }
            rec.record(r.borrowed()).await.unwrap();
            all.push(r);
        }
        rec.flush().await.unwrap();
    }
    let ids = |q: TapeQuery| -> Vec<String> {
        rec.archive()
            .list("a", &q)
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect()
    };
    let newest = |keep: &dyn Fn(&Recording) -> bool, n: usize| -> Vec<String> {
        let mut v: Vec<String> = all
            .iter()
            .filter(|r| keep(r))
            .map(|r| r.id.clone())
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.truncate(n);
        v
    };
    let q = |limit| TapeQuery {
        limit,
        ..TapeQuery::default()
    };
    assert_eq!(ids(q(7)), newest(&|_| true, 7), "spans two blocks");
    assert_eq!(ids(q(0)), newest(&|_| true, 100));
    assert_eq!(
        ids(TapeQuery {
            function: Some("g".into()),
            limit: 4,
            ..TapeQuery::default()
        }),
        newest(&|r| r.function == "g", 4)
    );
    assert_eq!(
        ids(TapeQuery {
            errors_only: true,
            ..TapeQuery::default()
        }),
        newest(&|r| matches!(r.outcome, Outcome::Error { .. }), 100)
    );
    assert_eq!(
        ids(TapeQuery {
            version: Some(1),
            function: Some("f".into()),
            ..TapeQuery::default()
        }),
        newest(&|r| r.version == 1 && r.function == "f", 100)
    );
    assert_eq!(
        ids(TapeQuery {
            since_ms: Some(now + 20),
            ..TapeQuery::default()
        }),
        newest(&|r| r.started_ms >= now + 20, 100)
    );
    // Pages: each starts before the last one's oldest, and together they
    // are the whole listing, once each, in order.
    let (mut paged, mut before) = (Vec::new(), None);
    loop {
        let page = ids(TapeQuery {
            function: Some("f".into()),
            before: before.clone(),
            limit: 4,
            ..TapeQuery::default()
        });
        paged.extend(page.iter().cloned());
        match page.last() {
            Some(last) if page.len() == 4 => before = Some(last.clone()),
            _ => break,
        }
    }
    assert_eq!(paged, newest(&|r| r.function == "f", 100));
    // A trace: the caller's, on five tapes' requests; or the one an
    // invocation began, which only its own tape is in.
    let callers = &CALLERS[3..35];
    assert_eq!(
        ids(TapeQuery {
            trace_id: Some(callers.into()),
            ..TapeQuery::default()
        }),
        newest(&|r| r.request.header("traceparent").is_some(), 100)
    );
    let began = &all[7];
    let trace = format!(
        "{:032x}",
        began.id.parse::<InvocationId>().unwrap().trace_id()
    );
    assert_eq!(hearth_record::trace_of(began), trace);
    assert_eq!(
        ids(TapeQuery {
            trace_id: Some(trace),
            ..TapeQuery::default()
        }),
        std::slice::from_ref(&began.id)
    );
    // Whole tapes in the same order, each block decoded once.
    let got = rec.archive().recordings("a", &q(9)).unwrap();
    let want: Vec<Recording> = newest(&|_| true, 9)
        .iter()
        .map(|id| all.iter().find(|r| &r.id == id).unwrap().clone())
        .collect();
    assert_eq!(got, want);
}

/// Tenant `b` floods the recorder past its room; tenant `a`, which wrote
/// first (so its tapes share the oldest segment with `b`'s), loses none.
#[tokio::test]
async fn a_tenant_over_the_room_loses_its_own_oldest_tapes_not_its_neighbours() {
    for (max_bytes, max_tenant_bytes) in [(300 << 10, u64::MAX), (u64::MAX, 200 << 10)] {
        let fx = Fixture::new();
        let rec = fx.recorder(RecordConfig {
            segment_bytes: 64 << 10,
            max_bytes,
            max_tenant_bytes,
            ..RecordConfig::default()
        });
        let now = hearth_core::unix_time_ms();
        let mine: Vec<Recording> = (0..3)
            .map(|i| recording("a", "f", &format!("a{i}"), true, now))
            .collect();
        for r in &mine {
            rec.record(r.borrowed()).await.unwrap();
        }
        let mut flood = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..40 {
            // Distinct bodies that do not compress: payloads are stored
            // once per segment, and blocks are compressed.
            let noise: String = (0..(20 << 10) / 16)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    format!("{seed:016x}")
                })
                .collect();
            let r = recording("b", "g", &format!("{i:04}{noise}"), true, now);
            rec.record(r.borrowed()).await.unwrap();
            rec.flush().await.unwrap();
            flood.push(r);
        }
        assert!(fx.segments().len() > 5, "the flood spans segments");
        rec.sweep().await.unwrap();
        let a = rec.archive();
        for r in &mine {
            assert_eq!(&a.read("a", &r.id).unwrap(), r, "a's tape was taken");
        }
        assert!(
            matches!(a.read("b", &flood[0].id), Err(RecordError::NotFound(_))),
            "b's oldest tape is gone"
        );
        assert_eq!(a.read("b", &flood[39].id).unwrap(), flood[39]);
        let held = rec.stats().tenant_bytes.lock().clone();
        let on_disk: u64 = fx
            .segments()
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(held["a"] > 0 && held["a"] < 4 << 10, "{held:?}");
        if max_tenant_bytes == u64::MAX {
            // Within the cap, give or take the segment being written.
            assert!(on_disk <= max_bytes + (64 << 10) + (24 << 10), "{on_disk}");
        } else {
            assert!(held["b"] <= max_tenant_bytes, "{held:?}");
        }
        rec.close();
    }
}
