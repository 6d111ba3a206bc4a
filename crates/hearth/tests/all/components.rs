//! Components of the wasi:http/proxy world, built from C during the test
//! (examples/components/build.sh: wit-bindgen, clang, wasm-tools and
//! wasmtime's preview-1 adapter), deployed and called like any function.

use hearth_test_support::require;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::Digest;

use crate::harness::{Daemon, crate_dir, error_of};

/// examples/components/NAME.c as a component, built once per test run.
/// `probe` uses the reactor adapter, which imports the CLI interfaces
/// guest toolchains link by default (environment, exit, filesystem,
/// terminals); the others the proxy adapter (the proxy world only).
pub fn component(name: &str) -> Vec<u8> {
    component_with(name, "function", "")
}

/// examples/components/NAME.c for `world`, compiled with `cflags`.
pub fn component_with(name: &str, world: &str, cflags: &str) -> Vec<u8> {
    static BUILDING: OnceLock<std::sync::Mutex<()>> = OnceLock::new();
    let _one_at_a_time = BUILDING.get_or_init(Default::default).lock().unwrap();
    let examples = crate_dir().join("../../examples/components");
    let source = examples.join(format!("{name}.c"));
    let adapter_bytes = match name {
        "probe" => wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        _ => wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER,
    };
    // Named by what goes into it, so a run reuses an earlier run's build.
    let mut inputs = sha2::Sha256::new();
    for part in [
        std::fs::read(&source).unwrap(),
        std::fs::read(examples.join("build.sh")).unwrap(),
        std::fs::read(examples.join("wit/world.wit")).unwrap(),
        adapter_bytes.to_vec(),
        format!("{world} {cflags}").into_bytes(),
    ] {
        inputs.update(&part);
    }
    let key = format!("{:x}", inputs.finalize());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{name}-{}.wasm", &key[..16]));
    if !out.exists() {
        let adapter = dir.join(format!("{name}-adapter.wasm"));
        std::fs::write(&adapter, adapter_bytes).unwrap();
        let building = dir.join(format!("{name}-{}.tmp.wasm", std::process::id()));
        let status = Command::new(examples.join("build.sh"))
            .arg(&source)
            .arg(&building)
            .arg(&adapter)
            .arg(world)
            .env("CFLAGS", cflags)
            .status()
            .expect("examples/components/build.sh needs bash, clang, wit-bindgen and wasm-tools (scripts/component-tools.sh installs them)");
        assert!(status.success(), "building the {name} component failed");
        std::fs::rename(&building, &out).unwrap();
    }
    std::fs::read(out).unwrap()
}

