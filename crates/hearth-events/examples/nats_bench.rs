//! What bench/events.py's `nats` part measures Hearth's JetStream
//! triggers against: a raw pull consumer, as `nats bench` consumes
//! (async-nats, the client Hearth uses, with the same batch and an ack
//! per message), and the tools that feed and watch a stream.
//!
//! ```text
//! nats_bench publish URL STREAM SUBJECT N [PER_SEC]   # make the stream (limits), publish N
//!                                                     # bodies holding their publish time (ms)
//! nats_bench raw URL STREAM N BATCH [double]          # consume N and ack each: msgs/s
//!                                                     # (double: each ack confirmed)
//! nats_bench drain URL STREAM CONSUMER N              # wait for CONSUMER to ack N: msgs/s
//! ```

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let js = jetstream::new(async_nats::connect(arg(1)).await.expect("connect"));
    match arg(0).as_str() {
        "publish" => {
            let (name, subject) = (arg(2), arg(3));
            let n: u64 = arg(4).parse().expect("N");
            let per_sec: Option<f64> = args.get(5).map(|r| r.parse().expect("PER_SEC"));
            js.get_or_create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![format!("{subject}.>"), subject.clone()],
                ..Default::default()
            })
            .await
            .expect("stream");
            let start = Instant::now();
            let mut acks = Vec::new();
            for i in 0..n {
                if let Some(rate) = per_sec {
                    let due = start + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                acks.push(
                    js.publish(subject.clone(), now_ms().to_string().into())
                        .await
                        .expect("publish"),
                );
                if acks.len() >= 256 {
                    for a in acks.drain(..) {
                        a.await.expect("stored");
                    }
                }
            }
            for a in acks {
                a.await.expect("stored");
            }
        }
        "raw" => {
            let n: u64 = arg(3).parse().expect("N");
            let batch: usize = arg(4).parse().expect("BATCH");
            // `double`: wait for the server to confirm each ack, as Hearth
            // does before it forgets a message's journal.
            let double = arg(5) == "double";
            let stream = js.get_stream(arg(2)).await.expect("stream");
            let raw: consumer::PullConsumer = stream
                .get_or_create_consumer(
                    &format!("raw{}", arg(5)),
                    consumer::pull::Config {
                        durable_name: Some(format!("raw{}", arg(5))),
                        ack_policy: consumer::AckPolicy::Explicit,
                        ..Default::default()
                    },
                )
                .await
                .expect("consumer");
            let mut done = 0u64;
            let mut start = None;
            while done < n {
                let mut messages = raw
                    .batch()
                    .max_messages(batch)
                    .expires(Duration::from_secs(2))
                    .messages()
                    .await
                    .expect("pull");
                while let Some(m) = messages.next().await {
                    let m = m.expect("message");
                    start.get_or_insert_with(Instant::now);
                    if double {
                        m.double_ack().await.expect("ack");
                    } else {
                        m.ack().await.expect("ack");
                    }
                    done += 1;
                }
            }
            let secs = start.expect("consumed").elapsed().as_secs_f64();
            println!("{:.0}", n as f64 / secs);
        }
        "drain" => {
            let n: u64 = arg(4).parse().expect("N");
            let stream = js.get_stream(arg(2)).await.expect("stream");
            let mut first: Option<(Instant, u64)> = None;
            loop {
                let mut c: consumer::PullConsumer = match stream.get_consumer(&arg(3)).await {
                    Ok(c) => c,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let acked = c.info().await.expect("info").ack_floor.stream_sequence;
                if acked > 0 && first.is_none() {
                    first = Some((Instant::now(), acked));
                }
                if acked >= n {
                    let (t, from) = first.expect("seen");
                    println!("{:.0}", (n - from) as f64 / t.elapsed().as_secs_f64());
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        other => panic!("unknown command {other:?}: publish, raw or drain"),
    }
}
