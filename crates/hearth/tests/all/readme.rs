//! The README's Quickstart, run as written against a real daemon: its
//! commands are the first thing a new user types, so a change that breaks
//! one fails here. Its first two blocks (one node; Python and Node.js) are
//! run; the later ones show forms with placeholders (`ID`, `f.wasm`) or a
//! cluster on fixed ports, and are covered by the recording and cluster
//! tests. Only what points at a fixed place is adapted: the
//! daemon's URL for `127.0.0.1:8080`, its data directory for `./.hearth`,
//! this build's binary for the `hearth` alias; `./run.sh &` is the daemon
//! the test starts.

use std::process::Command;

use crate::harness::{Daemon, HEARTH, crate_dir};

/// The first two shell blocks of the README's `## Quickstart` section.
fn quickstart_blocks(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Quickstart"))
        .expect("the README has a Quickstart section");
    section
        .split("```sh\n")
        .skip(1)
        .take(2)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_readme_quickstart_runs_as_written() {
    let readme = std::fs::read_to_string(crate_dir().join("../../README.md")).unwrap();
    let blocks = quickstart_blocks(&readme);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let d = Daemon::start();
    let data = d.dir.display().to_string();
    let mut script = String::from(
        "set -euo pipefail\n\
         curl() { command curl -sS --fail-with-body \"$@\"; echo; }\n",
    );
    for block in &blocks {
        for line in block.lines() {
            let line = if line.starts_with("./run.sh") {
                continue;
            } else if line.starts_with("alias hearth=") {
                format!("hearth() {{ {HEARTH:?} --data-dir {data:?} \"$@\"; echo; }}")
            } else {
                line.replace("http://127.0.0.1:8080", &d.url)
                    .replace(".hearth/token", &format!("{data}/token"))
            };
            script.push_str(&line);
            script.push('\n');
        }
    }
    // From a directory of its own, where examples/ is the repository's.
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        crate_dir().join("../../examples"),
        work.path().join("examples"),
    )
    .unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the Quickstart failed:\n{stdout}\n{stderr}\n--- script:\n{script}"
    );
    // What its comments promise.
    for promised in [
        "ping",
        "hello from wasm",
        "deployed logger version 1",
        "structured hello",
        "\"you_sent\": {\"a\": 1}",
        "deployed hi-node version 1",
    ] {
        assert!(
            stdout.contains(promised),
            "{promised:?} not in the Quickstart's output:\n{stdout}\n{stderr}"
        );
    }
}
