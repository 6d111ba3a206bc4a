//! The C examples in examples/wasm, built with Debian's clang for
//! wasm32-wasi (the README's test command installs it), deployed and called.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::Daemon;

fn build(name: &str, out_dir: &Path) -> Vec<u8> {
    build_with(name, out_dir, &[])
}

/// Builds examples/wasm/NAME.c with extra clang arguments (e.g. -D...).
pub fn build_with(name: &str, out_dir: &Path, extra: &[&str]) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/wasm")
        .join(format!("{name}.c"));
    let tag: String = extra
        .concat()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let out: PathBuf = out_dir.join(format!("{name}-{tag}.wasm"));
    let status = Command::new("clang")
        .args(["--target=wasm32-wasi", "-O2", "-Wall", "-Werror"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("clang is needed to build the C examples: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32");
    assert!(status.success(), "clang failed on {}", src.display());
    std::fs::read(out).unwrap()
}

#[tokio::test]
async fn c_examples_build_deploy_and_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start();

    d.deploy("c-hello", build("hello", tmp.path()), &[]).await;
    let resp = d.invoke("c-hello", b"").await;
    assert_eq!(resp.headers()["content-type"], "text/plain");
    assert_eq!(resp.text().await.unwrap(), "hello from C\n");

    d.deploy("c-echo", build("echo_headers", tmp.path()), &[])
        .await;
    let resp = d
        .http
        .put(format!("{}/fn/admin/c-echo/users/7?full=1", d.url))
        .bearer_auth(&d.token)
        .header("x-demo", "yes")
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.text().await.unwrap(),
        "method=PUT\npath=/users/7\nquery=full=1\nx-demo=yes\nbody=payload\n"
    );

    d.deploy("c-count", build("kv_counter", tmp.path()), &[])
        .await;
    for (path, want) in [("/a", "1\n"), ("/a", "2\n"), ("/b", "1\n")] {
        let resp = d
            .post(&format!("/fn/admin/c-count{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text().await.unwrap(), want, "{path}");
    }
    let lines = d.logs_until("c-count", |l| l.len() >= 3).await;
    assert!(
        lines.iter().any(|l| l["message"] == "count for /a is 2"),
        "{lines:?}"
    );

    // The init step (the sieve) runs at deploy; without it, per invocation.
    for (name, extra) in [
        ("c-preinit", &[][..]),
        ("c-preinit-plain", &["-DNO_INIT"][..]),
    ] {
        d.deploy(name, build_with("preinit", tmp.path(), extra), &[])
            .await;
        let (status, body) = d.call(name, "?n=1000000", "").await;
        assert_eq!(
            (status, body.as_str()),
            (200, "78498 primes up to 1000000\n")
        );
        let (status, body) = d.call(name, "?n=99999999", "").await;
        assert_eq!(status, 400, "{body}");
    }

    d.deploy("c-fetch", build("fetch", tmp.path()), &[]).await;
    let resp = d
        .post("/fn/admin/c-fetch")
        .body("http://127.0.0.1:9/")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert!(resp.text().await.unwrap().contains("host not allowed"));
}