#[tokio::test]
async fn a_wasi_http_component_deploys_and_answers() {
    require!(ComponentTools);
    let d = Daemon::start();
    let deployed = d.deploy("hello", component("hello"), &[]).await;
    assert_eq!(deployed["spec"]["runtime"], "wasm", "{deployed}");
    let resp = d.invoke("hello", b"").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "hello from a component\n");

    // The request body reaches the guest and streams back.
    d.deploy("echo", component("echo"), &[]).await;
    let body: String = "0123456789".repeat(50_000);
    let resp = d
        .post("/fn/admin/echo")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    assert_eq!(resp.text().await.unwrap(), body);

    d.deploy("probe", component("probe"), &[("env", "GREETING=hi there")])
        .await;
    // The function's --env is both its environment and its wasi:config.
    assert_eq!(
        d.call("probe/env", "?GREETING", "").await,
        (200, "hi there".into())
    );
    assert_eq!(
        d.call("probe/config", "?GREETING", "").await,
        (200, "hi there".into())
    );
    assert_eq!(d.call("probe/config", "?NOPE", "").await.0, 404);
    // The sub-path is the component's whole path: it routes as if at root.
    assert_eq!(
        d.call("probe/anything", "", "").await,
        (200, "probe\n".into())
    );
    // stdout and stderr reach the function's log.
    assert_eq!(d.call("probe/log", "", "").await, (200, "logged\n".into()));
    let lines = d
        .logs_until("probe", |l| {
            l.iter().any(|l| l["message"] == "to stderr")
                && l.iter().any(|l| l["message"] == "to stdout")
        })
        .await;
    assert!(
        lines
            .iter()
            .any(|l| l["stream"] == "stderr" && l["message"] == "to stderr")
    );
    let lines = d
        .logs_until("probe", |l| {
            l.iter().any(|l| l["message"] == "probe: via wasi:logging")
        })
        .await;
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "warn" && l["message"] == "probe: via wasi:logging"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn wasi_keyvalue_is_the_functions_kv_and_its_increments_are_atomic() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("probe", component("probe"), &[]).await;
    assert_eq!(
        d.call("probe/kv", "?hits", "").await,
        (200, "hits=1 last=hits\n".into())
    );
    assert_eq!(
        d.call("probe/kv", "?hits", "").await,
        (200, "hits=2 last=hits\n".into())
    );
    // Concurrent increments lose nothing.
    let calls: Vec<_> = (0..20)
        .map(|_| d.post("/fn/admin/probe/kv?hits").send())
        .collect();
    for resp in futures::future::join_all(calls).await {
        assert_eq!(resp.unwrap().status(), 200);
    }
    assert_eq!(
        d.call("probe/kv", "?hits", "").await,
        (200, "hits=23 last=hits\n".into())
    );
    // The function has one store.
    assert_eq!(
        d.call("probe/kvstore", "?other", "").await,
        (404, "no such store\n".into())
    );
    assert_eq!(
        d.call("probe/kvstore", "?default", "").await,
        (200, "opened\n".into())
    );
    // A value that is not a counter is refused, and the guest is told why.
    let (status, text) = d.call("probe/kv", "?last", "").await;
    assert_eq!(status, 500);
    assert!(text.contains("not a decimal number"), "{text}");

    // `exists` tapes its answer, not the value it asked about.
    let resp = d
        .http
        .put(format!("{}/v1/functions/probe/kv/big", d.url))
        .bearer_auth(&d.token)
        .body(vec![b'v'; 512 << 10])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let resp = d.post("/fn/admin/probe/kvexists?big").send().await.unwrap();
    let id = resp.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(resp.text().await.unwrap(), "yes");
    let tape = d.recording_when_written(&id).await;
    let call = tape["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call"] == "kv.exists \"big\"")
        .unwrap_or_else(|| panic!("{tape}"));
    assert_eq!(call["answer"], "true");
    assert!(call["payload_bytes"].as_u64().unwrap_or(0) < 1024, "{call}");
    assert_eq!(
        d.call("probe/kvexists", "?nothing", "").await,
        (200, "no".into())
    );
    let resp = d.delete("/v1/functions/probe/kv/big").send().await.unwrap();
    assert!(resp.status().is_success());

    // `list-keys` gives one page; a full one is never taken for all keys.
    assert_eq!(d.call("probe/kvkeys", "", "").await, (200, "2 keys".into()));
    use futures::StreamExt;
    let puts = futures::stream::iter(0..1000).map(|i| {
        d.http
            .put(format!("{}/v1/functions/probe/kv/k{i:04}", d.url))
            .bearer_auth(&d.token)
            .body("v")
            .send()
    });
    let mut puts = puts.buffer_unordered(16);
    while let Some(resp) = puts.next().await {
        assert_eq!(resp.unwrap().status(), 204);
    }
    let (status, text) = d.call("probe/kvkeys", "", "").await;
    assert_eq!(status, 200);
    assert!(
        text.starts_with("1000 keys; more: the bucket has more keys than one listing holds (1000)"),
        "{text}"
    );
}

