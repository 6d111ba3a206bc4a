//! Running a binding: pull what can run, invoke, settle with the broker
//! (the module above says how, and why each step is as it is).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use hearth_core::{EVENT_HEADER, GatewayAttempt, InvocationId, Request};
use hearth_store::TriggerRow;

use super::{NATS_EVENT, NatsBinding, PULL_WAIT};
use crate::trigger::{Counts, TriggerError};
use crate::worker::{REFUSED_DELAY, Worker, backoff};
use crate::{Dispatch, Dispatched, EventsConfig, Target};

/// The invocation id of `row`'s message at `sequence` of its stream: the
/// same for every delivery of it, so every attempt shares a journal. A
/// UUIDv7 whose time is when it was published.
pub fn message_id(
    row: &TriggerRow,
    stream: &str,
    sequence: u64,
    published_ms: i64,
) -> InvocationId {
    let mut h = blake3::Hasher::new();
    for part in [&row.tenant, &row.function, &row.id, stream] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    h.update(&sequence.to_le_bytes());
    let hash = h.finalize();
    let random: [u8; 10] = hash.as_bytes()[..10]
        .try_into()
        .expect("a blake3 hash has 32 bytes");
    let ms = u64::try_from(published_ms).unwrap_or(0);
    InvocationId(uuid::Builder::from_unix_timestamp_millis(ms, &random).into_uuid())
}

/// What a message's invocation is: a POST of its payload, its subject,
/// stream, sequence and delivery count in `nats-*` headers, its own
/// headers beside (none of the platform's `hearth-*`).
fn request_of(
    message: &async_nats::Message,
    stream: &str,
    sequence: u64,
    delivered: i64,
) -> Request {
    let mut headers = vec![
        (EVENT_HEADER.to_string(), NATS_EVENT.to_string()),
        ("nats-subject".into(), message.subject.to_string()),
        ("nats-stream".into(), stream.to_string()),
        ("nats-sequence".into(), sequence.to_string()),
        ("nats-delivered".into(), delivered.to_string()),
    ];
    let mut content_type = None;
    for (name, values) in message.headers.iter().flat_map(|h| h.iter()) {
        let name = name.to_string().to_ascii_lowercase();
        let ours = name.starts_with("hearth-")
            || headers.iter().any(|(k, _)| *k == name)
            || hearth_core::is_hop_by_hop(&name)
            || http::HeaderName::from_bytes(name.as_bytes()).is_err();
        if ours {
            continue;
        }
        for v in values {
            if http::HeaderValue::from_str(v.as_str()).is_err() {
                continue;
            }
            if name == "content-type" {
                content_type = Some(v.to_string());
            } else {
                headers.push((name.clone(), v.to_string()));
            }
        }
    }
    headers.push((
        "content-type".into(),
        content_type.unwrap_or_else(|| "application/octet-stream".into()),
    ));
    Request {
        method: "POST".into(),
        path: "/".into(),
        query: String::new(),
        headers,
        body: message.payload.clone(),
    }
}

