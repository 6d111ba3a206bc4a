//! Events: only the platform fires a function's schedule, and a removed
//! function's schedules go with it.

use std::time::Duration;

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
