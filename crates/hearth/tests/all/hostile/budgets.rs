//! Node-wide budgets: what many invocations of one tenant add up to is
//! bounded and admitted before any of it runs, so that tenant cannot take
//! the node down (an OOM kill of the daemon loses every caller's answer),
//! and another tenant keeps its room.

use hearth_test_support::require;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Daemon, error_of, until};

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
    let started = async || reserved().await >= 2 * (132 << 20);
    until("the spins to start", Duration::from_secs(2), started).await;
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
    for node_wide in ["in_flight", "memory", "recording", "cpu_share"] {
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

/// The sum of `d`'s `/metrics` series that start with `series`.
async fn metric(d: &Daemon, series: &str) -> f64 {
    d.get_text("/metrics")
        .await
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A node whose memory is held refuses first calls of functions it has
/// not prepared before it prepares them: a burst of them costs no
/// handler, zygote or install, none counts as a start, and each answers
/// 503 with nothing that says it started. Before, each was prepared, then
/// refused.
#[tokio::test]
async fn a_full_node_refuses_new_functions_before_it_prepares_them() {
    require!(Python);
    let d = Daemon::start_with(&["--capacity-mib", "300", "--capacity-mib-per-tenant", "300"]);
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    let spin = [
        ("runtime", "wasm"),
        ("timeout_ms", "3000"),
        ("memory_mib", "128"),
    ];
    let r = d
        .deploy_as(&acme, "spin", &spin, crate::harness::example("spin.wat"))
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let python = [
        ("runtime", "python"),
        ("file_name", "handler.py"),
        ("memory_mib", "64"),
    ];
    const FUNCTIONS: usize = 8;
    for i in 0..FUNCTIONS {
        let code = format!("def handler(event, context):\n    return {{'n': {i}}}\n");
        let r = d.deploy_as(&beta, &format!("f{i}"), &python, code).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    // Two spins hold 2 × 132 MiB of the node's 300: 68 MiB is not there.
    let spinning: Vec<_> = (0..2)
        .map(|_| {
            let req = d.invoke_as(&acme, "acme", "spin").send();
            tokio::spawn(async move { error_of(req.await.unwrap()).await })
        })
        .collect();
    let started =
        async || metric(&d, "hearth_memory_reserved_bytes").await >= f64::from(2 * (132 << 20));
    until("the spins to start", Duration::from_secs(5), started).await;
    let prepared = metric(&d, "hearth_prepares_total").await;
    let burst: Vec<_> = (0..FUNCTIONS)
        .map(|i| d.invoke_as(&beta, "beta", &format!("f{i}")).send())
        .collect();
    for r in futures::future::join_all(burst).await {
        let r = r.unwrap();
        assert!(
            !r.headers().contains_key("hearth-start"),
            "{:?}",
            r.headers()
        );
        assert_eq!(r.headers()["hearth-refused"], "memory_full");
        let (status, kind, message) = error_of(r).await;
        assert_eq!((status, kind.as_str()), (503, "memory_full"), "{message}");
    }
    assert_eq!(
        metric(&d, "hearth_prepares_total").await,
        prepared,
        "nothing was prepared for a refused call"
    );
    let refused = r#"hearth_invocations_refused_total{kind="memory_full"}"#;
    assert_eq!(metric(&d, refused).await, FUNCTIONS as f64);
    assert_eq!(
        metric(&d, "hearth_starts_total").await,
        0.0,
        "the spins run on"
    );
    let stats = d.get_json_as(&beta, "/v1/stats").await;
    assert_eq!(stats["functions"]["f0"][0]["refused"], 1, "{stats}");
    assert_eq!(stats["functions"]["f0"][0]["count"], 0, "{stats}");

    for s in spinning {
        let (status, kind, _) = s.await.unwrap();
        assert_eq!((status, kind.as_str()), (504, "timeout"));
    }
    let r = d.invoke_as(&beta, "beta", "f0").send().await.unwrap();
    assert_eq!(
        r.headers()["hearth-start"],
        "cold",
        "prepared now, not before"
    );
    assert_eq!(r.status(), 200);
    let more = metric(&d, r#"hearth_prepares_total{tier="process"}"#).await;
    assert_eq!(more, 1.0);
}

/// A connection to `d` from address `from` sending a POST of `declared`
/// bytes to `path`, of which only `sent` go out, from a task of its own
/// (the caller reads meanwhile); the read half, and the task, which gives
/// back the write half once its bytes are out (dropping it would end the
/// request).
async fn upload(
    d: &Daemon,
    from: &str,
    path: &str,
    declared: usize,
    sent: usize,
    recv_buffer: Option<u32>,
) -> (
    tokio::net::tcp::OwnedReadHalf,
    tokio::task::JoinHandle<tokio::net::tcp::OwnedWriteHalf>,
) {
    use tokio::io::AsyncWriteExt;
    let addr: std::net::SocketAddr = d.url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    let stream = socket.connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let head =
        format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {declared}\r\n\r\n");
    let writer = tokio::spawn(async move {
        let mut all = head.into_bytes();
        all.resize(all.len() + sent, b'x');
        // Whatever the server does not read is its business.
        let _ = write.write_all(&all).await;
        write
    });
    (read, writer)
}

/// From `first_from`, 5 MiB of a 6 MiB body to `d`'s echo, held whole
/// before a second from `second_from` starts, so the second is the one
/// that passes a budget. The second sends 3.5 MiB and waits: refused at
/// about 3, the rest is read past before the answer, so no reset
/// overtakes it. The first's connection (kept open while held) and the
/// start of the second's answer.
async fn a_second_body_past_a_budget(
    d: &Daemon,
    first_from: &str,
    second_from: &str,
) -> (
    (
        tokio::net::tcp::OwnedReadHalf,
        tokio::net::tcp::OwnedWriteHalf,
    ),
    String,
) {
    let mib = 1 << 20;
    let (first, writing) = upload(d, first_from, "/fn/admin/echo", 6 * mib, 5 * mib, None).await;
    let first = (first, writing.await.unwrap());
    until_held(d, 5 * mib).await;
    let (mut second, second_writer) =
        upload(d, second_from, "/fn/admin/echo", 6 * mib, 7 * mib / 2, None).await;
    let answer = first_answer(&mut second).await;
    second_writer.abort();
    (first, answer)
}

/// Waits (10 s at most) until `d` holds at least `bytes` of request
/// bodies, by its `/metrics`.
async fn until_held(d: &Daemon, bytes: usize) {
    let held = |m: &str| -> usize {
        let line = m
            .lines()
            .find(|l| l.starts_with("hearth_buffered_body_bytes "));
        line.and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = d.get_text("/metrics").await;
        if held(&m) >= bytes {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the held body is not in /metrics: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The start of the answer on `read`, which must come within 10 s.
async fn first_answer(read: &mut tokio::net::tcp::OwnedReadHalf) -> String {
    use tokio::io::AsyncReadExt;
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), read.read(&mut answer))
        .await
        .expect("the caller got no answer")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// Waits (10 s at most) until a whole call of `bytes` to `echo` is let
/// through, its answer whole: the budget its refused callers held is back.
async fn until_a_whole_call_passes(d: &Daemon, bytes: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = d
            .http
            .post(format!("{}/fn/admin/echo", d.url))
            .body(vec![b'y'; bytes])
            .send()
            .await
            .unwrap();
        let status = r.status();
        if status == 200 {
            assert_eq!(r.bytes().await.unwrap().len(), bytes);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the budget did not come back: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Unauthenticated callers of a public function post large bodies and
/// never finish them, or never read the answers: what the node holds for
/// them is bounded in sum (`--max-buffered-mib`) and in time
/// (`--write-timeout-ms`), and freed when they go.
#[tokio::test]
async fn bodies_held_for_unfinished_or_unread_calls_are_bounded_in_sum_and_time() {
    use tokio::io::AsyncReadExt;
    let d = Daemon::start_with(&["--max-buffered-mib", "8", "--write-timeout-ms", "1000"]);
    let mib = 1 << 20;
    // One caller holds 5 MiB of an unfinished body; a second, from
    // another address, passes the node's 8 and is refused while the first
    // still holds its part.
    let (first, answer) = a_second_body_past_a_budget(&d, "127.0.0.1", "127.0.0.2").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("--max-buffered-mib"), "{answer}");
    drop(first);
    // Gone, they hold nothing: a whole call of 5 MiB goes through.
    until_a_whole_call_passes(&d, 5 * mib).await;

    // A caller that sends a whole body and never reads its 6 MiB answer
    // loses its connection after the write timeout, with what was unsent.
    let (mut unread, writer) = upload(
        &d,
        "127.0.0.1",
        "/fn/admin/echo",
        6 * mib,
        6 * mib,
        Some(4096),
    )
    .await;
    let _write_half = writer.await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), unread.read_to_end(&mut got)).await;
    let read = read.expect("the connection was still open: the answer still held");
    assert!(
        read.is_err() || got.len() < 6 * mib,
        "the whole answer was kept for a caller that did not read ({} bytes)",
        got.len()
    );
}

/// Fans out `?n=` fetches of the URL in its body at once; how many
/// answered and how many were refused as congested.
const FAN_OUT: &str = r#"
export default {
  async fetch(request) {
    const url = await request.text();
    const n = Number(new URL(request.url).searchParams.get("n"));
    const all = await Promise.allSettled(Array.from({ length: n }, () => fetch(url)));
    const ok = all.filter((r) => r.status === "fulfilled").length;
    const why = all.filter((r) => r.status === "rejected").map((r) => String(r.reason));
    return Response.json({ ok, refused: why.filter((w) => w.includes("outbound connections")).length, why: why.slice(0, 1) });
  },
};
"#;

/// A server on `ip` whose `/slow` answers after 1.5 s: each fetch of it
/// holds a connection that long.
async fn slow_upstream(ip: std::net::IpAddr) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let waiting = Arc::new(AtomicUsize::new(0));
    let counted = waiting.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let waiting = counted.clone();
            async move {
                waiting.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                waiting.fetch_sub(1, Ordering::SeqCst);
                "slow"
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (upstream, waiting)
}

/// A tenant's fetches to a slow host hold sockets; past its share of the
/// node's outbound connections (and past 16 in one invocation) a fetch is
/// refused before it opens one, and another tenant still gets out.
#[tokio::test]
async fn one_tenants_fetches_hold_at_most_its_share_of_outbound_connections() {
    let (upstream, waiting) = slow_upstream(std::net::Ipv4Addr::LOCALHOST.into()).await;
    let d = Daemon::start_with(&[
        "--allow-private-egress",
        "true",
        "--max-outbound-connections",
        "40",
        "--max-outbound-connections-per-tenant",
        "20",
    ]);
    let host = upstream.to_string();
    let mut tokens = Vec::new();
    for tenant in ["acme", "beta"] {
        let token = d.create_tenant(tenant).await;
        let query = [
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("allow_host", host.as_str()),
            ("timeout_ms", "10000"),
        ];
        let r = d.deploy_as(&token, "fan", &query, FAN_OUT).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
        tokens.push(token);
    }
    let url = format!("http://{upstream}/slow");
    let fan = |token: &String, tenant: &str, n: u32| {
        d.http
            .post(format!("{}/fn/{tenant}/fan?n={n}", d.url))
            .bearer_auth(token)
            .body(url.clone())
            .send()
    };
    // One invocation: 16 in flight at most.
    let one: serde_json::Value = fan(&tokens[1], "beta", 20)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (one["ok"].as_u64(), one["refused"].as_u64()),
        (Some(16), Some(4)),
        "{one}"
    );
    assert!(
        one["why"].to_string().contains("this invocation has 16"),
        "{one}"
    );
    // acme's two invocations together hold its 20; beta still gets out.
    let acme: Vec<_> = (0..2)
        .map(|_| tokio::spawn(fan(&tokens[0], "acme", 12)))
        .collect();
    // Once acme's 20 reach the upstream (each waits there 1.5 s).
    let at_upstream = async || waiting.load(Ordering::SeqCst) >= 20;
    until(
        "acme's 20 fetches at the upstream",
        Duration::from_secs(10),
        at_upstream,
    )
    .await;
    let beta: serde_json::Value = fan(&tokens[1], "beta", 4)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(beta["ok"], 4, "{beta}");
    let mut ok = 0;
    for a in acme {
        let v: serde_json::Value = a.await.unwrap().unwrap().json().await.unwrap();
        ok += v["ok"].as_u64().unwrap();
        let why = v["why"].to_string();
        assert!(
            v["refused"] == 0 || why.contains("--max-outbound-connections-per-tenant"),
            "{v}"
        );
    }
    assert_eq!(ok, 20, "acme's fetches past its share were refused");
}

/// A function that logs 60,000 bytes per call, numbering its lines.
const CHATTY: &str = r#"
let n = 0;
export default {
  fetch() {
    n += 1;
    console.log(String(n).padStart(6, "0") + "x".repeat(59994));
    return new Response(String(n));
  },
};
"#;

/// The data directory's database files, in bytes.
fn db_bytes(dir: &std::path::Path) -> u64 {
    ["hearth.db", "hearth.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// A function that logs as fast as it can keeps its newest lines within
/// its quota, another function's logs stay whole, and removing it gives
/// the space back (before, one function wrote 1.2 GB into the store in
/// 20 s, and the file stayed that size after `rm`).
#[tokio::test]
async fn a_function_keeps_its_newest_logs_within_its_quota_and_rm_gives_the_space_back() {
    let d = Daemon::start_with(&[
        "--max-log-mib-per-function",
        "1",
        "--max-log-mib-per-tenant",
        "4",
    ]);
    let js = [("runtime", "js"), ("file_name", "index.mjs")];
    d.deploy("chatty", CHATTY.as_bytes().to_vec(), &js).await;
    d.deploy("quiet", CHATTY.as_bytes().to_vec(), &js).await;
    assert_eq!(d.call("quiet", "", "").await.0, 200);
    for _ in 0..40 {
        assert_eq!(d.call("chatty", "", "").await.0, 200);
    }
    // Within a sweep, at most 1 MiB of chatty's lines: the newest.
    let lines = d
        .logs_until("chatty", |l| !l.is_empty() && l.len() * 60_000 <= 1 << 20)
        .await;
    let numbers: Vec<&str> = lines
        .iter()
        .map(|l| &l["message"].as_str().unwrap()[..6])
        .collect();
    assert!(
        numbers.contains(&"000040"),
        "the newest line is kept: {numbers:?}"
    );
    assert!(!numbers.contains(&"000001"), "the oldest went: {numbers:?}");
    let quiet = d.logs_until("quiet", |l| !l.is_empty()).await;
    assert_eq!(quiet.len(), 1, "another function's logs are whole");

    // Removed, its lines go and the file gives the space back: measured
    // from when the last lines are in and the file holds still.
    let mut last = db_bytes(&d.dir);
    crate::harness::until(
        "the database's size to hold still",
        Duration::from_secs(15),
        async || {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = db_bytes(&d.dir);
            std::mem::replace(&mut last, now) == now
        },
    )
    .await;
    let before = db_bytes(&d.dir);
    let r = d.delete("/v1/functions/chatty").send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let deadline = Instant::now() + Duration::from_secs(15);
    while db_bytes(&d.dir) + (512 << 10) > before {
        assert!(
            Instant::now() < deadline,
            "the database kept its size after rm: {} then {} bytes",
            before,
            db_bytes(&d.dir)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A tenant calling a chatty function back to back keeps at most its log
/// rate (`--log-kib-per-sec-per-tenant`): past it, lines are dropped before
/// they reach the tape or the store, the invocation's log says how much,
/// and another tenant's lines are whole (before, eight callers of a
/// function logging a megabyte a call took another tenant's p99 to 8–11×
/// its idle figure: the node spent its cores taping and storing them).
#[tokio::test]
async fn a_tenant_keeps_at_most_its_log_rate_and_another_tenants_lines_are_whole() {
    let d = Daemon::start_with(&["--log-kib-per-sec-per-tenant", "64"]);
    let js = [("runtime", "js"), ("file_name", "index.mjs")];
    d.deploy("chatty", CHATTY.as_bytes().to_vec(), &js).await;
    let beta = d.create_tenant("beta").await;
    let r = d.deploy_as(&beta, "chatty", &js, CHATTY).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());

    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(d.call("chatty", "", "").await.0, 200);
    }
    let secs = started.elapsed().as_secs_f64().ceil();
    let dropped = |l: &serde_json::Value| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.contains("bytes of log output dropped"))
    };
    let lines = d.logs_until("chatty", |l| l.iter().any(dropped)).await;
    let kept: Vec<usize> = lines
        .iter()
        .filter_map(|l| l["message"].as_str().map(str::len))
        .filter(|&n| n == 60_000)
        .collect();
    // Four seconds' worth at once, then 64 KiB a second.
    let allowed = (256 << 10) as f64 + (64 << 10) as f64 * secs;
    let sum: usize = kept.iter().sum();
    assert!(
        (sum as f64) <= allowed && kept.len() >= 4,
        "{} lines of 60 kB kept in {secs} s, {sum} bytes against {allowed}",
        kept.len()
    );
    let notice = lines.iter().find(|l| dropped(l)).unwrap();
    assert!(
        notice["message"]
            .as_str()
            .unwrap()
            .contains("--log-kib-per-sec-per-tenant"),
        "{notice}"
    );
    let metrics = d.get_text("/metrics").await;
    let dropped_bytes: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hearth_log_bytes_dropped "))
        .and_then(|v| v.parse().ok())
        .expect("hearth_log_bytes_dropped in /metrics");
    assert!(dropped_bytes >= 60_000, "{dropped_bytes}");

    // Beta's bucket is its own.
    let r = d.invoke_as(&beta, "beta", "chatty").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = d.get_json_as(&beta, "/v1/functions/chatty/logs").await;
        let lines = v["lines"].as_array().cloned().unwrap_or_default();
        if let Some(line) = lines.first() {
            assert_eq!(line["message"].as_str().unwrap().len(), 60_000, "{v}");
            assert_eq!(lines.len(), 1, "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "beta's line was not stored: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gateway holds a request body whole (up to `--max-body-bytes`) so that
/// another node can be asked if the first fails: what it holds over every
/// connection is bounded by `--max-buffered-mib` as a node's is (before,
/// 400 unfinished 6 MiB bodies would have been 2.4 GB of a gateway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_bounds_the_bodies_it_holds_in_sum() {
    require!(Postgres);
    let pg = hearth_test_support::TempPostgres::start().unwrap();
    let store = pg.create_database("bodies").unwrap();
    let gw = crate::cluster::gateway_with(&store, &["--max-buffered-mib", "8"]);
    let _node = crate::cluster::node(&gw, &store, &[]);
    crate::cluster::members_until(&gw, "the node joins", |m| crate::cluster::alive(m) == 1).await;
    let mib = 1 << 20;
    let (first, answer) = a_second_body_past_a_budget(&gw, "127.0.0.1", "127.0.0.2").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("--max-buffered-mib"), "{answer}");
    drop(first);
    // Gone, they hold nothing: a whole call of 5 MiB goes through.
    until_a_whole_call_passes(&gw, 5 * mib).await;
}

/// A Python function's connections through its sandbox's egress proxy
/// hold descriptors of the daemon as `fetch` does, and used to count
/// against no outbound budget: they count against the tenant's and the
/// node's now, and past them the proxy answers 429.
#[tokio::test]
async fn python_connections_through_the_proxy_count_against_the_outbound_budget() {
    require!(Python);
    let (upstream, _) = slow_upstream(crate::harness::own_address()).await;
    let d = Daemon::start_with(&[
        "--allow-private-egress",
        "true",
        "--max-outbound-connections-per-tenant",
        "4",
    ]);
    let code = format!(
        r#"import threading, urllib.error, urllib.request
URL = "http://{upstream}/slow"
def handler(event, context):
    got = []
    def one():
        try:
            with urllib.request.urlopen(URL, timeout=10) as r:
                got.append(r.status)
        except urllib.error.HTTPError as e:
            got.append(e.code)
        except Exception as e:
            got.append(repr(e))
    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {{"ok": got.count(200), "refused": got.count(429), "all": [str(g) for g in got]}}
"#
    );
    let host = upstream.to_string();
    let query = [
        ("runtime", "python"),
        ("file_name", "handler.py"),
        ("allow_host", host.as_str()),
        ("timeout_ms", "10000"),
    ];
    let r = d.deploy_as(&d.token, "proxied", &query, code).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let (status, body) = d.call("proxied", "", "{}").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["ok"].as_u64(), v["refused"].as_u64()),
        (Some(4), Some(4)),
        "{v}"
    );
}

/// One client address's unfinished bodies hold at most a quarter of the
/// node's body budget (and one whole body at least): before, one address
/// could hold all of it, and every other caller of a public function got
/// 503.
#[tokio::test]
async fn one_client_address_holds_at_most_its_share_of_the_body_budget() {
    // 32 MiB for the node: 8 MiB for each address.
    let d = Daemon::start_with(&["--max-buffered-mib", "32"]);
    let mib = 1 << 20;
    // The same address's second unfinished body passes its share: 429.
    let (first, answer) = a_second_body_past_a_budget(&d, "127.0.0.1", "127.0.0.1").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("client address"), "{answer}");
    // Another address still gets through with a body as large.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let r = other
        .post(format!("{}/fn/admin/echo", d.url))
        .body(vec![b'y'; 5 * mib])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 5 * mib);
    drop(first);
}

/// An HTTP client of `d` whose connections come from `from` (another
/// loopback address is another client).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// Posts `bytes` to the public echo from `client`, with `headers`: the
/// status, the error kind if any, and `Retry-After`.
async fn post_echo(
    d: &Daemon,
    client: &reqwest::Client,
    bytes: usize,
    headers: &[(&str, &str)],
) -> (u16, String, Option<u64>) {
    let mut req = client.post(format!("{}/fn/admin/echo", d.url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.body(vec![b'z'; bytes]).send().await.unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    if status == 200 {
        assert_eq!(body.len(), bytes, "the echo answers the whole body");
        return (status, String::new(), retry);
    }
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let kind = v["error"]["kind"].as_str().unwrap_or_default().to_string();
    (status, kind, retry)
}

/// A client posting bodies faster than `--client-body-mib-per-sec` is
/// refused with its body unread (the node copies and tapes none of it)
/// and told how long to wait; another client address is not held back,
/// and the first is served again once it has waited.
#[tokio::test]
async fn a_client_sending_bodies_past_its_rate_is_refused_unread_and_others_are_not() {
    let mib = 1 << 20;
    // A bucket of a second's MiB and one largest body (1 MiB): 2 MiB.
    let d = Daemon::start_with(&[
        "--client-body-mib-per-sec",
        "1",
        "--max-body-bytes",
        &mib.to_string(),
    ]);
    let (greedy, other) = (client_from("127.0.0.2"), client_from("127.0.0.3"));
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(post_echo(&d, &greedy, mib, &[]).await);
    }
    assert_eq!((seen[0].0, seen[1].0), (200, 200), "the burst: {seen:?}");
    let refused = seen[2..]
        .iter()
        .find(|(status, _, _)| *status == 429)
        .unwrap_or_else(|| panic!("4 MiB at once at 1 MiB/s went through: {seen:?}"));
    assert_eq!(refused.1, "rate_limited", "{seen:?}");
    let wait = refused.2.expect("a refusal says when to come back");
    assert!((1..=2).contains(&wait), "{seen:?}");
    assert_eq!(
        post_echo(&d, &other, mib, &[]).await.0,
        200,
        "another client"
    );
    let metrics = d.get_text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hearth_client_bodies_rate_limited ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Refused unread: the echo ran only for the bodies it was given.
    let invocations: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("hearth_invocations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64;
    let served = seen.iter().filter(|s| s.0 == 200).count() as u64 + 1;
    assert_eq!(invocations, served, "{metrics}");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(
        post_echo(&d, &greedy, mib, &[]).await.0,
        200,
        "after the wait"
    );
}

/// Behind a trusted proxy, each client its `X-Forwarded-For` names has a
/// rate of its own, and a client cannot pick its address by writing the
/// header itself: an untrusted peer is counted as itself, whatever it
/// claims.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_rate() {
    let mib = 1 << 20;
    let d = Daemon::start_with(&[
        "--client-body-mib-per-sec",
        "1",
        "--max-body-bytes",
        &mib.to_string(),
        "--trusted-proxy",
        "127.0.0.4",
    ]);
    let proxy = client_from("127.0.0.4");
    let from = |who: &'static str| [("x-forwarded-for", who)];
    // One forwarded client spends its burst and is refused...
    for _ in 0..2 {
        assert_eq!(
            post_echo(&d, &proxy, mib, &from("198.51.100.1")).await.0,
            200
        );
    }
    let third = post_echo(&d, &proxy, mib, &from("198.51.100.1")).await;
    assert_eq!((third.0, third.1.as_str()), (429, "rate_limited"));
    // ...while another behind the same proxy is not.
    assert_eq!(
        post_echo(&d, &proxy, mib, &from("198.51.100.2")).await.0,
        200
    );
    // A client the proxy saw, whatever it wrote left of it.
    let spoofed = "198.51.100.2, 198.51.100.1";
    assert_eq!(
        post_echo(&d, &proxy, mib, &from(spoofed)).await.1,
        "rate_limited"
    );
    // An untrusted peer's header is not believed: it pays for itself.
    let direct = client_from("127.0.0.5");
    for claimed in ["203.0.113.1", "203.0.113.2"] {
        assert_eq!(post_echo(&d, &direct, mib, &from(claimed)).await.0, 200);
    }
    let third = post_echo(&d, &direct, mib, &from("203.0.113.3")).await;
    assert_eq!(third.1, "rate_limited", "{third:?}");
}
