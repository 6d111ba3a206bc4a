//! Hot JavaScript compiled from its traces (Containerless §3–§4): a
//! CPU-bound js function is traced once warm, compiled to wasm, proved
//! against its own tapes and served compiled, answering as the isolate
//! did; what its trace did not cover runs in the isolate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::harness::Daemon;

const PRIMES: &str = include_str!("../../../../examples/js/primes.mjs");
const PI: &str = include_str!("../../../../examples/js/pi.mjs");

fn listed(list: &serde_json::Value, name: &str) -> serde_json::Value {
    list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .cloned()
        .unwrap()
}

/// The `hearth_invocations_total` count of `tier` with outcome ok.
fn invocations(metrics: &str, tier: &str) -> u64 {
    let series = format!(r#"hearth_invocations_total{{tier="{tier}",outcome="ok"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Invokes `name` with the bodies in turn until `GET /v1/functions` says
/// it is compiled: what each body was answered in the isolate, and how
/// many invocations that took.
async fn until_compiled(
    d: &Daemon,
    name: &str,
    bodies: &[String],
) -> (std::collections::HashMap<String, (u16, String)>, u64) {
    let mut isolate = std::collections::HashMap::new();
    let started = Instant::now();
    let mut i = 0;
    loop {
        let body = &bodies[i % bodies.len()];
        let answer = d.call(name, "", body).await;
        assert_eq!(answer.0 / 100, 2, "{answer:?}");
        isolate.entry(body.clone()).or_insert(answer);
        i += 1;
        let f = listed(&d.get_json("/v1/functions").await, name);
        if f["compiled"] == "compiled" {
            assert!(f["proved_tapes"].as_u64().unwrap() >= 1, "{f}");
            return (isolate, i as u64);
        }
        assert!(f["not_compiled"].is_null(), "refused: {f}");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not compiled after {i} invocations: {f}"
        );
    }
}

/// POSTs `body` to admin's `name`: status, text and invocation id.
async fn invoke(d: &Daemon, name: &str, body: &str) -> (u16, String, String) {
    let r = d
        .post(&format!("/fn/admin/{name}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let id = r.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    (r.status().as_u16(), r.text().await.unwrap(), id)
}

/// The value of the unlabelled series `name` in `/metrics`.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hot_cpu_bound_function_is_compiled_proved_against_its_tapes_and_answers_as_the_isolate()
{
    let d = Daemon::start();
    d.deploy(
        "primes",
        PRIMES.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    // Varied requests while it runs in the isolate: what it answered
    // there is what the compiled code must answer.
    let bodies: Vec<String> = (0..40).map(|i| (20000 + 397 * i).to_string()).collect();
    let (isolate, _) = until_compiled(&d, "primes", &bodies).await;
    let before = invocations(&d.get_text("/metrics").await, "compiled");
    for body in &bodies {
        let compiled = d.call("primes", "", body).await;
        let want = match isolate.get(body) {
            Some(a) => a.clone(),
            None => continue,
        };
        assert_eq!(compiled, want, "for {body}");
    }
    let metrics = d.get_text("/metrics").await;
    let served = invocations(&metrics, "compiled") - before;
    assert!(
        served >= bodies.len() as u64 / 2,
        "{served} compiled: {metrics}"
    );

    // A body that is not ASCII: the compiled code leaves (it decodes
    // only ASCII exactly), and the isolate answers (Number("zwölf") is
    // NaN, and no loop runs).
    let (status, body, left_id) = invoke(&d, "primes", "zwölf").await;
    assert_eq!((status, body.as_str()), (200, "0 0"));
    let metrics = d.get_text("/metrics").await;
    assert!(
        metrics.contains("hearth_js_compiled_left_total 1"),
        "{metrics}"
    );
    let (_, _, compiled_id) = invoke(&d, "primes", "20000").await;

    // The tapes say which path served each invocation (they are written
    // within the recorder's flush interval).
    let deadline = Instant::now() + Duration::from_secs(30);
    let tier_of = |tapes: &serde_json::Value, id: &str| {
        tapes["recordings"]
            .as_array()
            .unwrap_or_else(|| panic!("{tapes}"))
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["tier"].as_str().unwrap().to_string())
    };
    let (left_tier, compiled_tier) = loop {
        let tapes = d.get_json("/v1/functions/primes/recordings?limit=20").await;
        let tiers = (tier_of(&tapes, &left_id), tier_of(&tapes, &compiled_id));
        if let (Some(a), Some(b)) = tiers {
            break (a, b);
        }
        assert!(Instant::now() < deadline, "tapes not listed: {tapes}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (left_tier.as_str(), compiled_tier.as_str()),
        ("js", "compiled"),
        "the one that left ran in the isolate"
    );

    // A redeploy starts over in the isolate.
    d.deploy(
        "primes",
        PRIMES.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let f = listed(&d.get_json("/v1/functions").await, "primes");
    assert_eq!(f["compiled"], "interpreted", "{f}");
}

/// Clocks and randomness in compiled code are the host's, through the
/// wasm tier's WASI: the proof only passes if the compiled code draws the
/// same numbers from an isolate tape's random bytes as the isolate did; a
/// compiled invocation's tape replays identically in the isolate; and live
/// compiled answers are checked in the isolate in the background.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_code_reads_clocks_and_randomness_from_the_host_as_the_isolate_does() {
    let d = Daemon::start();
    d.deploy(
        "pi",
        PI.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let bodies: Vec<String> = (0..20).map(|i| (4000 + 101 * i).to_string()).collect();
    until_compiled(&d, "pi", &bodies).await;

    let (status, answer, id) = invoke(&d, "pi", "5000").await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains(" of 5000 inside at ") && answer.ends_with("clock forward: true"),
        "{answer}"
    );
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "compiled", "{tape:#}");
    // The isolate, given the compiled invocation's tape, asks for the same
    // host calls and answers the same: the same points, the same time.
    let report = d.replay(&id).await;
    assert_eq!(report["tier"], "js", "{report:#}");
    assert_eq!(report["identical"], true, "{report:#}");

    // The live check runs (the first compiled answer with a tape is always
    // checked) and finds nothing to drop the compiled version for.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = d.get_text("/metrics").await;
        if counter(&metrics, "hearth_js_compiled_checked_total") >= 1 {
            assert_eq!(
                counter(&metrics, "hearth_js_compiled_diverged_total"),
                0,
                "{metrics}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no live check: {metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let f = listed(&d.get_json("/v1/functions").await, "pi");
    assert_eq!(f["compiled"], "compiled", "{f}");
}

const TALLY: &str = include_str!("../../../../examples/js/tally.mjs");

/// KV from compiled code: the same host calls the isolate makes, so a
/// compiled tape replays identically in the isolate; and a compiled run
/// that leaves after its KV write hands the write's answer to the
/// isolate, which does not write again: the total moves once.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_code_calls_kv_through_the_host_and_a_leave_after_a_write_writes_once() {
    let d = Daemon::start();
    d.deploy(
        "tally",
        TALLY.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    let bodies: Vec<String> = (0..20)
        .map(|i| "lorem ipsum dolor sit amet ".repeat(200 + 10 * i))
        .collect();
    until_compiled(&d, "tally", &bodies).await;
    let total = |answer: &str| -> u64 {
        serde_json::from_str::<serde_json::Value>(answer).unwrap()["total"]
            .as_u64()
            .unwrap()
    };

    let (status, answer, id) = invoke(&d, "tally", "one two three").await;
    assert_eq!(status, 200, "{answer}");
    let before = total(&answer);
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "compiled", "{tape:#}");
    let report = d.replay(&id).await;
    assert_eq!(report["tier"], "js", "{report:#}");
    assert_eq!(report["identical"], true, "{report:#}");

    // Past the write, a branch the trace never took: the isolate finishes
    // it, given the compiled run's KV answers.
    let long = "x".repeat(50);
    let r = d.post("/fn/admin/tally").body(long).send().await.unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(r.text().await.unwrap(), "a word of 50 letters");
    let (status, answer, _) = invoke(&d, "tally", "four").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        total(&answer),
        before + 2,
        "the long word counted once, though both tiers ran its write: {answer}"
    );
    let metrics = d.get_text("/metrics").await;
    assert!(
        counter(&metrics, "hearth_js_compiled_left_total") >= 1,
        "{metrics}"
    );
}

/// A price list on loopback, as `examples/js/quote.mjs` reads it: 300
/// SKUs `s0`…`s299`, and how many times it was asked for.
async fn price_list() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let list = serde_json::json!({
        "skus": (0..300).map(|i| format!("s{i}")).collect::<Vec<_>>(),
        "cents": (0..300).map(|i| 100 + 7 * i).collect::<Vec<_>>(),
    })
    .to_string();
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/prices",
        axum::routing::get(move || {
            h.fetch_add(1, Ordering::SeqCst);
            let list = list.clone();
            async move { ([("content-type", "application/json")], list) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, hits)
}

/// An order of `n` lines of known SKUs for `quote`, the `i`th of a stream.
fn quote_order(i: usize, n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|k| {
            format!(
                r#"{{"sku":"s{}","qty":{}}}"#,
                (i * 37 + k * 11) % 300,
                1 + k % 9
            )
        })
        .collect();
    format!(r#"{{"items":[{}]}}"#, items.join(","))
}

/// `fetch` from compiled code: the request the isolate sends, so the
/// proof answers it from isolate tapes (the function's URL is written
/// un-normalized, `HTTP://…/x/../prices`: sent raw, the compiled request
/// would differ and never be proved), a compiled tape replays identically
/// in the isolate, and a compiled run that leaves after its `fetch` hands
/// the answer over: the price list is asked once.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_code_fetches_through_the_host_and_a_leave_after_a_fetch_fetches_once() {
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let (addr, hits) = price_list().await;
    let env = format!("PRICES_URL=HTTP://{addr}/x/../prices");
    d.deploy(
        "quote",
        include_bytes!("../../../../examples/js/quote.mjs").to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("allow_host", &addr.to_string()),
            ("env", &env),
        ],
    )
    .await;
    let bodies: Vec<String> = (0..20).map(|i| quote_order(i, 100 + 10 * i)).collect();
    until_compiled(&d, "quote", &bodies).await;

    let order = quote_order(99, 40);
    let (status, answer, id) = invoke(&d, "quote", &order).await;
    assert_eq!(status, 200, "{answer}");
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "compiled", "{tape:#}");
    let report = d.replay(&id).await;
    assert_eq!(report["tier"], "js", "{report:#}");
    assert_eq!(report["identical"], true, "{report:#}");

    // An unknown SKU, which no training order had: the compiled code
    // leaves after its fetch, and the isolate finishes with its answer.
    let before = hits.load(Ordering::SeqCst);
    let (status, answer, _) = invoke(
        &d,
        "quote",
        r#"{"items":[{"sku":"s1","qty":2},{"sku":"nope","qty":1}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, r#"{"items":2,"unknown":1,"total":214}"#);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        before + 1,
        "the price list asked once, though both tiers ran the fetch"
    );
    let metrics = d.get_text("/metrics").await;
    assert!(
        counter(&metrics, "hearth_js_compiled_left_total") >= 1,
        "{metrics}"
    );
}

/// A varied request for `example`, the `i`th of a stream: numbers and
/// texts of many sizes (the maze reads no request); `heavy` ones take a
/// millisecond or more in the isolate, so the function gets hot.
fn varied(example: &str, i: u64, heavy: bool) -> String {
    let scale = if heavy { 10 } else { 1 };
    // A small LCG: the stream is the same on every run.
    let mut x = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |m: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        (x >> 33) % m
    };
    match example {
        "primes" => (next(6000) * scale).to_string(),
        "pi" => (1 + next(3000) * scale).to_string(),
        "words" | "tally" => {
            const WORDS: [&str; 8] = ["lorem", "Ipsum", "a", "dolor", "SIT", "amet,", "x", ""];
            let n = (next(300) * scale * scale) as usize;
            (0..n)
                .map(|_| WORDS[next(WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(if next(4) == 0 { "  " } else { " " })
        }
        "stats" => {
            let n = 1 + next(80) * scale;
            let spread = 1 + next(1000);
            (0..n)
                .map(|_| (next(2 * spread) as i64 - spread as i64).to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
        "orders" => {
            let n = next(20 * scale * scale);
            let items: Vec<String> = (0..n)
                .map(|k| {
                    format!(
                        r#"{{"sku":"s{k}","qty":{},"cents":{}}}"#,
                        1 + next(150),
                        next(100_000)
                    )
                })
                .collect();
            format!(
                r#"{{"items":[{}],"member":{}}}"#,
                items.join(","),
                next(2) == 0
            )
        }
        "quote" => quote_order(i as usize, (next(40) * scale) as usize),
        _ => format!("request {i}"),
    }
}

/// The issue's correctness measure: every example that compiles serves
/// 1,000 varied requests compiled, and each of those tapes, replayed in
/// the isolate, is answered identically with the same host calls.
#[tokio::test(flavor = "multi_thread")]
async fn every_example_answers_a_recorded_stream_of_1000_varied_requests_compiled_as_the_isolate_does()
 {
    const STREAM: u64 = 1000;
    // `quote` fetches its price list from loopback.
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let (prices, _) = price_list().await;
    let quote_env = format!("PRICES_URL=http://{prices}/prices");
    let prices = prices.to_string();
    for (name, source) in [
        ("quote", include_str!("../../../../examples/js/quote.mjs")),
        ("primes", PRIMES),
        ("pi", PI),
        ("words", include_str!("../../../../examples/js/words.mjs")),
        ("maze", include_str!("../../../../examples/js/maze.mjs")),
        ("stats", include_str!("../../../../examples/js/stats.mjs")),
        ("tally", TALLY),
        ("orders", include_str!("../../../../examples/js/orders.mjs")),
    ] {
        let mut query = vec![("runtime", "js"), ("file_name", "index.mjs")];
        if name == "quote" {
            query.extend([("allow_host", prices.as_str()), ("env", quote_env.as_str())]);
        }
        d.deploy(name, source.as_bytes().to_vec(), &query).await;
        let warm: Vec<String> = (0..30).map(|i| varied(name, 10_000 + i, true)).collect();
        let (_, warming) = until_compiled(&d, name, &warm).await;
        let before = invocations(&d.get_text("/metrics").await, "compiled");
        // Four at a time, as traffic comes.
        let calls = futures::stream::iter(0..STREAM)
            .map(|i| {
                let body = varied(name, i, false);
                let d = &d;
                async move {
                    let (status, answer) = d.call(name, "", &body).await;
                    assert_eq!(status / 100, 2, "{name} {body:?}: {answer}");
                }
            })
            .buffer_unordered(4);
        calls.collect::<Vec<()>>().await;
        let compiled = invocations(&d.get_text("/metrics").await, "compiled") - before;
        assert!(
            compiled >= STREAM * 9 / 10,
            "{name}: only {compiled} of {STREAM} served compiled"
        );
        // Every tape of the stream is written, then replayed in the isolate.
        let all = warming + STREAM;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tapes = d
                .get_json(&format!("/v1/functions/{name}/recordings?limit={all}"))
                .await;
            let listed = tapes["recordings"].as_array().map_or(0, Vec::len) as u64;
            if listed >= all {
                break;
            }
            assert!(Instant::now() < deadline, "{name}: {listed} tapes written");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let resp = d
            .post(&format!(
                "/v1/functions/{name}/replay?against=1&last={STREAM}"
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let report: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(report["replayed"], STREAM, "{name}");
        let results = report["results"].as_array().unwrap();
        assert!(
            results.iter().all(|r| r["tier"] == "js"),
            "{name}: every replay ran in the isolate"
        );
        assert_eq!(
            (report["changed"].as_u64(), report["diverged"].as_u64()),
            (Some(0), Some(0)),
            "{name}: {:#}",
            results
                .iter()
                .find(|r| r["identical"] != true)
                .unwrap_or(&serde_json::Value::Null)
        );
    }
}

/// primes, answering with its secret too.
const KEYED_PRIMES: &str = "export default { async fetch(request, env) { \
    const n = Number(await request.text()); let count = 0; \
    for (let k = 2; k <= n; k++) { let prime = true; \
      for (let d = 2; d * d <= k; d++) { if (k % d === 0) { prime = false; break; } } \
      if (prime) { count++; } } \
    return new Response(count + ' ' + env.API_KEY); } };";

/// A function that binds a secret is compiled like any other, and its
/// compiled code reads the secret's value, the rotated one after a
/// rotation.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_code_reads_a_bound_secret_and_its_rotation() {
    let d = Daemon::start();
    let put = async |value: &'static str| {
        let r = d
            .http
            .put(format!("{}/v1/secrets/API_KEY", d.url))
            .bearer_auth(&d.token)
            .body(value)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    put("k-one").await;
    d.deploy(
        "keyed",
        KEYED_PRIMES.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("secret", "API_KEY"),
        ],
    )
    .await;
    let bodies: Vec<String> = (0..20).map(|i| (3000 + 97 * i).to_string()).collect();
    let (isolate, _) = until_compiled(&d, "keyed", &bodies).await;
    assert!(isolate.values().all(|(_, a)| a.ends_with(" k-one")));
    let (status, answer, id) = invoke(&d, "keyed", "3000").await;
    assert_eq!((status, answer.as_str()), (200, "430 k-one"));
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "compiled", "{tape:#}");

    put("k-two").await;
    let (status, answer, _) = invoke(&d, "keyed", "3000").await;
    assert_eq!((status, answer.as_str()), (200, "430 k-two"));
    let (_, after) = until_compiled(&d, "keyed", &bodies).await;
    let (_, answer, id) = invoke(&d, "keyed", "3000").await;
    assert_eq!(answer, "430 k-two", "compiled again after {after} calls");
    let tape = d.recording_when_written(&id).await;
    assert_eq!(tape["tier"], "compiled", "{tape:#}");
}
