//! Node-wide budgets: what many invocations of one tenant add up to is
//! bounded and admitted before any of it runs, so that tenant cannot take
//! the node down (an OOM kill of the daemon loses every caller's answer),
//! and another tenant keeps its room.

use std::time::{Duration, Instant};

use crate::harness::{Daemon, error_of};

/// Each spinning call of acme reserves 128 MiB and the 4 MiB tape budget:
/// two fit the tenant's 300 MiB, a third does not; beta's hello (64 + 4
/// MiB) fits what is left of the node's 350 MiB, beta's own spinner
/// does not.
#[tokio::test]
async fn invocations_reserve_their_memory_at_admission_per_tenant_and_per_node() {
    let d = Daemon::start_with(&["--capacity-mib", "350", "--capacity-mib-per-tenant", "300"]);
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    for (token, name, code, memory) in [
        (&acme, "spin", crate::harness::example("spin.wat"), "128"),
        (&beta, "spin", crate::harness::example("spin.wat"), "128"),
        (&beta, "hello", crate::harness::example("hello.wat"), "64"),
    ] {
        let query = [
            ("runtime", "wasm"),
            ("timeout_ms", "3000"),
            ("memory_mib", memory),
        ];
        let r = d.deploy_as(token, name, &query, code).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    // One too large to ever be let in is refused at deploy.
    let query = [("runtime", "wasm"), ("memory_mib", "320")];
    let r = d
        .deploy_as(&acme, "huge", &query, crate::harness::example("hello.wat"))
        .await;
    let (status, _, message) = error_of(r).await;
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("--capacity-mib-per-tenant"), "{message}");

    let spinning: Vec<_> = (0..2)
        .map(|_| {
            let req = d.invoke_as(&acme, "acme", "spin").send();
            tokio::spawn(async move { error_of(req.await.unwrap()).await })
        })
        .collect();
    let reserved = || async {
        let metrics = d.get_text("/metrics").await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("hearth_memory_reserved_bytes "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while reserved().await < 2 * (132 << 20) {
        assert!(Instant::now() < deadline, "the spins did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = d.invoke_as(&acme, "acme", "spin").send().await.unwrap();
    assert!(r.headers().contains_key("retry-after"));
    let (status, kind, message) = error_of(r).await;
    assert_eq!(
        (status, kind.as_str()),
        (429, "tenant_memory_full"),
        "{message}"
    );
    assert!(message.contains("--capacity-mib-per-tenant"), "{message}");

    let r = d.invoke_as(&beta, "beta", "hello").send().await.unwrap();
    assert_eq!(r.status(), 200, "another tenant still fits");
    let r = d.invoke_as(&beta, "beta", "spin").send().await.unwrap();
    assert!(r.headers().contains_key("retry-after"), "{:?}", r.headers());
    assert_eq!(
        r.headers()["hearth-refused"],
        "memory_full",
        "a gateway may place it elsewhere"
    );
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (503, "memory_full"), "{message}");

    // What a tenant sees is its own; the node's sum is the operator's.
    let status = d.get_json_as(&acme, "/v1/status").await;
    assert_eq!(status["tenant"]["memory_reserved_mib"], 264, "{status}");
    assert_eq!(status["tenant"]["memory_max_mib"], 300, "{status}");
    for node_wide in ["in_flight", "memory", "recording"] {
        assert!(status.get(node_wide).is_none(), "{node_wide}: {status}");
    }
    let status = d.get_json("/v1/status").await;
    assert_eq!(status["memory"]["capacity_mib"], 350, "{status}");

    for s in spinning {
        let (status, kind, _) = s.await.unwrap();
        assert_eq!((status, kind.as_str()), (504, "timeout"));
    }
    assert_eq!(reserved().await, 0, "every reservation went back");
    let r = d.invoke_as(&beta, "beta", "hello").send().await.unwrap();
    assert_eq!(r.status(), 200);
}
