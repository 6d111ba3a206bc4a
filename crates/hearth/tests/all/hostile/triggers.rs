//! Broker bindings against a tenant: the daemon connects to a broker on a
//! tenant's behalf, so only brokers the operator allows; and a binding
//! holds no more of its messages than its batch, whatever its stream
//! holds (docs/security.md).

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use hearth_test_support::{TempNats, require};

use crate::harness::{Daemon, error_of, until};
use crate::triggers::{add_stream, jetstream_of, keys};

const ECHO: &str = "export default { async fetch(request, env) { \
    await env.hearth.kv.set('msg/' + request.headers.get('nats-sequence'), 'x'); \
    return new Response('ok'); } };";

#[tokio::test]
async fn a_tenant_cannot_bind_to_a_broker_the_operator_did_not_allow() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    add_stream(
        &jetstream_of(&nats).await,
        "S",
        &["s.>"],
        stream::RetentionPolicy::Limits,
    )
    .await;
    let trigger = format!("{}/S", nats.url());
    // No brokers allowed (the default), and `*` (any public broker):
    // a broker on this machine is neither's.
    for (args, says) in [
        (
            vec![],
            "allows only the brokers in --broker-allow (now: none)",
        ),
        (
            vec!["--broker-allow", "*"],
            "is on this machine or a private network",
        ),
    ] {
        let d = Daemon::start_with(&args);
        let resp = d
            .deploy_raw(
                "f",
                ECHO.as_bytes().to_vec(),
                &[("runtime", "js"), ("trigger", &trigger)],
            )
            .await;
        let (status, _, message) = error_of(resp).await;
        assert_eq!(status, 403, "{args:?}: {message}");
        assert!(message.contains(says), "{args:?}: {message}");
    }
    // Listed by name, it is allowed.
    let d = Daemon::start_with(&["--broker-allow", &nats.address()]);
    d.deploy(
        "f",
        ECHO.as_bytes().to_vec(),
        &[("runtime", "js"), ("trigger", &trigger)],
    )
    .await;
}

#[tokio::test]
async fn a_binding_holds_no_more_messages_than_its_batch() {
    require!(Nats);
    let nats = TempNats::start().unwrap();
    let js = jetstream_of(&nats).await;
    add_stream(&js, "S", &["s.>"], stream::RetentionPolicy::Limits).await;
    let d = Daemon::start_with(&["--broker-allow", &nats.address()]);
    let slow = "export default { async fetch(request, env) { \
        await new Promise((r) => setTimeout(r, 200)); \
        await env.hearth.kv.set('msg/' + request.headers.get('nats-sequence'), 'x'); \
        return new Response('ok'); } };";
    let deployed = d
        .deploy(
            "slow",
            slow.as_bytes().to_vec(),
            &[
                ("runtime", "js"),
                ("trigger", &format!("{}/S?batch=3", nats.url())),
            ],
        )
        .await;
    let id = deployed["triggers"][0]["id"].as_str().unwrap().to_string();
    for i in 0..30 {
        js.publish(format!("s.{i}"), "m".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // The daemon holds (has been handed and not yet settled) at most its
    // batch; the rest wait in the broker.
    let consumer = format!("hearth_admin_slow_{id}");
    let stream = js.get_stream("S").await.unwrap();
    let mut most = 0;
    let mut pending_seen = 0;
    until("every message run", Duration::from_secs(60), async || {
        let mut c: jetstream::consumer::PullConsumer =
            stream.get_consumer(&consumer).await.unwrap();
        let info = c.info().await.unwrap();
        most = most.max(info.num_ack_pending);
        pending_seen = pending_seen.max(info.num_pending);
        keys(&d, "slow", "msg/").await.len() == 30
    })
    .await;
    assert!(
        most <= 3,
        "held {most} messages at once, past its batch of 3"
    );
    assert!(
        pending_seen >= 20,
        "messages waited in the broker ({pending_seen} at most)"
    );
}
