//! What a tenant's data is exposed to on the node's disk.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::harness::Daemon;

/// The user another local account runs as.
const OUTSIDER: u32 = 65534;

/// Whether `OUTSIDER` can read `path` (by running `cat` as that user).
fn outsider_reads(path: &Path) -> bool {
    Command::new("cat")
        .arg(path)
        .uid(OUTSIDER)
        .gid(OUTSIDER)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Regular files below `dir`, but not below its `proc` (sandboxes' roots).
fn files_below(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() && e.file_name() != "proc" {
            files_below(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

#[tokio::test]
async fn another_local_user_reads_no_tenant_data_and_loose_modes_are_fixed() {
    // A parent everyone may traverse, as /var/lib is.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("data");
    {
        let d = Daemon::start_in(&dir, &[]);
        // KV (in the WAL), code (an artifact) and a tape.
        assert_eq!(d.invoke("counter", b"").await.status(), 200);
        crate::harness::until(
            "the tape is written",
            std::time::Duration::from_secs(10),
            async || {
                let mut files = Vec::new();
                let recordings = dir.join("recordings");
                if recordings.is_dir() {
                    files_below(&recordings, &mut files);
                }
                !files.is_empty()
            },
        )
        .await;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the data directory");
        let mut files = Vec::new();
        files_below(&dir, &mut files);
        assert!(
            files.iter().any(|f| f.ends_with("hearth.db-wal")),
            "{files:?}"
        );
        assert!(files.iter().any(|f| f.starts_with(dir.join("artifacts"))));
        assert!(files.iter().any(|f| f.starts_with(dir.join("recordings"))));
        for f in &files {
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", f.display());
        }
        // Even with the directory opened up, the files stay closed.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in &files {
            assert!(!outsider_reads(f), "another user read {}", f.display());
        }
    }
    // An older or copied data directory with loose modes is fixed at start.
    let wal_or_db = dir.join("hearth.db");
    std::fs::set_permissions(&wal_or_db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let d = Daemon::start_in(&dir, &[]);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(&wal_or_db).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!outsider_reads(&wal_or_db));
    drop(d);
}

/// How the tests here deploy their JavaScript.
const JS: &[(&str, &str)] = &[("runtime", "js"), ("file_name", "index.mjs")];

/// Keeps its request body under one key; says whether KV took it.
const STORER: &str = "export default { async fetch(req) { \
    const body = await req.text(); \
    try { await hearth.kv.set('k', body); return new Response('stored'); } \
    catch (e) { return new Response('refused: ' + e.message); } } };";

#[tokio::test]
async fn one_tenant_cannot_fill_the_kv_store() {
    let d = Daemon::start_with(&["--max-kv-mib-per-tenant", "1"]);
    let mut tokens = Vec::new();
    for tenant in ["acme", "beta"] {
        let token = d.create_tenant(tenant).await;
        for name in ["one", "two"] {
            let r = d.deploy_as(&token, name, JS, STORER).await;
            assert_eq!(r.status(), 201);
        }
        tokens.push((tenant, token));
    }
    let store = |tenant: &str, token: &str, name: &str| {
        d.invoke_as(token, tenant, name)
            .body("x".repeat(600 << 10))
            .send()
    };
    let (acme, beta) = (&tokens[0].1, &tokens[1].1);
    let said = |r: reqwest::Response| async move { r.text().await.unwrap() };
    assert_eq!(
        said(store("acme", acme, "one").await.unwrap()).await,
        "stored"
    );
    // The quota is the tenant's, over all its functions.
    let refused = said(store("acme", acme, "two").await.unwrap()).await;
    assert!(
        refused.starts_with("refused") && refused.contains("quota"),
        "{refused}"
    );
    // The other tenant has its own.
    assert_eq!(
        said(store("beta", beta, "one").await.unwrap()).await,
        "stored"
    );
    let status = d.get_json_as(acme, "/v1/status").await;
    let used = status["tenant"]["kv_bytes"].as_u64().unwrap();
    assert_eq!(used, (600 << 10) + 1, "{status}");
    assert_eq!(status["tenant"]["kv_max_bytes"], 1 << 20);
}

const ECHO_LENGTH: &str = "export default { async fetch(req) { return new Response(String((await req.text()).length)); } };";

/// Text that does not compress (tapes are compressed on disk).
fn noise(bytes: usize, seed: &mut u64) -> String {
    (0..bytes / 16)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            format!("{:016x}", *seed)
        })
        .collect()
}

#[tokio::test]
async fn one_tenants_tapes_cannot_push_out_anothers() {
    let args = [
        "--record-max-mib",
        "1",
        "--record-sweep-s",
        "1",
        "--record-durability",
        "sync",
    ];
    let first = Daemon::start_with(&args);
    let mut tokens = std::collections::HashMap::new();
    for tenant in ["acme", "beta"] {
        let token = first.create_tenant(tenant).await;
        let r = first.deploy_as(&token, "echo", JS, ECHO_LENGTH).await;
        assert_eq!(r.status(), 201);
        tokens.insert(tenant, token);
    }
    let call = |d: &Daemon, tenant: &str, body: String| {
        d.invoke_as(&tokens[tenant], tenant, "echo")
            .body(body)
            .send()
    };
    for i in 0..3 {
        let r = call(&first, "acme", format!("acme {i}")).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // A restart closes the segment acme's tapes are in: they are now the
    // oldest, what a node-wide cap would delete first.
    let mut first = first;
    first.kill9();
    let d = Daemon::start_in(&first.dir, &args);
    let mut seed = 0x2545_f491_4f6c_dd1d;
    for _ in 0..16 {
        let r = call(&d, "beta", noise(256 << 10, &mut seed)).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let listed = |tenant: &'static str| {
        let (d, token) = (&d, &tokens[tenant]);
        async move {
            let v = d.get_json_as(token, "/v1/functions/echo/recordings").await;
            v["recordings"].as_array().unwrap().len()
        }
    };
    let beta_status =
        || async { d.get_json_as(&tokens["beta"], "/v1/status").await["tenant"].clone() };
    // Until a sweep has finished with beta: its tapes taken and what it
    // holds (counted again after each segment the sweep takes) within 1 MiB.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while listed("beta").await == 16
        || beta_status().await["recording_bytes"].as_u64().unwrap() > 1 << 20
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no sweep brought beta within its room in 15 s: {}",
            beta_status().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(listed("acme").await, 3, "acme lost tapes to beta's flood");
    let tenant = beta_status().await;
    assert_eq!(tenant["recording_max_bytes"], 1 << 20, "{tenant}");
}

#[tokio::test]
async fn one_tenant_cannot_fill_the_disk_with_code() {
    let d = Daemon::start_with(&["--max-code-mib-per-tenant", "1"]);
    let mut seed = 0x1234_5678_9abc_def1;
    // About 600 KiB of code that does not compress.
    let mut big = || {
        format!(
            "const pad = \"{}\";\nexport default {{ fetch() {{ return new Response(String(pad.length)); }} }};\n",
            noise(600 << 10, &mut seed)
        )
    };
    let deploy = |token: String, name: &'static str, code: String| {
        let d = &d;
        async move { d.deploy_as(&token, name, JS, code).await }
    };
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    let first = big();
    assert_eq!(
        deploy(acme.clone(), "one", first.clone()).await.status(),
        201
    );
    let r = deploy(acme.clone(), "two", big()).await;
    let (status, kind, msg) = crate::harness::error_of(r).await;
    assert_eq!(
        (status, kind.as_str()),
        (507, "code_quota_exceeded"),
        "{msg}"
    );
    assert!(
        msg.contains("hearth rm") && msg.contains("1048576"),
        "{msg}"
    );
    // The same code again takes no more room.
    assert_eq!(deploy(acme.clone(), "three", first).await.status(), 201);
    // Another tenant has its own quota.
    assert_eq!(deploy(beta, "one", big()).await.status(), 201);
    let status = d.get_json_as(&acme, "/v1/status").await;
    let used = status["tenant"]["code_bytes"].as_u64().unwrap();
    assert!((600 << 10..1 << 20).contains(&used), "{status}");
    assert_eq!(status["tenant"]["code_max_bytes"], 1 << 20);
}

/// A tenant scripting releases cannot grow the registry without bound:
/// a function keeps at most 32 aliases (the 33rd is a 409 naming the
/// fix), and each alias's history its newest 1000 moves.
#[tokio::test]
async fn one_tenant_cannot_grow_aliases_or_their_history_without_bound() {
    let d = Daemon::start();
    d.deploy("f", crate::harness::example("hello.wat"), &[])
        .await;
    d.deploy("f", crate::harness::example("echo.wat"), &[])
        .await;
    let promote = |alias: String, version: u32| {
        let d = &d;
        async move {
            d.post(&format!("/v1/functions/f/aliases/{alias}"))
                .json(&serde_json::json!({ "version": version }))
                .send()
                .await
                .unwrap()
        }
    };
    for i in 1..32 {
        assert_eq!(promote(format!("a{i}"), 1).await.status(), 200, "a{i}");
    }
    let (status, kind, msg) = crate::harness::error_of(promote("more".into(), 1).await).await;
    assert_eq!((status, kind.as_str()), (409, "conflict"), "{msg}");
    assert!(msg.contains("32") && msg.contains("remove one"), "{msg}");
    // Removing one makes room; `live` cannot be removed.
    let r = d.delete("/v1/functions/f/aliases/a1").send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(promote("more".into(), 1).await.status(), 200);
    let r = d
        .delete("/v1/functions/f/aliases/live")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // 1,010 moves of one alias: its history holds the newest 1,000.
    for i in 0..1010 {
        assert_eq!(promote("a2".into(), 1 + i % 2).await.status(), 200);
    }
    let history = d
        .get_json("/v1/functions/f/aliases/a2/history?limit=2000")
        .await;
    let moves = history["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 1000);
    let oldest = moves.last().unwrap()["id"].as_i64().unwrap();
    let newest = moves[0]["id"].as_i64().unwrap();
    assert_eq!(newest - oldest, 999, "the newest 1,000, none missing");
}

/// A tenant's functions are bounded in number (`--max-functions-per-tenant`):
/// each function carries what grows without code (aliases and their
/// history, stats), so the bound on functions bounds their sum. The
/// deploy past it is refused before it compiles, naming the fix; a new
/// version of a function the tenant has still deploys, a removal makes
/// room, and another tenant is not counted against it.
#[tokio::test]
async fn one_tenant_cannot_make_functions_without_bound() {
    let d = Daemon::start_with(&["--max-functions-per-tenant", "3"]);
    let acme = d.create_tenant("acme").await;
    let deploy = async |token: &str, name: &str| {
        d.deploy_as(
            token,
            name,
            &[("runtime", "wasm")],
            crate::harness::example("hello.wat"),
        )
        .await
    };
    for name in ["a", "b", "c"] {
        assert_eq!(deploy(&acme, name).await.status(), 201, "{name}");
    }
    let (status, _, message) = crate::harness::error_of(deploy(&acme, "d").await).await;
    assert_eq!(status, 409, "{message}");
    assert!(
        message.contains("3 functions") && message.contains("hearth rm"),
        "{message}"
    );
    assert_eq!(deploy(&acme, "c").await.status(), 201, "a new version");
    let list = d.get_json_as(&acme, "/v1/functions").await;
    assert_eq!(list["functions"].as_array().unwrap().len(), 3);
    let beta = d.create_tenant("beta").await;
    assert_eq!(deploy(&beta, "d").await.status(), 201, "another tenant");
    let r = d
        .http
        .delete(format!("{}/v1/functions/a", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(deploy(&acme, "d").await.status(), 201, "room made");
}
