//! The process tier end to end: Python and Node.js functions in lean
//! containers, their caches, and hostile code.

use hearth_test_support::require;
use std::time::Duration;

use crate::harness::{Daemon, error_of, instance_dir, spin_times_out_while_ok_answers, tar_of};

async fn deploy(d: &Daemon, name: &str, file: &str, code: &[u8], query: &[(&str, &str)]) {
    let runtime = if file.ends_with(".py") {
        "python"
    } else {
        "node"
    };
    let mut q = vec![("file_name", file), ("runtime", runtime)];
    q.extend_from_slice(query);
    d.deploy(name, code.to_vec(), &q).await;
}

/// A deploy that must be refused: its status and message.
async fn deploy_error(d: &Daemon, name: &str, file: &str, code: &[u8]) -> (u16, String) {
    let runtime = if file.ends_with(".py") || file.ends_with(".tar") {
        "python"
    } else {
        "node"
    };
    let r = d
        .deploy_raw(
            name,
            code.to_vec(),
            &[("runtime", runtime), ("file_name", file)],
        )
        .await;
    let (status, _, msg) = error_of(r).await;
    (status, msg)
}

const LAMBDA_PY: &str = r#"
import json, os, hearth
def handler(event, context):
    n = int(hearth.kv.get("n") or 0) + 1
    hearth.kv.set("n", str(n))
    print("call", n)
    return {"statusCode": 201, "headers": {"x-n": str(n)},
            "body": {"n": n, "pid": os.getpid(), "uid": os.getuid(),
                     "got": json.loads(event["body"]), "q": event["queryStringParameters"], "env": os.environ.get("GREETING")}}
"#;

