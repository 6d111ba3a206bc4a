//! A full disk: something (a tenant's tapes and logs, another process on
//! the machine) fills the data directory's file system. Before, nothing
//! showed it, and `hearth rm` itself failed ("database or disk is full"),
//! so nobody could free space through the API.

use hearth_test_support::require;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Daemon, error_of};

/// A small tmpfs of its own, unmounted when dropped (pass or fail).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: u32) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}");
        SmallDisk { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; MNT_DETACH has no other inputs.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Writes `path` until the file system has no byte left.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![7u8; 1 << 16];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

async fn disk_of(d: &Daemon) -> serde_json::Value {
    d.get_json("/v1/status").await["disk"].clone()
}

/// Waits (the watcher reads the disk every second) until `full` is `want`.
async fn until_full_is(d: &Daemon, want: bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let disk = disk_of(d).await;
        if disk["full"] == want {
            return disk;
        }
        assert!(Instant::now() < deadline, "the disk's full stayed {disk}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_full_disk_is_shown_refuses_growth_and_still_lets_the_operator_delete() {
    let small = SmallDisk::mount(64);
    let data = small.path().join("data");
    let d = Daemon::start_in(
        &data,
        &[
            "--examples",
            "false",
            "--min-free-disk-mib",
            "8",
            "--disk-reserve-mib",
            "4",
        ],
    );
    let hello = crate::harness::example("hello.wat");
    d.deploy("hello", hello.clone(), &[]).await;
    d.deploy("doomed", hello.clone(), &[]).await;
    // A function that writes to its KV, and says what a refusal said.
    let writer = b"export default { async fetch() { try { await hearth.kv.set('k', 'v'); \
        return new Response('wrote'); } catch (e) { return new Response(String(e), \
        { status: 507 }); } } };\n";
    d.deploy(
        "writer",
        writer.to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    assert_eq!(d.call("writer", "", "").await, (200, "wrote".into()));
    let disk = disk_of(&d).await;
    assert_eq!(disk["full"], false, "{disk}");
    assert_eq!(disk["reserve_held"], true, "{disk}");
    assert_eq!(disk["min_free_mib"], 8, "{disk}");
    assert!(data.join("disk-reserve").exists());
    let ready = d.get("/readyz").send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // Something else takes every byte.
    let filler = small.path().join("filler");
    fill(&filler);
    let disk = until_full_is(&d, true).await;
    assert!(disk["free_mib"].as_u64().unwrap() < 8, "{disk}");
    let status = d.get_json("/v1/status").await;
    let faults = status["faults"].to_string();
    assert!(faults.contains("disk is full"), "{status}");
    let metrics = d.get_text("/metrics").await;
    assert!(metrics.contains("hearth_disk_full 1"), "{metrics}");
    let ready = d.get("/readyz").send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let why = ready.text().await.unwrap();
    assert!(why.contains("disk is full"), "{why}");

    // What would grow the data directory is refused, with what to do.
    let resp = d.deploy_raw("more", hello.clone(), &[]).await;
    let (status, kind, msg) = error_of(resp).await;
    assert_eq!((status, kind.as_str()), (507, "disk_full"), "{msg}");
    assert!(msg.contains("--min-free-disk-mib"), "{msg}");
    let resp = d
        .http
        .put(format!("{}/v1/functions/hello/kv/k", d.url))
        .bearer_auth(&d.token)
        .body("v")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(resp).await.0, 507);
    let resp = d
        .post("/v1/tenants")
        .json(&serde_json::json!({"name": "newcomer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(resp).await.0, 507);
    // Invocations still run, but their KV writes are refused too.
    assert_eq!(d.call("hello", "", "").await.0, 200);
    let (status, why) = d.call("writer", "", "").await;
    assert_eq!(status, 507, "{why}");
    assert!(
        why.contains("disk is full") && why.contains("--min-free-disk-mib"),
        "{why}"
    );

    // And the operator can delete: the reserve gives the delete its room.
    let resp = d.delete("/v1/functions/doomed").send().await.unwrap();
    assert_eq!(resp.status(), 204, "{}", resp.text().await.unwrap());
    let gone = d.get("/v1/functions/doomed").send().await.unwrap();
    assert_eq!(gone.status(), 404);
    assert!(!data.join("disk-reserve").exists());
    // Still full: the reserve has to come back before growth does.
    assert_eq!(disk_of(&d).await["full"], true);

    // Space freed: the reserve is allocated again and growth admitted.
    std::fs::remove_file(&filler).unwrap();
    let disk = until_full_is(&d, false).await;
    assert_eq!(disk["reserve_held"], true, "{disk}");
    assert!(data.join("disk-reserve").exists());
    d.deploy("more", hello, &[]).await;
    assert_eq!(d.call("writer", "", "").await, (200, "wrote".into()));
    assert_eq!(d.get("/readyz").send().await.unwrap().status(), 200);
    drop(d);
}

/// Installed packages of `name` under the data directory's install cache.
fn installed(data: &Path, name: &str) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("proc").join("packages").join("python"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
        })
        .collect()
}

async fn until_gone(data: &Path, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !installed(data, name).is_empty() {
        assert!(Instant::now() < deadline, "{name} is still installed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Installed packages used to count against no quota and stay after `rm`:
/// a tenant could fill the disk with packages a few bytes of bundle name.
/// They count in the tenant's code quota (once, however many of its
/// versions use them) and go with the last version on the node that uses
/// them, whoever's it was.
#[tokio::test]
async fn installed_packages_count_in_the_code_quota_and_go_with_their_last_function() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    // Two packages of 2 MiB each installed (1 MiB of source, and as much
    // again compiled).
    for name in ["bulky", "hefty"] {
        let data = format!("DATA = '{}'\n", "x".repeat(1 << 20));
        crate::process::write_wheel_of(wheels.path(), name, "1.0", &data);
    }
    let d = Daemon::start_with(&[
        "--offline-packages",
        wheels.path().to_str().unwrap(),
        "--max-code-mib-per-tenant",
        "3",
    ]);
    let (acme, beta) = (d.create_tenant("acme").await, d.create_tenant("beta").await);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    let bundle = |pkg: &str| {
        let code = format!("import {pkg}\ndef handler(e, c):\n    return len({pkg}.DATA)\n");
        crate::harness::tar_of(&[
            ("handler.py", &code),
            ("requirements.txt", &format!("{pkg}==1.0\n")),
        ])
    };
    for (token, name, pkg) in [(&acme, "f", "bulky"), (&beta, "g", "bulky")] {
        let r = d.deploy_as(token, name, &q, bundle(pkg)).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let status = d.get_json_as(&acme, "/v1/status").await;
    let used = status["tenant"]["code_bytes"].as_u64().unwrap();
    assert!(used > 2 << 20, "the package counts: {status}");
    assert!(used < 3 << 20, "{status}");
    // A second version using the same package counts it once.
    let r = d.deploy_as(&acme, "f", &q, bundle("bulky")).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // Another package of 2 MiB does not fit in acme's 3.
    let r = d.deploy_as(&acme, "h", &q, bundle("hefty")).await;
    let (status, kind, message) = error_of(r).await;
    assert_eq!(
        (status, kind.as_str()),
        (507, "code_quota_exceeded"),
        "{message}"
    );
    assert!(message.contains("installed packages"), "{message}");

    // acme removes f: bulky stays for beta's g; hefty, which only the
    // refused deploy installed, goes.
    let remove = |token: &str, name: &str| {
        let url = format!("{}/v1/functions/{name}", d.url);
        let request = d.http.delete(url).bearer_auth(token);
        async move { request.send().await.unwrap() }
    };
    assert_eq!(remove(&acme, "f").await.status(), 204);
    until_gone(&d.dir, "hefty").await;
    assert_eq!(installed(&d.dir, "bulky").len(), 1);
    let r = d.invoke_as(&beta, "beta", "g").send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), (1 << 20).to_string());
    // beta removes g: nothing uses bulky now.
    assert_eq!(remove(&beta, "g").await.status(), 204);
    until_gone(&d.dir, "bulky").await;
    // With its room back, acme deploys hefty.
    let r = d.deploy_as(&acme, "h", &q, bundle("hefty")).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}