/// A binding's consumer on this member, for as long as the binding is
/// wanted: a connection lost or refused is tried again after a growing
/// pause, said once in the function's log.
pub(crate) async fn consume(
    binding: NatsBinding,
    row: TriggerRow,
    dispatch: Arc<dyn Dispatch>,
    config: EventsConfig,
    worker: Arc<Worker>,
    counts: Arc<Counts>,
) {
    let consumer = Consumer {
        binding,
        row,
        dispatch,
        config,
        worker,
        counts,
    };
    let consumer = Arc::new(consumer);
    let mut pause = Duration::from_secs(1);
    let mut said: Option<String> = None;
    loop {
        let mut consumed = false;
        let Err(error) = consumer.clone().session(&mut said, &mut consumed).await;
        let error = error.to_string();
        // A session that consumed lost its connection: try again soon,
        // however long ago the last failure to connect was.
        if consumed {
            pause = Duration::from_secs(1);
        }
        if said.as_deref() != Some(&error) {
            consumer.dispatch.note(
                &consumer.row.tenant,
                &consumer.row.function,
                "error",
                &format!(
                    "trigger {} cannot consume: {error} (tried again, less often, until it can)",
                    consumer.row.id
                ),
            );
            said = Some(error);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

struct Consumer {
    binding: NatsBinding,
    row: TriggerRow,
    dispatch: Arc<dyn Dispatch>,
    config: EventsConfig,
    worker: Arc<Worker>,
    counts: Arc<Counts>,
}

impl Consumer {
    /// Pulls and runs messages until the connection fails (`consumed`
    /// once it pulls).
    async fn session(
        self: Arc<Self>,
        said: &mut Option<String>,
        consumed: &mut bool,
    ) -> Result<std::convert::Infallible, TriggerError> {
        let b = &self.binding;
        let (tenant, function) = (&self.row.tenant, &self.row.function);
        let js = b.connect(tenant, &*self.dispatch).await?;
        let stream = b.stream(&js).await?;
        let mut consumer: jetstream::consumer::PullConsumer = stream
            .get_or_create_consumer(
                &b.durable(tenant, function),
                b.consumer_config(tenant, function, &self.config),
            )
            .await
            .map_err(|e| TriggerError::Broker(format!("{}: {e}", b.at())))?;
        *consumed = true;
        if said.take().is_some() {
            self.dispatch.note(
                tenant,
                function,
                "info",
                &format!("trigger {} consumes again", self.row.id),
            );
        }
        let in_flight = Arc::new(tokio::sync::Semaphore::new(b.batch as usize));
        let key = (tenant.clone(), function.clone(), self.row.id.clone());
        let mut counted = tokio::time::Instant::now() - Duration::from_secs(60);
        loop {
            // Pull only what can run now: the rest wait in the broker.
            let first = in_flight
                .clone()
                .acquire_owned()
                .await
                .expect("never closed");
            let wanted = 1 + in_flight.available_permits();
            if counted.elapsed() >= Duration::from_secs(2) {
                counted = tokio::time::Instant::now();
                if let Ok(info) = consumer.info().await {
                    self.counts
                        .pending
                        .lock()
                        .insert(key.clone(), info.num_pending);
                }
            }
            let mut messages = consumer
                .batch()
                .max_messages(wanted)
                .expires(PULL_WAIT)
                .messages()
                .await
                .map_err(|e| TriggerError::Broker(format!("{}: {e}", b.at())))?;
            let mut permit = Some(first);
            while let Some(message) = messages.next().await {
                let message =
                    message.map_err(|e| TriggerError::Broker(format!("{}: {e}", b.at())))?;
                let permit = match permit.take() {
                    Some(p) => p,
                    None => in_flight
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("never closed"),
                };
                let this = self.clone();
                tokio::spawn(async move {
                    this.handle(message).await;
                    drop(permit);
                });
            }
        }
    }

    /// Runs one message and settles it with the broker.
    async fn handle(&self, message: jetstream::Message) {
        let Ok(info) = message.info() else {
            // Not a JetStream delivery: nothing to settle.
            return;
        };
        let (stream, sequence, delivered) = (
            info.stream.to_string(),
            info.stream_sequence,
            info.delivered,
        );
        let published_ms =
            i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        let id = message_id(&self.row, &stream, sequence, published_ms);
        let attempts = i64::from(self.binding.attempts);
        let size = message.payload.len();
        if size > self.config.max_message_bytes {
            let why = format!(
                "it is {size} bytes, more than the {} bytes a call's body may be: publish \
                 smaller messages (a reference to the data), or raise --max-body-mib",
                self.config.max_message_bytes
            );
            return self.dead(&message, (&stream, sequence), id, &why).await;
        }
        if delivered > attempts {
            let why = format!(
                "it was delivered {delivered} times, past its {attempts} attempts (a member \
                 running it stopped before it settled)"
            );
            return self.dead(&message, (&stream, sequence), id, &why).await;
        }
        let request = request_of(&message, &stream, sequence, delivered);
        let attempt = GatewayAttempt {
            id,
            retry: delivered > 1,
            queued: true,
        };
        let target = Target {
            tenant: &self.row.tenant,
            function: &self.row.function,
            pin: "live",
        };
        let done = loop {
            let Some(turn) = self.worker.event_turn(&self.row.tenant) else {
                self.hold(&message).await;
                continue;
            };
            let done = self
                .dispatch
                .dispatch(target, request.clone(), attempt)
                .await;
            drop(turn);
            match done {
                // Nothing ran: the message waits here, not counted.
                Dispatched::Refused(_) => self.hold(&message).await,
                done => break done,
            }
        };
        let why = match done {
            Dispatched::Answered(status) if status < 500 => {
                match message.double_ack().await {
                    Ok(()) => {
                        self.counts.done.fetch_add(1, Ordering::Relaxed);
                        self.forget_journal(id).await;
                    }
                    // Redelivered, it follows the journal: not run twice.
                    Err(e) => tracing::warn!(error = %e, %id, "could not acknowledge a message"),
                }
                return;
            }
            // The function was removed (its binding with it): the message
            // goes back to the stream, not to the dead letters.
            Dispatched::Gone(_) => {
                let _ = message.ack_with(AckKind::Nak(None)).await;
                return;
            }
            Dispatched::Answered(status) => format!("it answered {status}"),
            Dispatched::Failed(why) | Dispatched::Refused(why) => why,
        };
        if delivered >= attempts {
            let why = format!("attempt {delivered} of {attempts} failed: {why}");
            return self.dead(&message, (&stream, sequence), id, &why).await;
        }
        let delay = backoff(&self.config, u32::try_from(delivered - 1).unwrap_or(0));
        self.counts.retried.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = message.ack_with(AckKind::Nak(Some(delay))).await {
            tracing::warn!(error = %e, %id, "could not give a failed message back; it is redelivered after its ack wait");
        }
    }

    /// Waits before trying a refused message again, its ack deadline
    /// extended meanwhile.
    async fn hold(&self, message: &jetstream::Message) {
        let _ = message.ack_with(AckKind::Progress).await;
        tokio::time::sleep(REFUSED_DELAY).await;
    }

    /// Settles a message that will not run again: copied to the dead-letter
    /// subject (then acknowledged), or ended in its stream; said in the
    /// function's log.
    async fn dead(
        &self,
        message: &jetstream::Message,
        (stream, sequence): (&str, u64),
        id: InvocationId,
        why: &str,
    ) {
        let (tenant, function) = (&self.row.tenant, &self.row.function);
        let whereto = match &self.binding.dlq {
            Some(dlq) => {
                let mut headers = message.headers.clone().unwrap_or_default();
                headers.insert("Hearth-Error", why);
                headers.insert("Hearth-Function", format!("{tenant}/{function}").as_str());
                headers.insert("Hearth-Invocation-Id", id.to_string().as_str());
                headers.insert("Nats-Original-Subject", message.subject.as_str());
                headers.insert("Nats-Original-Stream", stream);
                headers.insert("Nats-Original-Sequence", sequence.to_string().as_str());
                // The copy must be stored before the original goes.
                let js = jetstream::new(message.context.client());
                let stored = match js
                    .publish_with_headers(dlq.clone(), headers, message.payload.clone())
                    .await
                {
                    Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = stored {
                    self.dispatch.note(
                        tenant,
                        function,
                        "error",
                        &format!(
                            "message {stream}#{sequence} failed for the last time ({why}) but \
                             could not be stored on its dead-letter subject {dlq}: {e}; it is \
                             given back and tried there again"
                        ),
                    );
                    let _ = message
                        .ack_with(AckKind::Nak(Some(backoff(&self.config, 3))))
                        .await;
                    return;
                }
                if let Err(e) = message.double_ack().await {
                    tracing::warn!(error = %e, %id, "could not acknowledge a dead letter; redelivered, it goes to the dead-letter subject again");
                    return;
                }
                format!("copied to {dlq}")
            }
            None => {
                if let Err(e) = message.ack_with(AckKind::Term).await {
                    tracing::warn!(error = %e, %id, "could not end a dead letter; it is redelivered and ended then");
                    return;
                }
                format!("left in stream {stream} (`nats stream get {stream} {sequence}`)")
            }
        };
        self.counts.dead.fetch_add(1, Ordering::Relaxed);
        self.dispatch.note(
            tenant,
            function,
            "error",
            &format!(
                "message {stream}#{sequence} on {} (invocation {id}) is a dead letter: {why}; {whereto}",
                message.subject
            ),
        );
        self.forget_journal(id).await;
    }

    async fn forget_journal(&self, id: InvocationId) {
        let invocation = id.to_string();
        let key = hearth_store::JournalKey {
            tenant: &self.row.tenant,
            function: &self.row.function,
            invocation: &invocation,
        };
        if let Err(e) = self.worker.store.journal_forget(&key).await {
            tracing::warn!(error = %e, invocation, "could not forget a message's journal; the sweep will");
        }
    }
}
