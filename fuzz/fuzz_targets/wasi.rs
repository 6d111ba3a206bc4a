//! Hearth's WASI preview 1 (`crates/hearth-wasm/src/wasi.rs`) under a
//! guest that passes it anything: `wasi_interpreter.wat` reads the input
//! as a program of WASI calls with fuzzer-chosen pointers, lengths, fds and
//! flags (and words planted in memory for them to point at), and runs it
//! through the same linker, memory limiter and deadline an invocation has.
//!
//! Whatever it calls, the host does not panic or hang, the run ends as a
//! guest's may (it returned, exited, trapped, timed out or wrote past its
//! limit) and never as the node's fault, and what the host kept of its
//! output is within the limit.
#![no_main]

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hearth_core::{FunctionSpec, FunctionVersion, InvocationId, InvokeError, Runtime};
use hearth_host::{HostCtx, HostLimits, HostServices, InvocationMeta};
use hearth_store::SqliteStore;
use hearth_wasm::{CommandInput, WasiCommand, WasmConfig, WasmEngine};
use libfuzzer_sys::fuzz_target;

const OUTPUT_LIMIT: usize = 4096;

struct World {
    runtime: tokio::runtime::Runtime,
    command: WasiCommand,
    services: Arc<HostServices>,
    version: Arc<FunctionVersion>,
    _dir: tempfile::TempDir,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let mut config = WasmConfig::new(dir.path().join("cache"));
    config.max_sandboxes = 2;
    let engine = runtime.block_on(async { WasmEngine::new(config).expect("an engine") });
    let command = engine
        .command(include_bytes!("../wasi_interpreter.wat"))
        .expect("the interpreter links");
    let store = Arc::new(SqliteStore::open(dir.path().join("db")).expect("a store"));
    let services = Arc::new(HostServices::new(store, HostLimits::default()));
    let version = Arc::new(FunctionVersion {
        tenant: "t".into(),
        name: "wasi-fuzz".into(),
        version: 1,
        artifact: String::new(),
        spec: FunctionSpec::new(Runtime::Wasm),
        created_at_ms: 0,
    });
    World {
        runtime,
        command,
        services,
        version,
        _dir: dir,
    }
});

fuzz_target!(|program: &[u8]| {
    let w = &*WORLD;
    let input = CommandInput {
        args: vec!["wasi-fuzz".into(), "arg".into()],
        env: vec![("A".into(), "1".into()), ("EMPTY".into(), String::new())],
        stdin: Bytes::copy_from_slice(program),
        output_limit: OUTPUT_LIMIT,
        memory_bytes: 256 << 10,
    };
    let meta = InvocationMeta {
        id: InvocationId::new(),
        version: w.version.clone(),
        started: Instant::now(),
        // Short: a program that sleeps in poll_oneoff ends here.
        deadline: Instant::now() + Duration::from_millis(20),
        trace: None,
        cpu: None,
        answer: None,
    };
    let host = HostCtx::new(w.services.clone(), meta);
    let ran = w.runtime.block_on(w.command.run(&input, host));
    match &ran.status {
        Ok(_)
        | Err(InvokeError::Trap(_))
        | Err(InvokeError::Timeout { .. })
        | Err(InvokeError::ResponseTooLarge { .. })
        | Err(InvokeError::OutOfMemory { .. }) => {}
        Err(other) => panic!("the run ended as no guest can end it: {other:?}"),
    }
    assert!(ran.stdout.len() <= OUTPUT_LIMIT, "stdout kept past its limit");
    assert!(ran.stderr.len() <= OUTPUT_LIMIT, "stderr kept past its limit");
});