#[tokio::test]
async fn python_handlers_run_sandboxed_with_kv_logs_and_both_shapes() {
    require!(Python);
    let d = Daemon::start();
    deploy(
        &d,
        "lam",
        "handler.py",
        LAMBDA_PY.as_bytes(),
        &[("env", "GREETING=hi")],
    )
    .await;
    for n in 1..=3 {
        let (status, body) = d.call("lam", "?a=b", r#"{"x": [1, 2]}"#).await;
        assert_eq!(status, 201, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["n"], n, "KV persists across invocations: {v}");
        assert_eq!(
            v["got"]["x"][1], 2,
            "a JSON body arrives as text, as API Gateway sends it: {v}"
        );
        assert_eq!(v["q"]["a"], "b");
        assert_eq!(v["env"], "hi");
        assert_eq!(
            v["pid"], 1,
            "the handler is PID 1 of its own PID namespace: {v}"
        );
        assert_eq!(
            v["uid"], 65534,
            "the handler runs as an unprivileged user: {v}"
        );
    }
    let lines = d
        .logs_until("lam", |l| {
            l.iter()
                .filter(|x| x["message"].as_str().unwrap_or("").starts_with("call "))
                .count()
                >= 3
        })
        .await;
    assert!(lines.iter().any(|l| l["message"] == "call 3"), "{lines:?}");

    // OpenWhisk's shape; an uncaught exception reaches the caller and the log.
    let ow = b"def main(args):\n    if args.get('boom'):\n        raise ValueError('no ' + args['boom'])\n    return {'hello': args.get('name')}\n";
    deploy(&d, "ow", "main.py", ow, &[]).await;
    let (status, body) = d.call("ow", "?name=ada", "").await;
    assert_eq!((status, body.as_str()), (200, r#"{"hello": "ada"}"#));
    let r = d
        .post("/fn/admin/ow")
        .header("content-type", "application/json")
        .body(r#"{"boom":"way"}"#)
        .send()
        .await
        .unwrap();
    let (status, kind, msg) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (500, "function_error"));
    assert!(msg.contains("ValueError: no way"), "{msg}");
    let lines = d
        .logs_until("ow", |l| {
            l.iter()
                .any(|x| x["message"].as_str().unwrap_or("").contains("Traceback"))
        })
        .await;
    let tb = lines
        .iter()
        .find_map(|l| l["message"].as_str().filter(|m| m.contains("Traceback")))
        .unwrap_or_default();
    assert!(
        tb.contains("line 3, in main"),
        "the traceback points at the user's line: {tb}"
    );

    // A syntax error is refused at deploy with its position.
    let (status, msg) =
        deploy_error(&d, "bad", "bad.py", b"def handler(e, c):\n  return (\n").await;
    assert_eq!(status, 400);
    assert!(
        msg.contains("bad.py, line 2") && msg.contains("never closed"),
        "{msg}"
    );
}

const HOSTILE_PY: &str = r#"
import os, socket, time
def handler(event, context):
    what = (event["queryStringParameters"] or {}).get("what")
    if what == "spin":
        while True:
            pass
    if what == "mem":
        hog = []
        while True:
            hog.append(bytearray(8 << 20))
    if what == "fork":
        n = 0
        try:
            while n < 10000:
                if os.fork() == 0:
                    time.sleep(20)
                    os._exit(0)
                n += 1
        except OSError as e:
            return f"stopped after {n}"
        return "fork bomb not stopped"
    if what == "shadow":
        for path in ("/etc/shadow", "/proc/1/root/etc/shadow", "/../../etc/shadow"):
            try:
                return "read " + path + ": " + open(path).read()[:20]
            except OSError:
                pass
        return "no host files"
    if what == "net":
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            return "internet socket opened"
        except OSError as e:
            return f"denied: {e}"
    if what == "crash":
        os._exit(3)
    return "fine"
"#;

#[tokio::test]
async fn hostile_python_is_contained_and_others_keep_serving() {
    require!(Python);
    let d = Daemon::start();
    deploy(
        &d,
        "bad",
        "h.py",
        HOSTILE_PY.as_bytes(),
        &[("timeout_ms", "1500"), ("memory_mib", "64")],
    )
    .await;
    deploy(
        &d,
        "ok",
        "ok.py",
        b"def handler(e, c):\n    return 'ok'\n",
        &[],
    )
    .await;

    // A spinning function times out while another keeps answering.
    spin_times_out_while_ok_answers(&d, "/fn/admin/bad?what=spin", Duration::from_secs(1)).await;

    let (status, kind, msg) =
        error_of(d.post("/fn/admin/bad?what=mem").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"), "{msg}");
    assert!(msg.contains("64 MiB"), "{msg}");

    let (status, body) = d.call("bad", "?what=fork", "").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with("stopped after"),
        "the process limit holds: {body}"
    );
    assert_eq!(d.call("ok", "", "").await, (200, "ok".into()));

    assert_eq!(
        d.call("bad", "?what=shadow", "").await,
        (200, "no host files".into())
    );
    let (_, body) = d.call("bad", "?what=net", "").await;
    assert!(body.starts_with("denied"), "{body}");

    let (status, kind, _) =
        error_of(d.post("/fn/admin/bad?what=crash").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (502, "crashed"));
    // The crashed sandbox is replaced.
    assert_eq!(d.call("bad", "?what=x", "").await, (200, "fine".into()));
}

/// A wheel made by hand (a zip with a module and its dist-info), so the
/// test needs no network: the daemon installs from a local directory.
pub(crate) fn write_wheel(dir: &std::path::Path) {
    write_wheel_of(
        dir,
        "tinypkg",
        "1.2.0",
        "import time\nIMPORTED_AT = time.time()\nVERSION = '1.2.0'\n",
    );
}

/// A wheel of package `name` whose `__init__.py` is `init`.
pub(crate) fn write_wheel_of(dir: &std::path::Path, name: &str, version: &str, init: &str) {
    write_wheel_requiring(dir, name, version, init, &[]);
}

/// A wheel of package `name` that depends on `requires` (PEP 508 lines).
pub(crate) fn write_wheel_requiring(
    dir: &std::path::Path,
    name: &str,
    version: &str,
    init: &str,
    requires: &[&str],
) {
    write_wheel_with(dir, name, version, &[("__init__.py", init)], requires);
}

/// A wheel of package `name` holding `modules` (paths in the package and
/// their text) that depends on `requires`.
pub(crate) fn write_wheel_with(
    dir: &std::path::Path,
    name: &str,
    version: &str,
    modules: &[(&str, &str)],
    requires: &[&str],
) {
    use std::io::Write;
    let file =
        std::fs::File::create(dir.join(format!("{name}-{version}-py3-none-any.whl"))).unwrap();
    let mut w = zip::ZipWriter::new(file);
    let o = zip::write::SimpleFileOptions::default();
    let info = format!("{name}-{version}.dist-info");
    let mut files: Vec<(String, String)> = modules
        .iter()
        .map(|(path, text)| (format!("{name}/{path}"), text.to_string()))
        .collect();
    files.extend([
        (
            format!("{info}/METADATA"),
            format!(
                "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{}",
                requires
                    .iter()
                    .map(|r| format!("Requires-Dist: {r}\n"))
                    .collect::<String>()
            ),
        ),
        (
            format!("{info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .into(),
        ),
        (format!("{info}/top_level.txt"), format!("{name}\n")),
        (format!("{info}/RECORD"), String::new()),
    ]);
    for (path, text) in files {
        w.start_file(path, o).unwrap();
        w.write_all(text.as_bytes()).unwrap();
    }
    w.finish().unwrap();
}

#[tokio::test]
async fn pinned_packages_install_once_and_handlers_fork_from_a_zygote_that_imported_them() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel(wheels.path());
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let code = "import tinypkg, sys\ndef handler(e, c):\n    return {'v': tinypkg.VERSION, 'imported_at': tinypkg.IMPORTED_AT, 'paths': [p for p in sys.path if 'tinypkg' in p]}\n";
    let bundle = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "TinyPkg==1.2.0\n"),
    ]);
    d.deploy(
        "withpkg",
        bundle.clone(),
        &[("runtime", "python"), ("file_name", "fn.tar")],
    )
    .await;
    // A second function with the same requirement shares the install and the zygote.
    d.deploy(
        "withpkg2",
        bundle,
        &[("runtime", "python"), ("file_name", "fn.tar")],
    )
    .await;
    let (s1, b1) = d.call("withpkg", "", "").await;
    let (s2, b2) = d.call("withpkg2", "", "").await;
    assert_eq!((s1, s2), (200, 200), "{b1} {b2}");
    let v1: serde_json::Value = serde_json::from_str(&b1).unwrap();
    let v2: serde_json::Value = serde_json::from_str(&b2).unwrap();
    assert_eq!(v1["v"], "1.2.0");
    assert_eq!(
        v1["imported_at"], v2["imported_at"],
        "both handlers inherited one zygote's import (SOCK's import cache)"
    );
    // A requirement pip would read as a file is refused at deploy, with the line.
    let path = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "# deps\n-r /etc/passwd\n"),
    ]);
    let (status, msg) = deploy_error(&d, "path", "fn.tar", &path).await;
    assert_eq!(status, 400);
    assert!(
        msg.contains("line 2") && msg.contains("only package names"),
        "{msg}"
    );
    // A package that does not exist fails the deploy, not the first request.
    let missing = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "nosuchpkg==9.9\n"),
    ]);
    let (status, msg) = deploy_error(&d, "missing", "fn.tar", &missing).await;
    assert_eq!(status, 400);
    assert!(msg.contains("nosuchpkg==9.9"), "{msg}");
}

