//! The node's admission, in process: the real node with the real wasm tier
//! (no HTTP in between), so what is tested is the invoker's own rule: a
//! node-wide limit and a per-tenant share, both taken before anything
//! runs, and given back when an invocation ends.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::{FunctionSpec, InvokeError, Request, Runtime};
use hearth_host::{Engine, HostLimits, HostServices, Source};
use hearth_node::{MemoryBudget, Node, NodeConfig};
use hearth_store::{ArtifactStore, SqliteStore, Store};
use hearth_wasm::{WasmConfig, WasmEngine};

const SPIN: &[u8] = include_bytes!("../../../examples/wasm/spin.wat");
const HELLO: &[u8] = include_bytes!("../../../examples/wasm/hello.wat");

struct Fixture {
    node: Arc<Node>,
    _dir: tempfile::TempDir,
}

/// A node with `limits` (node-wide, per tenant), tenants `a` and `b`, and
/// in each a `spin` (runs until its 400 ms deadline) and a `hello`.
async fn node(limits: (usize, usize)) -> Fixture {
    node_with(limits, NodeConfig::default().memory).await
}

/// As [`node`], with the memory budget `memory`.
async fn node_with(limits: (usize, usize), memory: MemoryBudget) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let artifacts = ArtifactStore::open(dir.path().join("artifacts")).unwrap();
    let wasm: Arc<dyn Engine> =
        Arc::new(WasmEngine::new(WasmConfig::new(dir.path().join("cache"))).unwrap());
    let services = Arc::new(HostServices::new(store.clone(), HostLimits::default()));
    let config = NodeConfig {
        max_concurrency: limits.0,
        max_concurrency_per_tenant: limits.1,
        memory,
        ..NodeConfig::default()
    };
    let node = Arc::new(Node::new(
        store.clone(),
        artifacts,
        vec![wasm],
        services,
        config,
    ));
    for tenant in ["a", "b"] {
        store.create_tenant(tenant).await.unwrap();
        for (name, code) in [("spin", SPIN), ("hello", HELLO)] {
            let mut spec = FunctionSpec::new(Runtime::Wasm);
            spec.limits.timeout_ms = 400;
            node.deploy(tenant, name, Source::from(code.to_vec()), spec, true)
                .await
                .unwrap();
        }
    }
    Fixture { node, _dir: dir }
}

async fn invoke(node: &Arc<Node>, tenant: &str, name: &str) -> Result<(), InvokeError> {
    let v = node.resolve(tenant, name, None).await.unwrap();
    node.invoke(&v, Request::default(), None)
        .await
        .unwrap()
        .result
        .map(drop)
}