#[tokio::test]
async fn outgoing_requests_go_through_the_allow_list() {
    require!(ComponentTools);
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let addr = crate::outbound::upstream().await;
    d.deploy(
        "fetch",
        component("probe"),
        &[("allow_host", &addr.to_string())],
    )
    .await;
    d.deploy("nofetch", component("probe"), &[]).await;
    let query = format!("?http://{addr}/data");

    assert_eq!(
        d.call("fetch/fetch", &query, "").await,
        (200, "upstream 200: from upstream".into())
    );
    // Refused: the guest gets wasi:http's HTTP-request-denied (code 15)
    // and the log says why.
    assert_eq!(
        d.call("nofetch/fetch", &query, "").await,
        (502, "failed: error code 15\n".into())
    );
    let lines = d.logs_until("nofetch", |l| !l.is_empty()).await;
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .unwrap()
            .contains("add it with --allow-host")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_components_tape_replays_identically() {
    require!(ComponentTools);
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let addr = crate::outbound::upstream().await;
    d.deploy(
        "probe",
        component("probe"),
        &[("allow_host", &addr.to_string())],
    )
    .await;
    let (status, first) = d.call("probe/random", "", "").await;
    assert_eq!(status, 200);
    let (_, second) = d.call("probe/random", "", "").await;
    assert_ne!(first, second, "randomness and the clock are live");
    let id = d.newest_tape("probe", 2).await;
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");

    // KV answers replay from the tape too (the counter has moved on since).
    d.call("probe/kv", "?n", "").await;
    let id = d.newest_tape("probe", 3).await;
    d.call("probe/kv", "?n", "").await;
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");

    // An outgoing request replays from the tape, without the network.
    d.call("probe/fetch", &format!("?http://{addr}/data"), "")
        .await;
    let id = d.newest_tape("probe", 5).await;
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report:#}");
}

#[tokio::test]
async fn components_hearth_cannot_run_are_refused_at_deploy() {
    let d = Daemon::start();
    let cases: [(&str, &str, &[&str]); 6] = [
        (
            "unknown-import",
            r#"(component (import "wasi:nn/graph@0.2.0" (instance)))"#,
            &[
                "imports wasi:nn/graph@0.2.0",
                "which Hearth does not provide",
                "wasi:http",
            ],
        ),
        (
            "future-http",
            r#"(component (import "wasi:http/types@0.3.0-rc-2025-09-16" (instance)))"#,
            &["imports wasi:http/types@0.3.0-rc-2025-09-16", "0.2.x"],
        ),
        (
            "no-exports",
            "(component)",
            &["exports nothing", "wasi:http/incoming-handler@0.2.x"],
        ),
        (
            "command",
            r#"(component (instance $run) (export "wasi:cli/run@0.2.0" (instance $run)))"#,
            &["wasi:cli command component", "wasi:http/incoming-handler"],
        ),
        // Each request's instance would take more pool slots than a
        // sandbox has: refused at deploy, not at every request.
        (
            "many-instances",
            &format!(
                "(component (core module $m){})",
                "(core instance (instantiate $m))".repeat(17)
            ),
            &["17 core module instances", "maximum of 16"],
        ),
        (
            "many-memories",
            &format!(
                "(component (core module $m (memory 1)){})",
                "(core instance (instantiate $m))".repeat(3)
            ),
            &["3 Wasm linear memories", "maximum of 2"],
        ),
    ];
    for (name, wat, wanted) in cases {
        let resp = d.deploy_raw(name, wat.as_bytes().to_vec(), &[]).await;
        let (status, _, message) = error_of(resp).await;
        assert_eq!(status, 400, "{name}: {message}");
        for want in wanted {
            assert!(
                message.contains(want),
                "{name}: {want:?} not in {message:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_components_init_step_runs_once_at_deploy_and_is_snapshotted() {
    require!(ComponentTools);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = Daemon::start_in(&dir, &[]);
    d.deploy(
        "preinit",
        component_with("preinit", "function-with-init", ""),
        &[],
    )
    .await;
    // The handler never runs the init step itself: `initialized=1` is the
    // snapshot's memory, made at deploy.
    for _ in 0..2 {
        assert_eq!(
            d.call("preinit", "", "").await,
            (200, "primes=148933 initialized=1\n".into())
        );
    }
    // After a restart without the compiled-code cache, the stored artifact
    // (the snapshot) is compiled again as a component.
    drop(d);
    std::fs::remove_dir_all(dir.join("cache")).unwrap();
    let d = Daemon::start_in(&dir, &[]);
    assert_eq!(
        d.call("preinit", "", "").await,
        (200, "primes=148933 initialized=1\n".into())
    );
    // Refused at deploy: a failing init step, with its stderr; one that
    // draws randomness, which every invocation would share.
    for (flags, wanted) in [
        ("-DTRAP_AT_INIT", "cannot build the table"),
        ("-DRANDOM_AT_INIT", "drew randomness"),
    ] {
        let code = component_with("preinit", "function-with-init", flags);
        let resp = d.deploy_raw("bad-init", code, &[]).await;
        let (status, _, message) = error_of(resp).await;
        assert_eq!(status, 400, "{flags}: {message}");
        assert!(message.contains(wanted), "{flags}: {message}");
    }
}

/// A component built by `build(out)` from `inputs` (files under
/// examples/components), once per change of their contents.
fn built_once(name: &str, inputs: &[&str], build: impl FnOnce(&Path) -> Command) -> Vec<u8> {
    let examples = crate_dir().join("../../examples/components");
    let mut hash = sha2::Sha256::new();
    for file in inputs {
        hash.update(std::fs::read(examples.join(file)).unwrap());
    }
    let key = format!("{:x}", hash.finalize());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{name}-{}.wasm", &key[..16]));
    if !out.exists() {
        let building = dir.join(format!("{name}-{}.tmp.wasm", std::process::id()));
        let status = build(&building).current_dir(&examples).status().unwrap();
        assert!(status.success(), "building {name} failed");
        std::fs::rename(&building, &out).unwrap();
    }
    std::fs::read(out).unwrap()
}

/// A tool scripts/component-tools.sh installs and names in `var`.
fn tool(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with ./test.sh, whose scripts/component-tools.sh installs the tool it names")
    })
}

/// examples/components/hello.py, built with componentize-py.
fn python_component() -> Vec<u8> {
    built_once("hello-py", &["hello.py", "wit/world.wit"], |out| {
        let mut c = Command::new(tool("HEARTH_COMPONENTIZE_PY"));
        c.args([
            "-d",
            "wit",
            "-w",
            "hearth:examples/function",
            "componentize",
            "hello",
            "-o",
        ])
        .arg(out);
        c
    })
}

/// examples/components/hello.js, built with componentize-js.
fn javascript_component() -> Vec<u8> {
    built_once(
        "hello-js",
        &["hello.js", "build-js.mjs", "wit/world.wit"],
        |out| {
            let mut c = Command::new("node");
            c.env("COMPONENTIZE_JS", tool("COMPONENTIZE_JS"))
                .args(["build-js.mjs", "hello.js"])
                .arg(out);
            c
        },
    )
}

/// A Python function as componentize-py builds it (CPython inside; wasi
/// imports of two patch versions, 0.2.9 and 0.2.12) runs unchanged.
#[tokio::test]
async fn a_python_component_from_componentize_py_runs_unchanged() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy("hello-py", python_component(), &[]).await;
    assert_eq!(
        d.call("hello-py/a/b", "?c=1", "").await,
        (200, "hello from python at /a/b?c=1, call 1\n".into())
    );
    assert_eq!(
        d.call("hello-py", "", "").await,
        (200, "hello from python at /, call 2\n".into())
    );
}

/// A JavaScript function as componentize-js builds it (StarlingMonkey
/// inside) runs unchanged, and reads the function's --env as wasi:config.
#[tokio::test]
async fn a_javascript_component_from_componentize_js_runs_unchanged() {
    require!(ComponentTools);
    let d = Daemon::start();
    d.deploy(
        "hello-js",
        javascript_component(),
        &[("env", "GREETING=hi")],
    )
    .await;
    assert_eq!(
        d.call("hello-js/a", "?b=1", "").await,
        (200, "hi from javascript at /a?b=1\n".into())
    );
}
