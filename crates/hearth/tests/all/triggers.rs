//! Queue triggers on NATS JetStream (docs/events.md): a real
//! `nats-server -js` on loopback, a function bound to its stream, each
//! message run once and acknowledged, a failing one redelivered after a
//! backoff and then copied to its dead-letter subject, bindings paused,
//! resumed and removed, and bad bindings refused before anything is
//! deployed.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use hearth_test_support::{TempNats, require};

use crate::events::said;
use crate::harness::{Daemon, error_of, until};

/// A function that keeps each message it gets under `msg/<sequence>`,
/// and fails (throws) on a body of `poison`, noting each attempt under
/// `attempt/<delivery>`.
const KEEPER: &str = "export default { async fetch(request, env) { \
    const body = await request.text(); \
    const seq = request.headers.get('nats-sequence'); \
    const delivered = request.headers.get('nats-delivered'); \
    if (body === 'poison') { \
      await env.hearth.kv.set('attempt/' + delivered, request.headers.get('nats-subject')); \
      console.log('attempt ' + delivered + ' at ' + Date.now()); \
      throw new Error('poisoned'); \
    } \
    await env.hearth.kv.set('msg/' + seq, body + ' ' + request.headers.get('nats-subject') + ' ' + \
      request.headers.get('x-tag') + ' ' + request.headers.get('hearth-event')); \
    return new Response('ok'); } };";

pub(crate) async fn jetstream_of(nats: &TempNats) -> jetstream::Context {
    jetstream::new(async_nats::connect(nats.url()).await.unwrap())
}

pub(crate) async fn add_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
    retention: stream::RetentionPolicy,
) {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        retention,
        ..Default::default()
    })
    .await
    .unwrap();
}

