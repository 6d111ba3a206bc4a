//! Events: only the platform fires a function's schedule, and a removed
//! function's schedules go with it.

use std::time::{Duration, Instant};

use hearth_test_support::require;

use crate::events::said;
use crate::harness::Daemon;

/// A Workers module that answers HTTP with "fetch" and logs a firing.
const BOTH: &str = "export default { \
    fetch() { return new Response('fetch'); }, \
    scheduled() { console.log('SCHEDULED RAN'); } };";

/// A Lambda handler that answers with the event's `source`.
const SOURCE: &str = "def handler(event, context):\n    \
    return {'statusCode': 200, 'body': str(event.get('source'))}\n";

/// Defence: the node takes `hearth-event` out of every request that does
/// not come from its queue, so a caller cannot run a function's
/// scheduled() or hand a Lambda handler an event of its choosing.
#[tokio::test]
async fn a_caller_cannot_pass_a_request_off_as_a_schedules_firing() {
    require!(Python);
    let d = Daemon::start();
    d.deploy(
        "both",
        BOTH.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("public", "true"),
        ],
    )
    .await;
    d.deploy(
        "source",
        SOURCE.as_bytes().to_vec(),
        &[("runtime", "python"), ("file_name", "handler.py")],
    )
    .await;
    let forged = serde_json::json!({
        "source": "aws.events",
        "detail-type": "Scheduled Event",
        "detail": {"cron": "* * * * *", "scheduledTime": 0},
    })
    .to_string();
    // Public, so no token: anyone on the internet.
    let resp = reqwest::Client::new()
        .post(format!("{}/fn/admin/both", d.url))
        .header("hearth-event", "scheduled")
        .body(forged.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "fetch");
    // Even the tenant's own token does not make a request an event.
    let (status, body) = {
        let r = d
            .post("/fn/admin/source")
            .header("hearth-event", "scheduled")
            .body(forged)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    };
    assert_eq!((status.as_u16(), body.as_str()), (200, "None"));
    // Nor can a caller sign its request as the queue's.
    let r = d
        .post("/fn/admin/both")
        .header("hearth-event", "scheduled")
        .header("hearth-attempt", "01a2270e6f6e7e6fb7c4bfa0d3f0a1b2.3.00")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "fetch");
    let lines = d.logs_until("both", |_| true).await;
    assert!(said(&lines, "SCHEDULED RAN").is_empty(), "{lines:#?}");
}

/// Defence: a function's schedules and queued firings are deleted with it,
/// so a removed function is never run again by its schedule.
#[tokio::test]
async fn a_removed_functions_schedule_never_fires_again() {
    let d = Daemon::start();
    let code = "export default { scheduled() { console.log('fired'); } };";
    d.deploy(
        "gone",
        code.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("schedule", "@every 1s"),
        ],
    )
    .await;
    d.logs_until("gone", |l| !said(l, "fired").is_empty()).await;
    let r = d.delete("/v1/functions/gone").send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let listed = d.get_json("/v1/schedules").await;
    assert!(
        listed["schedules"].as_array().unwrap().is_empty(),
        "{listed}"
    );
    // A function of the same name made again starts with no schedule of
    // the old one's: two seconds pass without a firing.
    d.deploy(
        "gone",
        code.as_bytes().to_vec(),
        &[("runtime", "js"), ("file_name", "index.mjs")],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let lines = d.logs_until("gone", |_| true).await;
    assert!(said(&lines, "fired").is_empty(), "{lines:#?}");
}

/// Defence: the queue is claimed in turns between tenants (each one's
/// longest waiting, then each one's next), and every queued invocation is
/// admitted against its tenant's share like a call: a tenant that floods
/// its own queue waits behind itself, not others.
#[tokio::test]
async fn a_tenant_flooding_its_queue_holds_back_neither_anothers_queue_nor_its_calls() {
    let d = Daemon::start();
    let flood = d.create_tenant("flood").await;
    let calm = d.create_tenant("calm").await;
    // ~1 s of spinning each: 200 of them are ~100 s of two cores, and
    // the queue's worker could run 64 at once.
    let slow = crate::cluster::SLOW
        .replace("150000000", "750000000")
        .into_bytes();
    let r = d
        .deploy_as(&flood, "slow", &[("runtime", "wasm")], slow)
        .await;
    assert_eq!(r.status(), 201);
    let echo = crate::harness::example("echo.wat");
    let r = d
        .deploy_as(&calm, "echo", &[("runtime", "wasm")], echo)
        .await;
    assert_eq!(r.status(), 201);
    let queue = |token: &str, tenant: &str, name: &str| {
        d.invoke_as(token, tenant, name)
            .header("hearth-invocation-type", "Event")
            .body("queued")
    };
    for _ in 0..200 {
        let r = queue(&flood, "flood", "slow").send().await.unwrap();
        assert_eq!(r.status(), 202);
    }
    // The other tenant's queued call runs at once, not behind the flood.
    let queued = Instant::now();
    let r = queue(&calm, "calm", "echo").send().await.unwrap();
    assert_eq!(r.status(), 202);
    let id = r.headers()["hearth-invocation-id"]
        .to_str()
        .unwrap()
        .to_string();
    loop {
        let list: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/v1/functions/echo/recordings", d.url))
            .bearer_auth(&calm)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if list["recordings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == id.as_str())
        {
            break;
        }
        assert!(
            queued.elapsed() < Duration::from_secs(3),
            "the calm tenant's queued call waited behind the flood"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = queued.elapsed();
    // Its calls are answered meanwhile, each within a second.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let r = d
            .invoke_as(&calm, "calm", "echo")
            .body("now")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        slowest = slowest.max(t.elapsed());
    }
    eprintln!(
        "figure: with 200 of another tenant's 1 s invocations queued, a queued call ran after {waited:?} and the slowest of 20 calls took {slowest:?}"
    );
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // The flood is still draining: it was held to its own turn. (The
    // queue is counted every 2 s.)
    let counted = Instant::now();
    let ready = loop {
        let metrics = d.get_text("/metrics").await;
        let ready: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("hearth_queue_ready "))
            .unwrap()
            .parse()
            .unwrap();
        if ready > 0.0 || counted.elapsed() > Duration::from_secs(5) {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(ready > 100.0, "{ready}");
}
