//! `hearth-bench trace`: the placer and simulated nodes driven by the real
//! Azure 2021 excerpt, through the CLI a user runs. The real-node runs start
//! the `hearth` binary that `cargo test --workspace` builds beside this one.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_hearth-bench");

fn data(p: &str) -> std::path::PathBuf {
    // Read when the test runs: a clone elsewhere sharing the target dir may
    // reuse this binary.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("data")
        .join(p)
}

#[test]
fn the_azure_2021_excerpt_is_reported_per_mode_as_csv_and_svg() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(BENCH)
        .args(["trace", "--nodes", "3", "--pools", "8,0", "--out"])
        .arg(out.path())
        .arg("--trace")
        .arg(data("azure2021/Azure2021_200.csv"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary = std::fs::read_to_string(out.path().join("summary.csv")).unwrap();
    let rows: Vec<Vec<&str>> = summary
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(
        rows.len(),
        8,
        "four modes, with and without a pool:\n{summary}"
    );
    let get = |mode: &str, pool: &str, col: usize| -> f64 {
        rows.iter().find(|r| r[0] == mode && r[1] == pool).unwrap()[col]
            .parse()
            .unwrap()
    };
    for r in &rows {
        assert_eq!(
            r[2], "199",
            "every invocation of the excerpt is placed: {r:?}"
        );
    }
    // Columns: 5 cold, 10 mean_gb. Sharing runtimes starts fewer and holds less.
    assert!(get("tenant", "8", 5) < get("none", "0", 5));
    assert!(get("tenant", "8", 10) < get("none", "0", 10));
    let svg = std::fs::read_to_string(out.path().join("memory.svg")).unwrap();
    // One line per run, drawn 2 wide (the axes' ticks are 1 wide).
    let lines = svg
        .split("<polyline")
        .filter(|p| p.starts_with(r#" fill="none""#) && p.contains(r#"stroke-width="2""#))
        .count();
    assert!(svg.starts_with("<svg") && lines == 8, "{lines} lines");
    assert!(svg.contains("tenant + pool: cold "), "the legend");
    let bars = std::fs::read_to_string(out.path().join("summary.svg")).unwrap();
    assert!(bars.starts_with("<svg") && bars.contains("\ntenant + pool\n"));
    let memory = std::fs::read_to_string(out.path().join("memory.csv")).unwrap();
    assert!(
        memory.lines().count() > 100,
        "a sample every 10 s over ~21 min"
    );

    // A file that is not a trace gets a reason, not a panic.
    let bad = out.path().join("bad.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    let run = Command::new(BENCH)
        .args(["trace", "--trace"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("no \"app\" column"), "{err}");
}

type Row = std::collections::HashMap<String, f64>;

/// The real-node tests' trace: a synthetic hour of 200 functions over
/// three nodes with pools of eight.
const SMALL_TRACE: [&str; 8] = [
    "--functions",
    "200",
    "--hours",
    "1",
    "--nodes",
    "3",
    "--pools",
    "8",
];

/// The one row of `real.csv` of a `hearth-bench trace` run with `args`,
/// as column → value, with the run's output.
fn real_run(args: &[&str]) -> (Row, String) {
    let (mut rows, out) = real_rows(args);
    assert_eq!(rows.len(), 1, "{out}");
    (rows.remove(0), out)
}

/// The rows of `real.csv` (one per mode) of a `hearth-bench trace` run
/// with `args`, as column → value, with the run's output; asserts the run
/// left no data directory of a real node behind.
fn real_rows(args: &[&str]) -> (Vec<Row>, String) {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(BENCH)
        .arg("trace")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = run.id();
    let run = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).to_string();
    assert!(run.status.success(), "{stderr}");
    let real = std::fs::read_to_string(out.path().join("real.csv")).unwrap();
    let mut lines = real.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Row> = lines
        .map(|line| {
            header
                .iter()
                .zip(line.split(','))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect()
        })
        .collect();
    // The bench stopped its nodes: no data directory or cgroup left.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("hearth-real-{pid}-"))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    (rows, format!("{real}\n{stderr}"))
}

/// Hydra §5.2's setup in small: the placer runs a synthetic hour over three
/// nodes; for the first 15 trace seconds nodes 0 and 1 are real `hearth up`s
/// started by the bench (Python handlers that sleep for the invocation's
/// duration), each running one invocation at a time. Told nothing of that
/// limit, the placer meets it as refusals and places those again
/// elsewhere; knowing it (as a gateway does from a node's join), it sends
/// no node more than it takes.
#[test]
fn real_nodes_run_their_share_of_the_trace_window_and_push_back() {
    let args = |limits| {
        let mut args = SMALL_TRACE.to_vec();
        args.extend([
            "--modes",
            "tenant",
            "--real-nodes",
            "2",
            "--real-seconds",
            "15",
            "--real-max-ms",
            "300",
            "--real-max-concurrency",
            "1",
            "--real-limits",
            limits,
        ]);
        args
    };
    let (hidden, out) = real_run(&args("hidden"));
    let col = |name: &str| hidden[name];
    assert!(
        col("sent") > 0.0,
        "the placer sent the real nodes work: {out}"
    );
    assert_eq!(col("failed"), 0.0, "{out}");
    assert_eq!(col("ok") + col("refused"), col("sent"), "{out}");
    assert!(
        col("refused") > 0.0,
        "one at a time, the real nodes refuse some: {out}"
    );
    assert_eq!(
        col("moved_sim") + col("moved_real") + col("rejected"),
        col("refused"),
        "every refusal was placed again or rejected: {out}"
    );
    assert!(col("window") >= col("ok"), "{out}");
    assert_eq!(col("cold") + col("warm"), col("ok"));
    assert!(
        col("cold") >= 1.0,
        "a fresh node's first invocation is cold: {out}"
    );
    assert!(
        col("density_per_gb_s") > 0.0,
        "completed invocations over memory held: {out}"
    );
    assert!(col("peak_mb") > 0.0, "the nodes' memory was sampled: {out}");
    assert!(
        col("package_zygotes") >= 1.0,
        "the Python functions' library was imported into a tenant's zygote: {out}"
    );

    let (known, out) = real_run(&args("known"));
    assert!(known["ok"] > 0.0, "{out}");
    assert_eq!(known["failed"], 0.0, "{out}");
    assert_eq!(
        known["refused"], 0.0,
        "the placer kept within the limit: {out}"
    );
}

/// The colocation mode decides on the real node itself who shares the
/// Python functions' library: under `full` every handler forks from one
/// zygote that imported it; under `none` there is no such zygote (each
/// handler imports it for itself).
#[test]
fn a_real_nodes_colocation_mode_decides_who_shares_the_imported_library() {
    let mut args = SMALL_TRACE.to_vec();
    args.extend([
        "--modes",
        "full,none",
        "--real-nodes",
        "1",
        "--real-seconds",
        "10",
        "--real-max-ms",
        "200",
        "--real-import-mib",
        "4",
    ]);
    let (rows, out) = real_rows(&args);
    assert_eq!(rows.len(), 2, "{out}");
    let (full, none) = (&rows[0], &rows[1]);
    for row in [full, none] {
        assert!(row["ok"] > 0.0, "{out}");
        assert_eq!(row["failed"], 0.0, "{out}");
    }
    assert_eq!(full["package_zygotes"], 1.0, "one zygote for all: {out}");
    assert_eq!(none["package_zygotes"], 0.0, "no zygote under none: {out}");
}