/// SOCK's import cache imports what handlers use: a zygote that imported
/// `tinypkg` learns from its first handler that loading the function also
/// imports `tinypkg.heavy`, and is replaced by one that imports it too, so
/// the next version's first handler starts with it imported.
#[tokio::test]
async fn zygotes_learn_the_submodules_handlers_import() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel_with(
        wheels.path(),
        "tinypkg",
        "1.2.0",
        &[
            ("__init__.py", "VERSION = '1.2.0'\n"),
            ("heavy.py", "import time\nIMPORTED_AT = time.time()\n"),
        ],
        &[],
    );
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let code =
        "from tinypkg import heavy\ndef handler(e, c):\n    return {'at': heavy.IMPORTED_AT}\n";
    let bundle = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    d.deploy("sub", bundle.clone(), &q).await;
    let (status, body) = d.call("sub", "", "{}").await;
    assert_eq!(status, 200, "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while crate::harness::zygote_modules_learned(&d).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no zygote learned tinypkg.heavy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A redeploy: its first handler forks from the zygote that learned.
    let redeployed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    d.deploy("sub", bundle, &q).await;
    let (status, body) = d.call("sub", "", "{}").await;
    assert_eq!(status, 200, "{body}");
    let at: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        at["at"].as_f64().unwrap() < redeployed_at,
        "tinypkg.heavy was imported by the new version's handler, not before it by the zygote: {body}"
    );
}

