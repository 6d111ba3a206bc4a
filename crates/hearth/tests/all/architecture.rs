//! `docs/architecture.md` checked against the workspace: what the crates
//! table says each crate is not, and that dependencies only point down,
//! read from `cargo metadata` (no daemon).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each workspace crate and its normal (not dev or build) dependencies.
fn crates() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let normal = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            (p["name"].as_str().unwrap().to_string(), normal)
        })
        .collect()
}

/// The layers of the crates diagram, lowest first: a crate depends only
/// on crates of lower layers.
const LAYERS: &[&[&str]] = &[
    &["hearth-jit-runtime"],
    &["hearth-core", "hearth-jit", "hearth-test-support"],
    &["hearth-store"],
    &["hearth-host", "hearth-events"],
    &["hearth-wasm", "hearth-js", "hearth-proc", "hearth-record"],
    &["hearth-node"],
    &["hearth-cluster"],
    &["hearth-api"],
    &["hearth", "hearth-bench"],
];

const ENGINES: &[&str] = &["hearth-wasm", "hearth-js", "hearth-proc"];

/// Crates that speak HTTP: a server, a client, or the OTLP exporter.
const HTTP: &[&str] = &[
    "axum",
    "hyper",
    "hyper-util",
    "reqwest",
    "tower-http",
    "opentelemetry-otlp",
    "opentelemetry-http",
];

fn ours(deps: &BTreeSet<String>) -> BTreeSet<&str> {
    deps.iter()
        .map(String::as_str)
        .filter(|d| d.starts_with("hearth"))
        .collect()
}

#[test]
fn dependencies_only_point_down() {
    let crates = crates();
    let layer = |name: &str| {
        LAYERS
            .iter()
            .position(|l| l.contains(&name))
            .unwrap_or_else(|| panic!("{name} is in no layer of docs/architecture.md's diagram"))
    };
    for (name, deps) in &crates {
        for dep in ours(deps) {
            assert!(
                layer(dep) < layer(name),
                "{name} depends on {dep}, which is not below it"
            );
        }
    }
}

#[test]
fn each_crate_is_not_what_the_architecture_says_it_is_not() {
    let crates = crates();
    let deps = |name: &str| &crates[name];
    // "the engines know the host and nothing else of Hearth's"
    for engine in ENGINES {
        let known: BTreeSet<&str> = ours(deps(engine));
        assert!(
            known.is_subset(&BTreeSet::from(["hearth-core", "hearth-host"])),
            "{engine} knows {known:?}"
        );
    }
    // "the node knows no engine (it is handed them) and no HTTP"
    for engine in ENGINES.iter().chain(&["hearth-api", "hearth-cluster"]) {
        assert!(
            !deps("hearth-node").contains(*engine),
            "hearth-node → {engine}"
        );
    }
    for http in HTTP {
        assert!(!deps("hearth-node").contains(*http), "hearth-node → {http}");
    }
    // "the cluster knows no node"
    assert!(!deps("hearth-cluster").contains("hearth-node"));
    // "the API knows no engine"
    for engine in ENGINES.iter().chain(&["hearth-jit"]) {
        assert!(
            !deps("hearth-api").contains(*engine),
            "hearth-api → {engine}"
        );
    }
    // "the store knows only the vocabulary"
    assert_eq!(ours(deps("hearth-store")), BTreeSet::from(["hearth-core"]));
    // Events know the store and the vocabulary; what runs a firing is
    // handed to them (`Dispatch`).
    assert!(
        ours(deps("hearth-events")).is_subset(&BTreeSet::from(["hearth-core", "hearth-store"])),
        "hearth-events knows {:?}",
        ours(deps("hearth-events"))
    );
    for http in HTTP {
        assert!(
            !deps("hearth-events").contains(*http),
            "hearth-events → {http}"
        );
    }
    // hearth-core is "not behaviour, I/O"; hearth-jit is not a tier, and
    // uses nothing of Hearth's but its runtime, which uses nothing at all
    // (its wasm build is `core` only).
    assert!(deps("hearth-jit-runtime").is_empty());
    for pure in ["hearth-core", "hearth-jit"] {
        assert!(
            ours(deps(pure)).is_subset(&BTreeSet::from(["hearth-jit-runtime"])),
            "{pure} depends on Hearth"
        );
        for io in ["tokio", "rusqlite", "postgres", "wasmtime", "rquickjs"]
            .iter()
            .chain(HTTP)
        {
            assert!(!deps(pure).contains(*io), "{pure} → {io}");
        }
    }
    // hearth-test-support is "ever a normal dependency": never.
    for (name, d) in &crates {
        assert!(
            !d.contains("hearth-test-support"),
            "{name} → hearth-test-support"
        );
    }
}

#[test]
fn the_crates_table_names_every_crate_and_no_other() {
    let doc = include_str!("../../../../docs/architecture.md");
    let table: BTreeSet<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("hearth"))
        .collect();
    let crates = crates();
    let named: BTreeSet<&str> = crates
        .keys()
        .map(String::as_str)
        .filter(|n| *n != "hearth-bench")
        .collect();
    assert_eq!(table, named, "docs/architecture.md's crates table");
}