/// Starts `n` spins of `tenant` and waits until they run.
async fn spinning(f: &Fixture, tenant: &'static str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let before = f.node.in_flight();
    let spins: Vec<_> = (0..n)
        .map(|_| {
            let node = f.node.clone();
            tokio::spawn(async move {
                let r = invoke(&node, tenant, "spin").await;
                assert!(matches!(r, Err(InvokeError::Timeout { .. })), "{r:?}");
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while f.node.in_flight() < before + n {
        assert!(Instant::now() < deadline, "the spins did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    spins
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_at_its_limit_refuses_before_running_anything_and_takes_work_again_after() {
    let f = node((1, 1)).await;
    let spins = spinning(&f, "a", 1).await;
    let refused = Instant::now();
    let r = invoke(&f.node, "b", "hello").await;
    assert!(matches!(r, Err(InvokeError::Overloaded)), "{r:?}");
    assert!(
        refused.elapsed() < Duration::from_millis(200),
        "refused at once"
    );
    for s in spins {
        s.await.unwrap();
    }
    assert_eq!(f.node.in_flight(), 0, "the permit went back");
    invoke(&f.node, "b", "hello").await.unwrap();
}

/// The sum of the `/metrics` series that start with `series`.
fn metric(node: &Node, series: &str) -> f64 {
    node.metrics()
        .encode()
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_prepares_nothing_and_is_counted_apart_from_invocations() {
    let f = node((1, 1)).await;
    let hello = f.node.resolve("b", "hello", None).await.unwrap();
    let spins = spinning(&f, "a", 1).await;
    // Not prepared yet: refused before it is.
    let refused = f.node.invoke(&hello, Request::default(), None).await;
    let refused = refused.unwrap().result;
    assert!(
        matches!(refused, Err(InvokeError::Overloaded)),
        "{refused:?}"
    );
    for s in spins {
        s.await.unwrap();
    }
    let first = f.node.invoke(&hello, Request::default(), None).await;
    let first = first.unwrap();
    assert!(first.result.is_ok());
    assert_eq!(
        first.start,
        hearth_node::StartKind::Cold,
        "the refusal prepared nothing"
    );
    // Prepared now: refused at admission.
    let spins = spinning(&f, "a", 1).await;
    let refused = invoke(&f.node, "b", "hello").await;
    assert!(
        matches!(refused, Err(InvokeError::Overloaded)),
        "{refused:?}"
    );
    for s in spins {
        s.await.unwrap();
    }
    let kind = r#"hearth_invocations_refused_total{kind="overloaded"}"#;
    assert_eq!(metric(&f.node, kind), 2.0);
    // Two spins and one hello ran: the refusals are no starts,
    // invocations, errors or latencies.
    assert_eq!(metric(&f.node, "hearth_starts_total"), 3.0);
    assert_eq!(metric(&f.node, "hearth_invocations_total"), 3.0);
    assert_eq!(
        metric(&f.node, "hearth_invocation_errors_total"),
        2.0,
        "the spins' timeouts"
    );
    let latencies = "hearth_invocation_duration_seconds_count";
    assert_eq!(metric(&f.node, latencies), 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_at_its_share_is_refused_while_another_still_runs() {
    let f = node((4, 2)).await;
    let spins = spinning(&f, "a", 2).await;
    assert_eq!(f.node.tenant_in_flight("a").0, 2);
    let r = invoke(&f.node, "a", "hello").await;
    assert!(
        matches!(r, Err(InvokeError::TenantBusy { limit: 2 })),
        "{r:?}"
    );
    invoke(&f.node, "b", "hello").await.unwrap();
    for s in spins {
        s.await.unwrap();
    }
    invoke(&f.node, "a", "hello").await.unwrap();
}

/// Each invocation of `long` and `hello` reserves its memory limit (64
/// MiB by default) and the node's tape budget (4 MiB): 68 MiB.
const ONE: u64 = (64 + 4) << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_reserved_at_admission_against_the_tenants_share_and_the_nodes() {
    let memory = MemoryBudget {
        node_bytes: 3 * ONE + ONE / 2,
        tenant_bytes: 2 * ONE + ONE / 2,
    };
    let f = node_with((100, 100), memory).await;
    // Spins long enough for every check below to fall inside them.
    for t in ["a", "b"] {
        let mut spec = FunctionSpec::new(Runtime::Wasm);
        spec.limits.timeout_ms = 3000;
        f.node
            .deploy(t, "long", Source::from(SPIN.to_vec()), spec, true)
            .await
            .unwrap();
        invoke(&f.node, t, "hello").await.unwrap();
    }
    let long: Vec<_> = ["a", "a", "b"]
        .into_iter()
        .map(|t| {
            let node = f.node.clone();
            tokio::spawn(async move { invoke(&node, t, "long").await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(2);
    while f.node.in_flight() < 3 {
        assert!(Instant::now() < deadline, "the spins did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = invoke(&f.node, "a", "hello").await;
    assert!(
        matches!(r, Err(InvokeError::TenantMemoryFull { limit_mib: 170 })),
        "{r:?}"
    );
    let r = invoke(&f.node, "b", "hello").await;
    assert!(
        matches!(r, Err(InvokeError::MemoryFull { capacity_mib: 238 })),
        "{r:?}"
    );
    assert_eq!(f.node.tenant_memory("a"), (2 * ONE, memory.tenant_bytes));
    for s in long {
        let r = s.await.unwrap();
        assert!(matches!(r, Err(InvokeError::Timeout { .. })), "{r:?}");
    }
    assert_eq!(f.node.tenant_memory("a").0, 0, "the memory went back");
    invoke(&f.node, "a", "hello").await.unwrap();
    invoke(&f.node, "b", "hello").await.unwrap();

    // A function one invocation of which could never be let in is refused
    // at deploy, naming the setting.
    let mut spec = FunctionSpec::new(Runtime::Wasm);
    spec.limits.memory_mib = 200;
    let e = f
        .node
        .deploy("a", "huge", Source::from(HELLO.to_vec()), spec, true)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--capacity-mib-per-tenant"), "{e}");
}
