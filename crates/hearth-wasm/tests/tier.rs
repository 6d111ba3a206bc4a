//! The wasm tier on its own: real wasmtime, real WASI, a real SQLite store.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hearth_core::{FunctionSpec, FunctionVersion, InvocationId, InvokeError, Request, Runtime};
use hearth_host::{
    Artifacts, Engine, HostCtx, HostEvent, HostLimits, HostServices, InvocationMeta, Prepared,
};
use hearth_store::{ArtifactStore, SqliteStore};
use hearth_wasm::{WasmConfig, WasmEngine};

struct Fixture {
    _dir: tempfile::TempDir,
    engine: WasmEngine,
    artifacts: ArtifactStore,
    services: Arc<HostServices>,
}

fn fixture(pooling: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WasmConfig::new(dir.path().join("cache"));
    config.pooling = pooling;
    config.max_sandboxes = 16;
    config.max_response_bytes = 1 << 20;
    let engine = WasmEngine::new(config).unwrap();
    let artifacts = ArtifactStore::open(dir.path().join("artifacts")).unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let services = Arc::new(HostServices::new(store, HostLimits::default()));
    Fixture {
        _dir: dir,
        engine,
        artifacts,
        services,
    }
}

fn example(name: &str) -> Vec<u8> {
    // Read when the test runs, not when it was compiled: a clone elsewhere
    // sharing the cargo target dir may reuse this binary.
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = crate_dir.join("../../examples/wasm").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Fixture {
    async fn deploy(&self, file: &str, spec: FunctionSpec) -> (FunctionVersion, Arc<dyn Prepared>) {
        let compiled = self
            .engine
            .compile(&spec, example(file).into())
            .await
            .unwrap();
        let hash = self.artifacts.put(&compiled.artifact).unwrap();
        let version = FunctionVersion {
            tenant: "t".into(),
            name: file.trim_end_matches(".wat").into(),
            version: 1,
            artifact: hash,
            spec,
            created_at_ms: 0,
        };
        let prepared = self
            .engine
            .prepare(
                &version,
                &(Arc::new(self.artifacts.clone()) as Arc<dyn Artifacts>),
            )
            .await
            .unwrap();
        (version, prepared)
    }

    fn host(&self, v: &FunctionVersion) -> HostCtx {
        let meta = InvocationMeta {
            id: InvocationId::new(),
            version: Arc::new(v.clone()),
            started: Instant::now(),
            deadline: Instant::now() + Duration::from_millis(v.spec.limits.timeout_ms),
            trace: None,
            cpu: None,
            answer: None,
        };
        HostCtx::new(self.services.clone(), meta)
    }

    async fn run(
        &self,
        v: &FunctionVersion,
        p: &Arc<dyn Prepared>,
        body: &[u8],
    ) -> (Result<hearth_core::Response, InvokeError>, HostCtx) {
        let host = self.host(v);
        let mut sandbox = p.instantiate().await.unwrap();
        let req = Request {
            method: "POST".into(),
            path: "/".into(),
            body: Bytes::copy_from_slice(body),
            ..Request::default()
        };
        (sandbox.invoke(&req, host.clone()).await, host)
    }
}

fn spec() -> FunctionSpec {
    FunctionSpec::new(Runtime::Wasm)
}

#[tokio::test]
async fn hello_answers_with_its_cgi_headers() {
    for pooling in [true, false] {
        let f = fixture(pooling);
        let (v, p) = f.deploy("hello.wat", spec()).await;
        let resp = f.run(&v, &p, b"").await.0.unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.headers,
            vec![("Content-Type".into(), "text/plain".into())]
        );
        assert_eq!(&resp.body[..], b"hello from wasm\n");
    }
}

#[tokio::test]
async fn each_invocation_gets_a_fresh_instance() {
    let f = fixture(true);
    let (v, p) = f.deploy("echo.wat", spec()).await;
    assert_eq!(&f.run(&v, &p, b"first").await.0.unwrap().body[..], b"first");
    assert_eq!(
        &f.run(&v, &p, b"2nd").await.0.unwrap().body[..],
        b"2nd",
        "no bytes of the first call remain"
    );
}

