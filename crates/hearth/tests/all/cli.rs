//! The `hearth` CLI against a running daemon.

use hearth_test_support::require;
use std::process::Command;

use crate::harness::{Daemon, HEARTH};

/// Runs the `hearth` CLI against `d`: success, stdout, stderr.
pub(crate) fn hearth(d: &Daemon, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(HEARTH)
        .arg("--data-dir")
        .arg(&d.dir)
        .args(args)
        .env_remove("HEARTH_URL")
        .env_remove("HEARTH_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn examples_dir() -> std::path::PathBuf {
    crate::harness::crate_dir().join("../../examples/wasm")
}

#[tokio::test]
async fn deploy_invoke_ls_versions_logs_rm_from_the_data_dir() {
    let d = Daemon::start();
    let file = examples_dir().join("echo.wat");
    let (ok, out, err) = hearth(
        &d,
        &[
            "deploy",
            file.to_str().unwrap(),
            "--name",
            "say",
            "--memory-mib",
            "32",
            "--env",
            "A=b",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("deployed say version 1"), "{out}");

    let data = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(data.path(), "from a file").unwrap();
    let at = format!("@{}", data.path().display());
    let (ok, out, err) = hearth(&d, &["invoke", "say", "-d", &at]);
    assert!(ok, "{err}");
    assert_eq!(out, "from a file");

    let (ok, out, _) = hearth(&d, &["ls"]);
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("say ") && l.contains("32MiB")),
        "{out}"
    );
    let (ok, out, _) = hearth(&d, &["ls", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "say")
    );

    hearth(
        &d,
        &[
            "deploy",
            examples_dir().join("log.wat").to_str().unwrap(),
            "--name",
            "say",
        ],
    );
    let (_, out, _) = hearth(&d, &["versions", "say", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["versions"].as_array().unwrap().len(), 2);
    assert_eq!(v["versions"][0]["spec"]["env"]["A"], "b");

    let (ok, out, _) = hearth(&d, &["invoke", "say", "--version", "1", "-d", "pinned"]);
    assert!(ok);
    assert_eq!(out, "pinned");
    hearth(&d, &["invoke", "say"]);
    let lines = d.logs_until("say", |l| !l.is_empty()).await;
    assert!(!lines.is_empty());
    let (ok, out, _) = hearth(&d, &["logs", "say"]);
    assert!(ok);
    assert!(out.contains("structured hello"), "{out}");

    let (ok, _, err) = hearth(&d, &["invoke", "nope"]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
    let (ok, out, _) = hearth(&d, &["rm", "say"]);
    assert!(ok, "{out}");
    let (ok, _, err) = hearth(&d, &["rm", "say"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
}

/// The readable forms of the answers the CLI reads as the API's own types
/// (`hearth_api::answers`): tenants, versions, recordings and replays.
#[tokio::test]
async fn tenants_versions_recordings_and_replays_read_as_the_api_writes_them() {
    let d = Daemon::start();
    let (ok, out, err) = hearth(&d, &["status"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("Hearth ")
            && out.contains(" invocations in flight\nmemory: 0 of ")
            && out.contains("\nisolation: "),
        "{out}"
    );
    let (ok, out, err) = hearth(&d, &["create-tenant", "acme"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("created tenant acme\ntoken: "), "{out}");
    let (ok, out, err) = hearth(&d, &["tenant", "acme"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("tenant acme: colocation ")
            && out.contains("(the cluster's; its own would override "),
        "{out}"
    );
    let (ok, out, err) = hearth(&d, &["tenant", "acme", "--colocation", "none"]);
    assert!(ok, "{err}");
    assert_eq!(out, "tenant acme: colocation none (its own)\n");

    let file = examples_dir().join("echo.wat");
    let (ok, _, err) = hearth(&d, &["deploy", file.to_str().unwrap(), "--name", "say"]);
    assert!(ok, "{err}");
    let (ok, out, err) = hearth(&d, &["versions", "say"]);
    assert!(ok, "{err}");
    let row = out.lines().nth(1).unwrap_or_default();
    // Version, its date and time, the artifact's first 12 hex digits.
    assert!(
        row.trim_start().starts_with("1  20") && row.contains("Z  ") && row.contains("MiB"),
        "{out}"
    );
    let (ok, out, _) = hearth(&d, &["invoke", "say", "-d", "taped"]);
    assert!(ok && out == "taped", "{out}");

    // Tapes reach the index shortly after the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let row = loop {
        let (ok, out, err) = hearth(&d, &["recordings", "say"]);
        assert!(ok, "{err}");
        if let Some(row) = out.lines().nth(1) {
            break row.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no tape listed: {out}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let id = row.split_whitespace().next().unwrap().to_string();
    assert_eq!(id.len(), 32, "{row}");
    assert!(row.contains(" 200 ") && row.ends_with("ok"), "{row}");
    // A second: a page of one names the next, and the next has the first.
    let (ok, _, _) = hearth(&d, &["invoke", "say", "-d", "again"]);
    assert!(ok);
    let newer = loop {
        let (_, out, _) = hearth(&d, &["recordings", "say", "--limit", "1"]);
        let first = out.lines().nth(1).unwrap_or_default();
        if !first.starts_with(&id) {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let next = newer
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("older: hearth recordings say --before "))
        .unwrap_or_else(|| panic!("no next page named: {newer}"));
    let (ok, out, err) = hearth(
        &d,
        &[
            "recordings",
            "say",
            "--limit",
            "1",
            "--before",
            next,
            "--version",
            "1",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with(&id), "{out}");

    let (ok, out, err) = hearth(&d, &["replay", &id]);
    assert!(ok, "{out}{err}");
    assert_eq!(out, format!("{id}  v1 → v1: identical\n"));
    let (ok, out, err) = hearth(&d, &["replay", "say", "--against", "1"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "replayed 2 recordings of say against v1: 0 responses changed, 0 diverged from their tape\n"
    );
}

#[tokio::test]
async fn hearth_url_and_token_reach_a_remote_hearth() {
    let d = Daemon::start();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(HEARTH)
        .current_dir(elsewhere.path())
        .args(["invoke", "counter"])
        .env("HEARTH_URL", &d.url)
        .env("HEARTH_TOKEN", &d.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
    // Without them, and no local daemon, the CLI says what to do.
    let out = Command::new(HEARTH)
        .current_dir(elsewhere.path())
        .env_remove("HEARTH_URL")
        .env_remove("HEARTH_DATA_DIR")
        .args(["ls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("hearth up"));
}

#[tokio::test]
async fn a_reader_that_goes_away_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let d = Daemon::start();
    // `hearth ls | head -0`: the reader is gone before the CLI writes.
    let mut child = Command::new(HEARTH)
        .arg("--data-dir")
        .arg(&d.dir)
        .arg("ls")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "nothing on stderr, got {stderr:?}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "ended by SIGPIPE like ls or cat, not {:?}",
        out.status
    );
}

/// `hearth deploy` says what it resolved and installed, `hearth versions`
/// shows the lock, and `hearth kv` seeds and reads the function's KV.
#[tokio::test]
async fn deploy_reports_packages_and_kv_seeds_a_function() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    crate::process::write_wheel_of(wheels.path(), "tinypkg", "1.2.0", "VERSION = '1.2.0'\n");
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("handler.py"),
        "import hearth, tinypkg\ndef handler(e, c):\n    return (hearth.kv.get('motd') or b'-').decode() + ' ' + tinypkg.VERSION\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("requirements.txt"), "tinypkg\n").unwrap();
    let (ok, out, err) = hearth(
        &d,
        &[
            "deploy",
            dir.path().to_str().unwrap(),
            "--name",
            "motd",
            "--runtime",
            "python",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("to install 1 package (0 cached)"), "{out}");
    assert!(
        err.contains("warning: requirements.txt does not pin")
            && err.contains("tinypkg resolved to 1.2.0"),
        "{err}"
    );
    let (ok, out, _) = hearth(&d, &["versions", "motd"]);
    assert!(ok && out.contains("packages: tinypkg==1.2.0"), "{out}");

    let (ok, _, err) = hearth(&d, &["kv", "set", "motd", "motd", "hello there"]);
    assert!(ok, "{err}");
    let (ok, out, err) = hearth(&d, &["invoke", "motd"]);
    assert!(ok, "{err}");
    assert_eq!(out, "hello there 1.2.0");
    let (ok, out, _) = hearth(&d, &["kv", "get", "motd", "motd"]);
    assert!(ok);
    assert_eq!(out, "hello there");
    let (ok, out, _) = hearth(&d, &["kv", "ls", "motd"]);
    assert!(ok);
    assert_eq!(out, "motd\n");
    let (ok, _, _) = hearth(&d, &["kv", "rm", "motd", "motd"]);
    assert!(ok);
    let (ok, _, err) = hearth(&d, &["kv", "get", "motd", "motd"]);
    assert!(!ok && err.contains("404"), "{err}");
}

/// `hearth invoke --logs` prints the invocation's lines right after its
/// answer (no waiting for the log writer), and `hearth logs -f` prints
/// lines as they are stored.
#[tokio::test]
async fn invoke_prints_its_logs_and_logs_follow() {
    require!(Python);
    let d = Daemon::start();
    let code = "def handler(event, context):\n    print('saw', event['body'])\n    return 'ok'\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("handler.py"), code).unwrap();
    let file = dir.path().join("handler.py");
    let (ok, _, err) = hearth(&d, &["deploy", file.to_str().unwrap(), "--name", "talk"]);
    assert!(ok, "{err}");
    for n in 0..3 {
        let marker = format!("first-{n}");
        let (ok, out, err) = hearth(&d, &["invoke", "talk", "-d", &marker, "--logs"]);
        assert!(ok, "{err}");
        assert_eq!(out, "ok");
        assert!(
            err.contains(&format!("saw {marker}")),
            "the invocation's lines, at once: {err:?}"
        );
    }

    let mut follower = Command::new(HEARTH)
        .arg("--data-dir")
        .arg(&d.dir)
        .args(["logs", "talk", "-f", "--limit", "1"])
        .env_remove("HEARTH_URL")
        .env_remove("HEARTH_TOKEN")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("a line")
    };
    assert!(next().contains("saw first-2"), "the newest line first");
    for marker in ["later-a", "later-b"] {
        let (ok, _, err) = hearth(&d, &["invoke", "talk", "-d", marker]);
        assert!(ok, "{err}");
        let line = next();
        assert!(line.contains(&format!("saw {marker}")), "{line}");
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
}
