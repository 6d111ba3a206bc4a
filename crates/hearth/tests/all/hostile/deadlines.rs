//! A JS builtin that loops without polling QuickJS's interrupt handler
//! (`Array.prototype.reverse` over an array-like of length 2^53-1) runs
//! past its function's deadline: the interrupt cannot stop it. Its caller
//! still gets its 504 at the deadline and a grace, the worker is abandoned
//! and replaced, the tenant's JavaScript runs in Node.js from then on,
//! other tenants' JS keeps answering, and SIGTERM still stops the daemon.

use std::time::{Duration, Instant};

use crate::harness::{Daemon, error_of};

const STUCK: &str = "export default { fetch() { Array.prototype.reverse.call({ length: 2 ** 53 - 1 }); return new Response('done'); } };";
const HELLO: &str = "export default { fetch() { return new Response('hello'); } };";

#[tokio::test]
async fn a_builtin_past_its_deadline_costs_a_worker_not_the_node() {
    let d = Daemon::start_with(&["--js-workers", "2", "--drain-timeout-s", "3"]);
    let mut tokens = Vec::new();
    for (tenant, code, timeout) in [("acme", STUCK, "1000"), ("beta", HELLO, "1000")] {
        let token = d.create_tenant(tenant).await;
        let query = [
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("timeout_ms", timeout),
        ];
        let r = d.deploy_as(&token, "f", &query, code).await;
        assert_eq!(r.status(), 201);
        tokens.push(token);
    }
    let (acme, beta) = (&tokens[0], &tokens[1]);
    assert_eq!(
        d.invoke_as(beta, "beta", "f")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "hello"
    );

    // Two at once, on acme's one worker (its share of two): the first
    // holds it in the builtin; the second, moved off it, never starts.
    let started = Instant::now();
    let stuck: Vec<_> = (0..2)
        .map(|_| tokio::spawn(d.invoke_as(acme, "acme", "f").send()))
        .collect();
    for s in stuck {
        let answer = tokio::time::timeout(Duration::from_secs(10), s)
            .await
            .expect("a caller got no answer: the worker kept it");
        let (status, kind, message) = error_of(answer.unwrap().unwrap()).await;
        assert_eq!((status, kind.as_str()), (504, "timeout"), "{message}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the callers waited {:?}",
        started.elapsed()
    );
    let status = d.get_json("/v1/status").await;
    let js = &status["tiers"]["js"]["details"];
    assert_eq!(js["abandoned_workers"], 1, "{js}");
    assert_eq!(
        js["active_workers"], 4,
        "two regular and two reserve workers take work: a spare replaced the lost one: {js}"
    );

    // Another tenant's JS answers while the lost threads still spin.
    for _ in 0..6 {
        let r = d.invoke_as(beta, "beta", "f").send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
    }
    // The version that did it runs in Node.js now, whose limits kill the
    // process (V8 gives up on its memory, or the deadline comes): no
    // worker more is lost.
    let r = d.invoke_as(acme, "acme", "f").send().await.unwrap();
    let (status, kind, message) = error_of(r).await;
    assert!(
        matches!(
            (status, kind.as_str()),
            (504, "timeout") | (500, "out_of_memory")
        ),
        "{status} {kind}: {message}"
    );
    let status = d.get_json("/v1/status").await;
    assert_eq!(status["tiers"]["js"]["details"]["abandoned_workers"], 1);
    // So does all of acme's JavaScript, whatever it deploys next: a new
    // version of the same builtin, or another function, costs no worker
    // (else each redeploy would take a spare, until none was left).
    let query = [
        ("runtime", "js"),
        ("file_name", "index.mjs"),
        ("timeout_ms", "1000"),
    ];
    for name in ["f", "g"] {
        let r = d.deploy_as(acme, name, &query, STUCK).await;
        assert_eq!(r.status(), 201);
        let r = d.invoke_as(acme, "acme", name).send().await.unwrap();
        assert!(matches!(r.status().as_u16(), 504 | 500), "{}", r.status());
    }
    let status = d.get_json("/v1/status").await;
    let js = &status["tiers"]["js"]["details"];
    assert_eq!(js["abandoned_workers"], 1, "{js}");
    assert_eq!(js["tenants_sent_to_node"], 1, "{js}");
    let r = d.invoke_as(beta, "beta", "f").send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "hello", "beta's JS still runs");

    // SIGTERM stops the daemon within its drain timeout, whatever spins.
    let stopping = Instant::now();
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(d.pid() as i32, libc::SIGTERM) };
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    };
    while alive(d.pid()) {
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "the daemon did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
