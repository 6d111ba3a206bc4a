//! The C examples in examples/wasm, built with Debian's clang for
//! wasm32-wasi (the README's test command installs it), deployed and called.

use hearth_test_support::require;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::Daemon;

fn build(name: &str, out_dir: &Path) -> Vec<u8> {
    build_with(name, out_dir, &[])
}

/// Builds examples/wasm/NAME.c with extra clang arguments (e.g. -D...).
pub fn build_with(name: &str, out_dir: &Path, extra: &[&str]) -> Vec<u8> {
    let src = crate::harness::crate_dir()
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
    require!(Clang);
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

/// Hearth's own WASI, seen through wasi-libc: arguments, environment,
/// clocks, sleep, entropy and stdin work; the host's files do not exist;
/// stderr past the log budget is cut without stopping the function; a
/// non-zero exit is the function's error.
#[tokio::test]
async fn wasi_libc_gets_what_a_function_needs_and_no_host_files() {
    require!(Clang);
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start();
    d.deploy(
        "probe",
        build("wasi_probe", tmp.path()),
        &[("env", "GREETING=hi there")],
    )
    .await;
    let (status, body) = d.call("probe", "", "ping").await;
    assert_eq!(status, 200, "{body}");
    let want = [
        "argv0=probe argc=1",
        "GREETING=hi there",
        "wall_after_2020=1",
        "nanosleep=0 slept_20ms=1",
        "entropy=1 differs=1",
        "opendir=refused",
        "stdin=4:ping eof=1",
    ];
    for line in want {
        assert!(
            body.lines().any(|l| l == line),
            "{line:?} missing from:\n{body}"
        );
    }
    let fopen = body
        .lines()
        .find(|l| l.starts_with("fopen_passwd="))
        .unwrap();
    assert!(fopen.starts_with("fopen_passwd=refused"), "{fopen}");

    // 200 KiB of stderr against a 64 KiB log budget: the answer still comes.
    let (status, body) = d.call("probe", "?stderr=200", "").await;
    assert_eq!(status, 200, "{body}");
    let logs = d
        .logs_until("probe", |l| {
            l.iter().any(|x| {
                x["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("truncated at"))
            })
        })
        .await;
    let stderr_bytes: usize = logs
        .iter()
        .filter(|l| l["stream"] == "stderr")
        .map(|l| l["message"].as_str().unwrap().len())
        .sum();
    assert!(
        stderr_bytes <= 64 << 10,
        "kept {stderr_bytes} bytes of stderr"
    );

    let (status, body) = d.call("probe", "?exit=3", "").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("exited with status 3"), "{body}");

    // Variables the guest could not see as written are refused at deploy.
    for bad in ["=x", "A\0B=1", "A=1\x002"] {
        let resp = d
            .deploy_raw(
                "probe-bad",
                build("wasi_probe", tmp.path()),
                &[("env", bad)],
            )
            .await;
        assert_eq!(resp.status(), 400, "{bad:?}");
        assert!(resp.text().await.unwrap().contains("environment variable"));
    }
}

/// A C program whose `malloc` the memory limit refuses, and which then
/// exits non-zero as C programs do, ran out of memory: `500
/// out_of_memory` with the limit and what it wrote last, not an exit
/// status.
#[tokio::test]
async fn a_c_program_the_limit_starves_is_out_of_memory_with_its_last_words() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("grow.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <stdlib.h>
char *kept[4096];
int main(void) {
    printf("Content-Type: text/plain\r\n\r\n");
    fprintf(stderr, "resize: allocating buffers\n");
    size_t mib = 0;
    for (;;) {
        char *p = malloc(1 << 20);
        if (!p) {
            fprintf(stderr, "resize: out of memory after %zu MiB\n", mib);
            return 1;
        }
        p[0] = 1;
        kept[mib++ % 4096] = p;
    }
}
"#,
    )
    .unwrap();
    let out = tmp.path().join("grow.wasm");
    let status = Command::new("clang")
        .args(["--target=wasm32-wasi", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    let d = Daemon::start();
    d.deploy(
        "grow",
        std::fs::read(&out).unwrap(),
        &[("memory_mib", "16")],
    )
    .await;
    let resp = d.post("/fn/admin/grow").send().await.unwrap();
    let (status, kind, msg) = crate::harness::error_of(resp).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"), "{msg}");
    assert!(msg.contains("16 MiB"), "{msg}");
    assert!(
        msg.contains("it last wrote: resize: allocating buffers / resize: out of memory after"),
        "{msg}"
    );
    let lines = d.logs_until("grow", |l| l.len() >= 2).await;
    let text = format!("{lines:?}");
    assert!(text.contains("resize: out of memory after"), "{text}");
}
