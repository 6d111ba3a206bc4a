//! WebAssembly/wasi-testsuite's preview-1 programs, run against Hearth's
//! own WASI (`src/wasi.rs`) through [`WasiCommand`]: the same linker,
//! guest-memory layer and bounds an invocation uses, with argv and the
//! environment as each test's specification gives them.
//!
//! `tests/wasi-testsuite/` holds the programs that apply to a WASI with
//! the standard streams and no preopened directory, which is what Hearth
//! gives a function; its README says which were left out and why. The C
//! programs are built here with Debian's clang; the AssemblyScript and
//! Rust ones are the suite's own builds (the Rust ones are wasmtime's
//! preview-1 test programs, stripped of their debug sections).
//!
//! Each program is checked as the suite's specification
//! (`doc/specification.md` upstream) says: its exit code, stdout and
//! stderr against its `.json`: the exit code defaults to 0, and stdout and
//! stderr are compared where it gives them.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::{FunctionSpec, FunctionVersion, InvocationId, Runtime};
use hearth_host::{HostCtx, HostLimits, HostServices, InvocationMeta};
use hearth_store::SqliteStore;
use hearth_test_support::require;
use hearth_wasm::{CommandInput, WasmConfig, WasmEngine};
use serde_json::Value;

fn suite_dir() -> PathBuf {
    // Read when the test runs, not when it was compiled: a clone elsewhere
    // sharing the cargo target dir may reuse this binary.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/wasi-testsuite")
}

/// One program and what its specification expects.
struct Case {
    name: String,
    wasm: Vec<u8>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    exit_code: i32,
    /// Checked only where the specification gives them, as the suite's
    /// own runner does.
    stdout: Option<String>,
    stderr: Option<String>,
}

impl Case {
    /// `dir/NAME.wasm` with `dir/NAME.json` beside it, if there is one.
    fn load(name: &str, wasm: Vec<u8>, spec: Option<&Path>) -> Case {
        let spec: Value = spec
            .filter(|p| p.exists())
            .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
            .unwrap_or(Value::Null);
        let text = |key: &str| spec[key].as_str().map(str::to_string);
        Case {
            name: name.to_string(),
            wasm,
            args: spec["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a.as_str().unwrap().to_string())
                .collect(),
            env: spec["env"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            exit_code: spec["exit_code"]
                .as_i64()
                .map_or(0, |c| i32::try_from(c).unwrap()),
            stdout: text("stdout"),
            stderr: text("stderr"),
        }
    }
}

/// Every program under `tests/wasi-testsuite`: the prebuilt `.wasm`
/// files, and each `.c` built with clang as the suite's own build does
/// (`-O2`, assertions on).
fn cases(build_dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for lang in ["assemblyscript", "c", "rust"] {
        let dir = suite_dir().join(lang);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            let wasm = match path.extension().and_then(|e| e.to_str()) {
                Some("wasm") => std::fs::read(&path).unwrap(),
                Some("c") => {
                    let out = build_dir.join(format!("{stem}.wasm"));
                    let status = Command::new("clang")
                        .args(["--target=wasm32-wasi", "-O2", "-o"])
                        .arg(&out)
                        .arg(&path)
                        .status()
                        .unwrap();
                    assert!(status.success(), "clang failed on {}", path.display());
                    std::fs::read(out).unwrap()
                }
                _ => continue,
            };
            let spec = path.with_extension("json");
            cases.push(Case::load(&format!("{lang}/{stem}"), wasm, Some(&spec)));
        }
    }
    cases
}

#[tokio::test]
async fn wasi_testsuite_preview1_programs_pass() {
    require!(Clang);
    let tmp = tempfile::tempdir().unwrap();
    let mut config = WasmConfig::new(tmp.path().join("cache"));
    config.max_sandboxes = 4;
    let engine = WasmEngine::new(config).unwrap();
    let store = Arc::new(SqliteStore::open(tmp.path().join("db")).unwrap());
    let services = Arc::new(HostServices::new(store, HostLimits::default()));
    let version = Arc::new(FunctionVersion {
        tenant: "t".into(),
        name: "wasi-testsuite".into(),
        version: 1,
        artifact: String::new(),
        spec: FunctionSpec::new(Runtime::Wasm),
        created_at_ms: 0,
    });

    let cases = cases(tmp.path());
    assert!(cases.len() >= 20, "the suite went missing: {}", cases.len());
    let mut failed = Vec::new();
    for case in &cases {
        let command = match engine.command(&case.wasm) {
            Ok(c) => c,
            Err(e) => {
                failed.push(format!("{}: refused: {e}", case.name));
                continue;
            }
        };
        let mut args = vec![format!("{}.wasm", case.name)];
        args.extend(case.args.iter().cloned());
        let input = CommandInput {
            args,
            env: case.env.clone(),
            stdin: Default::default(),
            output_limit: 1 << 20,
            memory_bytes: 64 << 20,
        };
        let meta = InvocationMeta {
            id: InvocationId::new(),
            version: version.clone(),
            started: Instant::now(),
            deadline: Instant::now() + Duration::from_secs(10),
            trace: None,
            cpu: None,
            answer: None,
        };
        let ran = command
            .run(&input, HostCtx::new(services.clone(), meta))
            .await;
        let stdout = String::from_utf8_lossy(&ran.stdout);
        let stderr = String::from_utf8_lossy(&ran.stderr);
        if !matches!(ran.status, Ok(code) if code == case.exit_code)
            || case.stdout.as_ref().is_some_and(|want| *want != stdout)
            || case.stderr.as_ref().is_some_and(|want| *want != stderr)
        {
            failed.push(format!(
                "{}: status {:?} (want {}), stdout {stdout:?} (want {:?}), stderr {stderr:?} (want {:?})",
                case.name, ran.status, case.exit_code, case.stdout, case.stderr
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} programs failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}