#[tokio::test]
async fn clocks_and_randomness_come_from_the_host_tape() {
    let f = fixture(true);
    let (v, p) = f.deploy("entropy.wat", spec()).await;
    let (resp, host) = f.run(&v, &p, b"").await;
    let body = resp.unwrap().body;
    let (tape, _) = host.take_records();
    let wall = tape.events.iter().find_map(|e| match e {
        HostEvent::WallClock { nanos } => Some(*nanos),
        _ => None,
    });
    let random = tape.events.iter().find_map(|e| match e {
        HostEvent::Random { bytes } if bytes.len() == 16 => Some(bytes.clone()),
        _ => None,
    });
    assert_eq!(
        wall.map(u64::to_le_bytes).as_ref().map(|b| &b[..]),
        Some(&body[..8])
    );
    assert_eq!(random.as_deref(), Some(&body[8..24]));
}

#[tokio::test]
async fn a_spinning_guest_is_stopped_at_its_deadline() {
    let f = fixture(true);
    let mut s = spec();
    s.limits.timeout_ms = 200;
    let (v, p) = f.deploy("spin.wat", s).await;
    let started = Instant::now();
    let err = f.run(&v, &p, b"").await.0.unwrap_err();
    assert_eq!(err, InvokeError::Timeout { limit_ms: 200 });
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

/// How often a spinning guest yields before its 300 ms deadline, polled
/// on a thread that gives way (a long run's) or not.
async fn yields_before_the_deadline(f: &Fixture, giving_way: bool) -> u32 {
    let mut s = spec();
    s.limits.timeout_ms = 300;
    let (v, p) = f.deploy("spin.wat", s).await;
    let mut sandbox = p.instantiate().await.unwrap();
    let req = Request::default();
    let mut run = std::pin::pin!(sandbox.invoke(&req, f.host(&v)));
    let mut yields = 0;
    let ran = std::future::poll_fn(|cx| {
        hearth_host::priority::mark_giving_way(giving_way);
        let polled = run.as_mut().poll(cx);
        hearth_host::priority::mark_giving_way(false);
        yields += u32::from(polled.is_pending());
        polled
    })
    .await;
    assert_eq!(ran.unwrap_err(), InvokeError::Timeout { limit_ms: 300 });
    yields
}

#[tokio::test]
async fn a_sandbox_yields_every_slice_and_every_fine_tick_once_it_gives_way() {
    let f = fixture(true);
    // A 5 ms slice: about 60 yields in 300 ms; giving way, a yield at
    // every half-millisecond tick, up to 600.
    let slices = yields_before_the_deadline(&f, false).await;
    let fine = yields_before_the_deadline(&f, true).await;
    assert!(
        (20..=90).contains(&slices),
        "{slices} yields at 5 ms slices"
    );
    assert!(
        fine >= 3 * slices,
        "{fine} yields giving way against {slices} not"
    );
}

#[tokio::test]
async fn memory_past_the_limit_is_refused_and_reported() {
    let f = fixture(true);
    let mut s = spec();
    s.limits.memory_mib = 8;
    let (v, p) = f.deploy("membomb.wat", s).await;
    assert_eq!(
        f.run(&v, &p, b"").await.0.unwrap_err(),
        InvokeError::OutOfMemory {
            limit_mib: 8,
            last_output: Default::default()
        }
    );
}

#[tokio::test]
async fn traps_stack_overflow_and_floods_are_contained() {
    let f = fixture(true);
    let (v, p) = f.deploy("trap.wat", spec()).await;
    match f.run(&v, &p, b"").await.0.unwrap_err() {
        InvokeError::Trap(msg) => assert!(msg.contains("divide by zero"), "{msg}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let (v, p) = f.deploy("deep.wat", spec()).await;
    match f.run(&v, &p, b"").await.0.unwrap_err() {
        InvokeError::Trap(msg) => assert!(msg.contains("stack overflow"), "{msg}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let (v, p) = f.deploy("flood.wat", spec()).await;
    assert_eq!(
        f.run(&v, &p, b"").await.0.unwrap_err(),
        InvokeError::ResponseTooLarge {
            limit_bytes: 1 << 20
        }
    );
}

#[tokio::test]
async fn kv_persists_across_invocations() {
    let f = fixture(true);
    let (v, p) = f.deploy("counter.wat", spec()).await;
    for expected in ["1\n", "2\n", "3\n"] {
        assert_eq!(
            &f.run(&v, &p, b"").await.0.unwrap().body[..],
            expected.as_bytes()
        );
    }
}

#[tokio::test]
async fn modules_that_are_not_wasi_commands_are_refused_at_compile() {
    let f = fixture(true);
    let bad = f
        .engine
        .compile(&spec(), b"not wasm at all".to_vec().into())
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("not valid WAT"), "{bad}");
    let no_start = f
        .engine
        .compile(
            &spec(),
            b"(module (memory (export \"memory\") 1))".to_vec().into(),
        )
        .await
        .unwrap_err();
    assert!(no_start.to_string().contains("_start"), "{no_start}");
    let unknown = f
        .engine
        .compile(&spec(), b"(module (import \"env\" \"f\" (func)) (memory (export \"memory\") 1) (func (export \"_start\")))".to_vec().into())
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("env"), "{unknown}");
}

#[tokio::test]
async fn pool_exhaustion_is_overload_not_a_crash() {
    let f = fixture(true);
    let (_v, p) = f.deploy("hello.wat", spec()).await;
    let mut held = Vec::new();
    let err = loop {
        match p.instantiate().await {
            Ok(s) => held.push(s),
            Err(e) => break e,
        }
        assert!(held.len() <= 16, "the pool has 16 slots");
    };
    assert_eq!(err, InvokeError::Overloaded);
    drop(held);
    assert!(p.instantiate().await.is_ok(), "slots come back");
}

#[tokio::test]
async fn an_init_step_runs_once_at_deploy_and_every_invocation_starts_from_its_snapshot() {
    let f = fixture(true);
    let (v, p) = f.deploy("preinit.wat", spec()).await;
    for _ in 0..3 {
        let body = f.run(&v, &p, b"").await.0.unwrap().body;
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "built at deploy\nruns=1\n",
            "the table comes from the snapshot, and no run sees another's state"
        );
    }
    // The stored artifact is the initialized module, without the init export.
    let stored = f.artifacts.get(&v.artifact).unwrap();
    let module = wasmtime::Module::new(&wasmtime::Engine::default(), &stored).unwrap();
    assert!(module.get_export("wizer-initialize").is_none());
    assert!(module.get_export("_start").is_some());
}

/// Compiles WAT text as a deploy would; the error message if refused.
async fn compile_error(f: &Fixture, wat: &str) -> String {
    match f
        .engine
        .compile(&spec(), wat.as_bytes().to_vec().into())
        .await
    {
        Ok(_) => panic!("{wat} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn an_init_step_that_fails_or_asks_the_host_is_a_deploy_error_with_the_reason() {
    let f = fixture(true);
    let module = |init: &str, imports: &str| {
        format!(
            "(module {imports} (memory (export \"memory\") 1) \
             (func (export \"wizer-initialize\") {init}) (func (export \"_start\")))"
        )
    };
    // The step's stderr is quoted, so its author sees why it gave up.
    let fd_write = r#"(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
        (data (i32.const 16) "no config table")"#;
    let msg = compile_error(
        &f,
        &module(
            "(i32.store (i32.const 0) (i32.const 16)) (i32.store (i32.const 4) (i32.const 15))
             (drop (call $w (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8))) unreachable",
            fd_write,
        ),
    )
    .await;
    assert!(
        msg.contains("init step (wizer-initialize) failed")
            && msg.contains("unreachable")
            && msg.contains("its stderr: no config table"),
        "{msg}"
    );
    // Randomness drawn at init would be shared by every invocation.
    let random =
        r#"(import "wasi_snapshot_preview1" "random_get" (func $r (param i32 i32) (result i32)))"#;
    let msg = compile_error(
        &f,
        &module("(drop (call $r (i32.const 0) (i32.const 8)))", random),
    )
    .await;
    assert!(
        msg.contains("init step") && msg.contains("outside an invocation"),
        "{msg}"
    );
    // Memory past the node's largest limit.
    let msg = compile_error(
        &f,
        &module("(drop (memory.grow (i32.const 100000)))  unreachable", ""),
    )
    .await;
    assert!(msg.contains("more than 512 MiB"), "{msg}");
}