pub(crate) async fn publish(js: &jetstream::Context, subject: &str, body: &str) {
    js.publish(subject.to_string(), body.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

pub(crate) async fn keys(d: &Daemon, name: &str, prefix: &str) -> Vec<String> {
    let v = d
        .get_json(&format!("/v1/functions/{name}/kv?prefix={prefix}"))
        .await;
    v["keys"]
        .as_array()
        .map(|k| k.iter().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

async fn kv(d: &Daemon, name: &str, key: &str) -> String {
    d.get(&format!("/v1/functions/{name}/kv/{key}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn daemon_for(nats: &TempNats) -> Daemon {
    Daemon::start_with(&["--broker-allow", &nats.address()])
}

#[tokio::test]
async fn a_bound_function_runs_each_message_once_and_acknowledges_it() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(
        &js,
        "ORDERS",
        &["orders.>"],
        stream::RetentionPolicy::Limits,
    )
    .await;
    let d = daemon_for(&nats);
    let trigger = format!("{}/ORDERS?subject=orders.>&batch=4", nats.url());
    let deployed = d
        .deploy(
            "keeper",
            KEEPER.as_bytes().to_vec(),
            &[("runtime", "js"), ("trigger", &trigger)],
        )
        .await;
    let triggers = deployed["triggers"].as_array().unwrap();
    assert_eq!(triggers.len(), 1, "{deployed}");
    let id = triggers[0]["id"].as_str().unwrap().to_string();
    assert_eq!(triggers[0]["kind"], "nats");

    // Messages published with a header of their own, and one a
    // publisher dressed as the platform's event: it stays `nats`.
    for i in 0..40 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("X-Tag", format!("t{i}").as_str());
        headers.insert("Hearth-Event", "scheduled");
        js.publish_with_headers(
            format!("orders.eu.{i}"),
            headers,
            format!("order{i}").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    until("40 messages kept", Duration::from_secs(30), async || {
        keys(&d, "keeper", "msg/").await.len() >= 40
    })
    .await;
    assert_eq!(
        kv(&d, "keeper", "msg/7").await,
        "order6 orders.eu.6 t6 nats",
        "body, subject, the message's own header, and the platform's event"
    );

    // Every message acknowledged, none waiting: ran once each (a second
    // run would rewrite its key, not add one; the broker's count says
    // no message went back).
    let consumer_name = format!("hearth_admin_keeper_{id}");
    let mut stream = js.get_stream("ORDERS").await.unwrap();
    until(
        "every message acknowledged",
        Duration::from_secs(10),
        async || {
            let mut c: jetstream::consumer::PullConsumer =
                stream.get_consumer(&consumer_name).await.unwrap();
            let info = c.info().await.unwrap();
            info.num_pending == 0
                && info.num_ack_pending == 0
                && info.ack_floor.stream_sequence == 40
        },
    )
    .await;
    assert_eq!(keys(&d, "keeper", "msg/").await.len(), 40);
    assert_eq!(stream.info().await.unwrap().state.messages, 40);

    // Each message is an invocation with its own id, taped.
    until("40 tapes", Duration::from_secs(10), async || {
        let recordings = d
            .get_json("/v1/functions/keeper/recordings?limit=100")
            .await;
        recordings["recordings"].as_array().map_or(0, Vec::len) >= 40
    })
    .await;

    // `/metrics` counts them.
    let metrics = d
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "hearth_trigger_messages_done 40"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_failing_message_is_redelivered_after_a_backoff_then_copied_to_its_dead_letter_subject() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(&js, "JOBS", &["jobs.>"], stream::RetentionPolicy::WorkQueue).await;
    add_stream(&js, "DEAD", &["dead.jobs"], stream::RetentionPolicy::Limits).await;
    let d = daemon_for(&nats);
    let trigger = format!("{}/JOBS?attempts=3&dlq=dead.jobs", nats.url());
    d.deploy(
        "keeper",
        KEEPER.as_bytes().to_vec(),
        &[("runtime", "js"), ("trigger", &trigger)],
    )
    .await;
    publish(&js, "jobs.a", "poison").await;
    publish(&js, "jobs.b", "fine").await;

    // The good message is not held up behind the bad one.
    until(
        "the good message kept",
        Duration::from_secs(10),
        async || !keys(&d, "keeper", "msg/").await.is_empty(),
    )
    .await;
    let lines = d
        .logs_until("keeper", |l| !said(l, "message JOBS#1").is_empty())
        .await;
    let dead = said(&lines, "message JOBS#1");
    assert!(
        dead[0].contains("is a dead letter: attempt 3 of 3 failed")
            && dead[0].contains("copied to dead.jobs"),
        "{dead:?}"
    );
    // Three attempts, each a delivery of its own.
    assert_eq!(
        keys(&d, "keeper", "attempt/").await,
        ["attempt/1", "attempt/2", "attempt/3"]
    );

    // The copy is stored with why; the original is gone from the work
    // queue (acknowledged once copied).
    let mut dead_stream = js.get_stream("DEAD").await.unwrap();
    assert_eq!(dead_stream.info().await.unwrap().state.messages, 1);
    let copy = dead_stream.get_raw_message(1).await.unwrap();
    assert_eq!(&copy.payload[..], b"poison");
    let headers = copy.headers;
    let error = headers.get("Hearth-Error").unwrap().as_str();
    assert!(error.contains("attempt 3 of 3 failed"), "{error}");
    assert_eq!(
        headers.get("Nats-Original-Subject").unwrap().as_str(),
        "jobs.a"
    );
    until(
        "the work queue empty",
        Duration::from_secs(10),
        async || {
            let mut s = js.get_stream("JOBS").await.unwrap();
            s.info().await.unwrap().state.messages == 0
        },
    )
    .await;

    // The retries waited: the first backoff is 0.5–1 s, the second 1–2 s.
    let poison: Vec<i64> = said(&lines, "attempt ")
        .iter()
        .map(|m| m.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(poison.len(), 3, "{poison:?}");
    // Each attempt taped, under the message's one invocation id.
    until("three failed tapes", Duration::from_secs(10), async || {
        let tapes = d.get_json("/v1/functions/keeper/recordings").await;
        let failed: Vec<&serde_json::Value> = tapes["recordings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["outcome"] != "ok")
            .collect();
        failed.len() == 3 && failed.iter().all(|r| r["id"] == failed[0]["id"])
    })
    .await;
    assert!(poison[1] - poison[0] >= 450, "{poison:?}");
    assert!(poison[2] - poison[1] >= 950, "{poison:?}");
}

#[tokio::test]
async fn a_paused_binding_leaves_messages_in_the_broker_and_a_removed_one_its_consumer_gone() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(
        &js,
        "ORDERS",
        &["orders.>"],
        stream::RetentionPolicy::Limits,
    )
    .await;
    let d = daemon_for(&nats);
    let trigger = format!("{}/ORDERS", nats.url());
    let deployed = d
        .deploy(
            "keeper",
            KEEPER.as_bytes().to_vec(),
            &[("runtime", "js"), ("trigger", &trigger)],
        )
        .await;
    let id = deployed["triggers"][0]["id"].as_str().unwrap().to_string();
    publish(&js, "orders.1", "one").await;
    until(
        "the first message kept",
        Duration::from_secs(10),
        async || keys(&d, "keeper", "msg/").await.len() == 1,
    )
    .await;

    let paused = d
        .post(&format!("/v1/functions/keeper/triggers/{id}/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), 200);
    let listed = d.get_json("/v1/triggers").await;
    assert_eq!(listed["triggers"][0]["paused"], true, "{listed}");
    // The member stops its consumer at its next look at the bindings
    // (every 2 s); then a message waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    publish(&js, "orders.2", "two").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(keys(&d, "keeper", "msg/").await.len(), 1, "paused");

    d.post(&format!("/v1/functions/keeper/triggers/{id}/resume"))
        .send()
        .await
        .unwrap();
    until(
        "the waiting message kept",
        Duration::from_secs(10),
        async || keys(&d, "keeper", "msg/").await.len() == 2,
    )
    .await;

    // A redeploy without `trigger=` keeps the binding; `trigger=none`
    // removes it, and its consumer on the broker.
    d.deploy("keeper", KEEPER.as_bytes().to_vec(), &[("runtime", "js")])
        .await;
    assert_eq!(
        d.get_json("/v1/triggers").await["triggers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    d.deploy(
        "keeper",
        KEEPER.as_bytes().to_vec(),
        &[("runtime", "js"), ("trigger", "none")],
    )
    .await;
    assert!(
        d.get_json("/v1/triggers").await["triggers"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let consumer = format!("hearth_admin_keeper_{id}");
    until(
        "the consumer deleted",
        Duration::from_secs(10),
        async || {
            let s = js.get_stream("ORDERS").await.unwrap();
            s.get_consumer::<jetstream::consumer::pull::Config>(&consumer)
                .await
                .is_err()
        },
    )
    .await;
}

#[tokio::test]
async fn bad_bindings_are_refused_before_anything_is_deployed() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(&js, "WORK", &["work.>"], stream::RetentionPolicy::WorkQueue).await;
    add_stream(&js, "LOGS", &["logs.>"], stream::RetentionPolicy::Limits).await;
    // A port nothing listens on, allowed like the broker's.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Daemon::start_with(&[
        "--broker-allow",
        &format!("{},127.0.0.1:{closed}", nats.address()),
    ]);
    let url = nats.url();
    for (trigger, status, says) in [
        (
            format!("nats://127.0.0.1:{closed}/LOGS"),
            502,
            "cannot connect to NATS at 127.0.0.1",
        ),
        (
            format!("{url}/NOPE"),
            502,
            "has no JetStream stream \"NOPE\"",
        ),
        (
            format!("{url}/WORK"),
            400,
            "would be lost: give the binding a dead-letter subject",
        ),
        (
            format!("{url}/LOGS?dlq=dead.nowhere"),
            502,
            "no stream on NATS at 127.0.0.1",
        ),
        (
            format!("{url}/LOGS?dlq=logs.dead"),
            400,
            "delivered to the function again",
        ),
        (
            format!("{url}/LOGS?subject=other.>"),
            502,
            "refused the binding's consumer",
        ),
        (format!("{url}/LOGS?batch=500"), 400, "batch is 1 to 64"),
        (
            "kafka://b/T".to_string(),
            400,
            "not a broker this Hearth binds to",
        ),
    ] {
        let resp = d
            .deploy_raw(
                "keeper",
                KEEPER.as_bytes().to_vec(),
                &[("runtime", "js"), ("trigger", &trigger)],
            )
            .await;
        let (got, _, message) = error_of(resp).await;
        assert_eq!(got, status, "{trigger}: {message}");
        assert!(message.contains(says), "{trigger}: {message}");
    }
    // Nothing was deployed.
    let resp = d.get("/v1/functions/keeper").send().await.unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn a_message_bigger_than_the_body_limit_is_a_dead_letter_at_once() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(
        &js,
        "ORDERS",
        &["orders.>"],
        stream::RetentionPolicy::Limits,
    )
    .await;
    let d = Daemon::start_with(&[
        "--broker-allow",
        &nats.address(),
        "--max-body-bytes",
        "1000",
    ]);
    let trigger = format!("{}/ORDERS", nats.url());
    d.deploy(
        "keeper",
        KEEPER.as_bytes().to_vec(),
        &[("runtime", "js"), ("trigger", &trigger)],
    )
    .await;
    publish(&js, "orders.big", &"x".repeat(2000)).await;
    publish(&js, "orders.small", "small").await;
    let lines = d
        .logs_until("keeper", |l| !said(l, "message ORDERS#1").is_empty())
        .await;
    let dead = &said(&lines, "message ORDERS#1")[0];
    assert!(
        dead.contains("it is 2000 bytes, more than the 1000 bytes a call's body may be")
            && dead.contains("left in stream ORDERS"),
        "{dead}"
    );
    until(
        "the small message kept",
        Duration::from_secs(10),
        async || keys(&d, "keeper", "msg/").await == ["msg/2"],
    )
    .await;
}