/// Native libraries read their thread settings once, when they load —
/// in the zygote that imports the package. A function deployed with
/// `--env OMP_NUM_THREADS=1` gets a zygote that imported with it (shared
/// with others of that value), not the one with the default; a variable
/// named like a package, which it may read at import, is warned about.
#[tokio::test]
async fn env_that_native_libraries_read_at_load_reaches_the_zygote() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel_of(
        wheels.path(),
        "tinypkg",
        "1.2.0",
        "import os, time\nOMP = os.environ.get('OMP_NUM_THREADS')\nAT = time.time()\n",
    );
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let code =
        "import tinypkg\ndef handler(e, c):\n    return {'omp': tinypkg.OMP, 'at': tinypkg.AT}\n";
    let bundle = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    let mut seen = Vec::new();
    for (name, env) in [
        ("plain", None),
        ("one", Some("OMP_NUM_THREADS=1")),
        ("also-one", Some("OMP_NUM_THREADS=1")),
    ] {
        let mut q = vec![("runtime", "python"), ("file_name", "fn.tar")];
        q.extend(env.map(|e| ("env", e)));
        d.deploy(name, bundle.clone(), &q).await;
        let (status, body) = d.call(name, "", "{}").await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        seen.push((v["omp"].clone(), v["at"].as_f64().unwrap()));
    }
    assert_eq!(
        seen[0].0,
        serde_json::Value::Null,
        "the default zygote imported without it"
    );
    assert_eq!(
        (&seen[1].0, &seen[2].0),
        (&"1".into(), &"1".into()),
        "imported with OMP_NUM_THREADS=1"
    );
    assert_eq!(
        seen[1].1, seen[2].1,
        "functions with the same value share a zygote"
    );
    assert_ne!(seen[0].1, seen[1].1);
    let v = d
        .deploy(
            "named",
            bundle,
            &[
                ("runtime", "python"),
                ("file_name", "fn.tar"),
                ("env", "TINYPKG_MODE=fast"),
            ],
        )
        .await;
    assert!(
        v["warnings"].to_string().contains("--env TINYPKG_MODE"),
        "{v}"
    );
}

#[tokio::test]
async fn node_functions_in_both_shapes_run_from_the_generic_pool() {
    let d = Daemon::start();
    let workers = br#"export default {
  async fetch(request, env) {
    const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
    await hearth.kv.set("n", String(n));
    console.log("node call", n);
    return Response.json({ n, body: await request.text(), pid: process.pid, uid: process.getuid() });
  },
};"#;
    deploy(&d, "w", "index.mjs", workers, &[]).await;
    let lambda = b"exports.handler = async (event) => ({ statusCode: 202, body: { got: JSON.parse(event.body), q: event.queryStringParameters } });\n";
    deploy(&d, "l", "index.cjs", lambda, &[]).await;
    for n in 1..=2 {
        let (status, body) = d.call("w", "", "hi").await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (v["n"].as_i64(), v["pid"].as_i64(), v["uid"].as_i64()),
            (Some(n), Some(1), Some(65534)),
            "{v}"
        );
    }
    // runtime=js: the isolate tier answers the same way (or falls back).
    d.deploy(
        "js",
        workers.to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let (status, body) = d.call("js", "", "hey").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""body":"hey""#), "{body}");
    let (status, body) = d.call("l", "?a=b", r#"{"x":1}"#).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body, r#"{"got":{"x":1},"q":{"a":"b"}}"#);
    let lines = d
        .logs_until("w", |l| l.iter().any(|x| x["message"] == "node call 2"))
        .await;
    assert!(
        lines.iter().any(|x| x["message"] == "node call 2"),
        "{lines:?}"
    );
    // A syntax error is refused at deploy, at its line of the user's file.
    let source = b"export default {\n  fetch() { return 1 +; }\n};\n";
    let (status, msg) = deploy_error(&d, "bad", "index.mjs", source).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("syntax error: index.mjs:2"), "{msg}");
}

/// The process tier's part of `GET /v1/status`.
async fn proc_status(d: &Daemon) -> serde_json::Value {
    d.get_json("/v1/status").await["tiers"]["process"]["details"].clone()
}

/// Waits until `d` holds `want` generic Python processes.
async fn python_pool_holds(d: &Daemon, want: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = proc_status(d).await;
        if s["generic_python_processes"] == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Python pool never held {want}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn python_from_pool(d: &Daemon) -> u64 {
    proc_status(d).await["handlers_from_pool"]["python"]
        .as_u64()
        .unwrap()
}

const POOLED_PY: &str = r#"
import os
def handler(event, context):
    if (event["queryStringParameters"] or {}).get("what") == "mem":
        hog = []
        while True:
            hog.append(bytearray(1 << 20))
    with open("data.txt") as f:
        data = f.read().strip()
    # The working directory takes scratch files; the code stays read-only.
    with open("scratch.txt", "w") as f:
        f.write("scratch")
    try:
        open("data.txt", "a").close()
        code_writable = True
    except OSError:
        code_writable = False
    return {"pid": os.getpid(), "uid": os.getuid(), "env": os.environ.get("GREETING"),
            "data": data, "cwd": os.getcwd(), "scratch": open("scratch.txt").read(),
            "code_writable": code_writable}
"#;

#[tokio::test]
async fn new_python_functions_start_from_the_generic_pool_with_their_own_code_and_limits() {
    require!(Python);
    let d = Daemon::start();
    // The pool is kept once a Python function is prepared here.
    deploy(
        &d,
        "first",
        "h.py",
        b"def handler(e, c):\n    return 'first'\n",
        &[],
    )
    .await;
    assert_eq!(d.call("first", "", "").await, (200, "first".into()));
    python_pool_holds(&d, 2).await;

    // A new function takes a pre-forked process: its code (bound into the
    // running sandbox), its env, its memory limit, still PID 1 and nobody.
    let before = python_from_pool(&d).await;
    let bundle = tar_of(&[("handler.py", POOLED_PY), ("data.txt", "from the bundle\n")]);
    d.deploy(
        "pooled",
        bundle,
        &[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("env", "GREETING=hi"),
            ("memory_mib", "48"),
        ],
    )
    .await;
    let r = d.post("/fn/admin/pooled").send().await.unwrap();
    assert_eq!(r.headers()["hearth-start"], "cold");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (&v["pid"], &v["uid"], &v["env"], &v["data"], &v["cwd"]),
        (
            &1.into(),
            &65534.into(),
            &"hi".into(),
            &"from the bundle".into(),
            &"/tmp/task".into()
        ),
        "{v}"
    );
    assert_eq!(
        (&v["scratch"], &v["code_writable"]),
        (&"scratch".into(), &false.into()),
        "{v}"
    );
    assert_eq!(python_from_pool(&d).await, before + 1);
    // The pool refills in the background.
    python_pool_holds(&d, 2).await;
    // The limit given with the function holds in the pooled process.
    let (status, kind, msg) =
        error_of(d.post("/fn/admin/pooled?what=mem").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"), "{msg}");
    assert!(msg.contains("48 MiB"), "{msg}");
    python_pool_holds(&d, 2).await;
    let r = d.post("/fn/admin/pooled").send().await.unwrap();
    assert_eq!(r.status(), 200, "a new handler replaces the killed one");
    assert_eq!(python_from_pool(&d).await, before + 2);

    // One that may open internet sockets needs its filter chosen at fork:
    // it is forked, not pooled.
    deploy(
        &d,
        "net",
        "h.py",
        b"def handler(e, c):\n    return 'net'\n",
        &[("allow_host", "example.com")],
    )
    .await;
    assert_eq!(d.call("net", "", "").await, (200, "net".into()));
    assert_eq!(python_from_pool(&d).await, before + 2);

    // With the pools off, nothing is pre-started and handlers fork.
    let off = Daemon::start_with_env(&[], &[("HEARTH_PROC_POOL", "0")]);
    deploy(
        &off,
        "f",
        "h.py",
        b"def handler(e, c):\n    return 'f'\n",
        &[],
    )
    .await;
    assert_eq!(off.call("f", "", "").await, (200, "f".into()));
    // A window for a pre-start that must not come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = proc_status(&off).await;
    assert_eq!(
        (
            &s["generic_python_processes"],
            &s["handlers_from_pool"]["python"]
        ),
        (&0.into(), &0.into()),
        "{s}"
    );
}

#[tokio::test]
async fn stopping_the_daemon_removes_its_mounts_and_cgroups() {
    require!(Python);
    let dir = tempfile::tempdir().unwrap();
    {
        let d = Daemon::start_in(dir.path(), &[]);
        deploy(
            &d,
            "p",
            "h.py",
            b"def handler(e, c):\n    return 'x'\n",
            &[],
        )
        .await;
        assert_eq!(d.call("p", "", "").await.0, 200);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let ours = dir.path().canonicalize().unwrap();
        assert!(
            mounts.contains(ours.to_str().unwrap()),
            "a paused handler holds mounts"
        );
        assert!(
            instance_dir(&ours, "memory").exists(),
            "the node's cgroups are where the check below looks"
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours = dir.path().canonicalize().unwrap();
    assert!(
        !mounts.contains(ours.to_str().unwrap()),
        "mounts left behind"
    );
    for c in ["memory", "pids", "cpu", "freezer"] {
        let left = instance_dir(&ours, c);
        assert!(!left.exists(), "{} left behind", left.display());
    }
}

/// Regression: with the cgroup filesystem read-only (systemd's
/// `ProtectControlGroups=yes`, a container) every Python call failed ("the
/// sandbox did not connect"): the address-space cap that stands in for a
/// cgroup read /proc after the chroot, where there is none.
#[tokio::test]
async fn with_a_read_only_cgroupfs_python_and_node_run_and_status_says_what_is_missing() {
    require!(Python);
    require!(Node);
    let d = Daemon::start_with_read_only_cgroups();
    let status: serde_json::Value = d.get_json("/v1/status").await;
    assert!(
        status["degraded"].to_string().contains("no cgroups"),
        "{status}"
    );
    assert_eq!(
        status["tiers"]["process"]["details"]["isolation"], "full",
        "still root: chroot, namespaces, its own user: {status}"
    );
    deploy(
        &d,
        "bad",
        "h.py",
        HOSTILE_PY.as_bytes(),
        &[("timeout_ms", "3000"), ("memory_mib", "64")],
    )
    .await;
    assert_eq!(d.call("bad", "?what=x", "").await, (200, "fine".into()));
    let (status, _, msg) = error_of(d.post("/fn/admin/bad?what=mem").send().await.unwrap()).await;
    assert_eq!(
        status, 500,
        "the address-space cap stops a memory bomb: {msg}"
    );
    assert_eq!(
        d.call("bad", "?what=shadow", "").await,
        (200, "no host files".into())
    );
    deploy(
        &d,
        "js",
        "index.mjs",
        b"export default { async fetch() { return new Response('node'); } };",
        &[],
    )
    .await;
    assert_eq!(d.call("js", "", "").await, (200, "node".into()));
}

/// A process the handler forks shares its connection to the node: its
/// clocks are the real ones (a routed clock's question and answer would
/// interleave with the handler's, which failed the call with a broken
/// frame or a timeout), and a host call there says where to make it.
#[tokio::test]
async fn a_handlers_forked_children_read_clocks_and_are_told_host_calls_are_the_handlers() {
    require!(Python);
    let d = Daemon::start();
    let code = r#"
import os, time, hearth
def handler(event, context):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for _ in range(200):
            time.perf_counter(); time.time(); time.monotonic_ns()
        try:
            hearth.kv.get("k")
            said = "kv answered in a child"
        except hearth.HostError as e:
            said = str(e)
        os.write(w, said.encode())
        os._exit(0)
    os.close(w)
    # The handler's own clock, routed through the node while the child
    # reads its clocks.
    for _ in range(200):
        time.perf_counter()
    said = os.read(r, 4096).decode()
    os.waitpid(pid, 0)
    hearth.kv.set("k", "v")
    return {"child": said, "t": time.perf_counter() > 0, "kv": hearth.kv.get("k").decode()}
"#;
    deploy(&d, "forks", "f.py", code.as_bytes(), &[]).await;
    for _ in 0..3 {
        let (status, body) = d.call("forks", "", "").await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            v["child"]
                .as_str()
                .unwrap()
                .contains("only in the handler's own process"),
            "{v}"
        );
        assert_eq!((&v["t"], &v["kv"]), (&true.into(), &"v".into()), "{v}");
    }
}

#[tokio::test]
async fn without_root_sandboxes_get_a_user_namespace_and_status_says_what_is_missing() {
    require!(Python);
    let d = Daemon::start_as_user(65534);
    let status: serde_json::Value = d.get_json("/v1/status").await;
    let degraded = status["degraded"].to_string();
    assert!(degraded.contains("not running as root"), "{status}");
    assert!(degraded.contains("no cgroups"), "{status}");
    assert_eq!(
        status["tiers"]["process"]["details"]["isolation"], "user_namespace",
        "{status}"
    );

    let who = r#"
import os
def handler(e, c):
    return {"pid": os.getpid(), "uid": os.getuid(), "host": os.uname().nodename}
"#;
    deploy(&d, "who", "who.py", who.as_bytes(), &[]).await;
    let (code, body) = d.call("who", "", "").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["pid"], 1, "PID 1 of a namespace of its own: {v}");
    assert!(v["host"].as_str().unwrap().starts_with("sandbox-"), "{v}");

    deploy(
        &d,
        "bad",
        "h.py",
        HOSTILE_PY.as_bytes(),
        &[("timeout_ms", "1500"), ("memory_mib", "64")],
    )
    .await;
    let (status, kind, _) = error_of(d.post("/fn/admin/bad?what=spin").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (504, "timeout"));
    let (status, _, msg) = error_of(d.post("/fn/admin/bad?what=mem").send().await.unwrap()).await;
    assert_eq!(
        status, 500,
        "the address-space cap stops a memory bomb: {msg}"
    );
    assert_eq!(
        d.call("bad", "?what=shadow", "").await,
        (200, "no host files".into())
    );
    let (_, body) = d.call("bad", "?what=net", "").await;
    assert!(body.starts_with("denied"), "{body}");
    assert_eq!(d.call("who", "", "").await.0, 200);
}
