//! Triggers on NATS JetStream: a durable pull consumer per binding.
//!
//! `nats://HOST[:PORT]/STREAM?subject=…&batch=…&attempts=…&dlq=…&credentials=…&deliver=all|new`
//!
//! - **Consume.** Each member that runs events pulls from the binding's
//!   durable consumer (one per binding, shared by every member, so the
//!   broker hands each message to one of them), at most `batch` messages
//!   in flight per member, and pulls again only as they finish: a slow
//!   function slows its pulls, and messages wait in the broker, not in
//!   the daemon. Each message takes a slot among the member's event
//!   invocations and its tenant's share of them (`worker.rs`), then runs
//!   as a call of the function's `live` alias under the tenant's
//!   concurrency and memory like any call; refused there (the tenant at
//!   its limit), it is held, its ack deadline extended, and tried again
//!   without counting an attempt.
//! - **Settle.** Acknowledged after the function answers below 500;
//!   otherwise given back (`NAK`) to be redelivered after the queue's
//!   backoff (doubling, jittered); after its last attempt, copied to the
//!   `dlq` subject (stored by a stream: checked at deploy) with why in
//!   `Hearth-Error`, then acknowledged, or without a `dlq` ended (`TERM`)
//!   and left in its stream (whose retention keeps it: checked at
//!   deploy). A message bigger than the node's body limit is not run: it
//!   is a dead letter at once, saying so.
//! - **Once.** A message's invocation id is derived from its binding and
//!   stream sequence, and its attempts journal their KV and HTTP answers
//!   like the queue's (`worker.rs`): a redelivery after a member died
//!   mid-run, or after a failure, follows the journal, so effects made
//!   before are not made again. The journal is forgotten once the
//!   message is settled.
//!
//! The broker is the operator's to allow (`--broker-allow`): the daemon
//! connects to what a tenant names, so an unlisted internal address is
//! refused, the connection goes to the address that was checked, and
//! servers the broker advertises are ignored.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures::StreamExt;
use hearth_core::{EVENT_HEADER, GatewayAttempt, InvocationId, Request};
use hearth_store::TriggerRow;
use serde::{Deserialize, Serialize};

use crate::trigger::{Counts, TriggerError};
use crate::worker::{REFUSED_DELAY, Worker, backoff};
use crate::{Dispatch, Dispatched, EventsConfig, Target};

/// The most messages one binding has in flight on one member.
pub const MAX_BATCH: u32 = 64;
const DEFAULT_BATCH: u32 = 10;
/// The most attempts a binding may give a message.
pub const MAX_ATTEMPTS: u32 = 100;
const DEFAULT_ATTEMPTS: u32 = 3;
const DEFAULT_PORT: u16 = 4222;
/// How long a pull waits for messages before asking again (and how soon
/// a paused or removed binding's task notices it is stopped).
const PULL_WAIT: Duration = Duration::from_secs(2);
/// How long connecting, and each request to the broker, may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);
/// The `hearth-event` value of a message's invocation.
pub const NATS_EVENT: &str = "nats";

/// A binding to a JetStream stream (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsBinding {
    pub host: String,
    pub port: u16,
    pub stream: String,
    /// Only the stream's messages on these subjects (a filter, wildcards
    /// allowed); all of them if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Messages in flight at once, per member.
    pub batch: u32,
    /// Attempts per message, the first included.
    pub attempts: u32,
    /// Where a message goes after its last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dlq: Option<String>,
    /// The tenant's secret holding the broker's credentials: a token, or
    /// `user:password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
    /// Start from messages published after the binding was made, rather
    /// than every message the stream holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deliver_new: bool,
}

fn invalid(s: &str, why: impl std::fmt::Display) -> TriggerError {
    TriggerError::Invalid(format!("trigger {s:?}: {why}"))
}

/// A stream, consumer or secret name: what NATS accepts in a name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A subject: dot-separated tokens of printable characters, `*` a whole
/// token, `>` the last (wildcards only where `wildcards`).
fn valid_subject(subject: &str, wildcards: bool) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    subject.len() <= 256
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_graphic())
                && match *t {
                    "*" => wildcards,
                    ">" => wildcards && i + 1 == tokens.len(),
                    _ => !t.contains(['*', '>']),
                }
        })
}

/// Whether `subject` is one a consumer filtered by `filter` delivers.
fn matches(filter: &str, subject: &str) -> bool {
    let (mut f, mut s) = (filter.split('.'), subject.split('.'));
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

impl FromStr for NatsBinding {
    type Err = TriggerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url = url::Url::parse(s).map_err(|e| invalid(s, e))?;
        if url.scheme() != "nats" {
            return Err(invalid(s, "a NATS binding's URL begins nats://"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                s,
                "credentials in the URL would be kept and shown in the clear: keep them in a \
                 secret (`hearth secret set NAME`, a token or user:password) and name it \
                 with credentials=NAME",
            ));
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid(s, "it names no host: nats://HOST:PORT/STREAM"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let stream = url.path().trim_start_matches('/');
        if !valid_name(stream) {
            return Err(invalid(
                s,
                "its path should be the stream's name (letters, digits, - and _): \
                 nats://HOST:PORT/STREAM",
            ));
        }
        let mut b = NatsBinding {
            host,
            port: url.port().unwrap_or(DEFAULT_PORT),
            stream: stream.to_string(),
            subject: None,
            batch: DEFAULT_BATCH,
            attempts: DEFAULT_ATTEMPTS,
            dlq: None,
            credentials: None,
            deliver_new: false,
        };
        let number = |k: &str, v: &str, max: u32| match v.parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(invalid(s, format!("{k} is 1 to {max}, not {v:?}"))),
        };
        for (k, v) in url.query_pairs() {
            match &*k {
                "subject" if valid_subject(&v, true) => b.subject = Some(v.into()),
                "subject" => {
                    return Err(invalid(
                        s,
                        format!("subject {v:?} is not a NATS subject (`orders.>`, `orders.*.eu`)"),
                    ));
                }
                "batch" => b.batch = number(&k, &v, MAX_BATCH)?,
                "attempts" => b.attempts = number(&k, &v, MAX_ATTEMPTS)?,
                "dlq" if valid_subject(&v, false) => b.dlq = Some(v.into()),
                "dlq" => {
                    return Err(invalid(
                        s,
                        format!("dlq {v:?} is not a subject to publish to (no wildcards)"),
                    ));
                }
                "credentials" if valid_name(&v) => b.credentials = Some(v.into()),
                "credentials" => {
                    return Err(invalid(
                        s,
                        format!("credentials {v:?} is not a secret's name"),
                    ));
                }
                "deliver" => {
                    b.deliver_new = match &*v {
                        "all" => false,
                        "new" => true,
                        _ => return Err(invalid(s, format!("deliver is all or new, not {v:?}"))),
                    }
                }
                other => {
                    return Err(invalid(
                        s,
                        format!(
                            "{other:?} is not a setting of a NATS binding \
                             (subject, batch, attempts, dlq, credentials, deliver)"
                        ),
                    ));
                }
            }
        }
        Ok(b)
    }
}

impl NatsBinding {
    /// What names the binding: where it reads from. A redeploy that
    /// changes only how (batch, attempts, dlq, credentials) keeps it, and
    /// keeps its consumer, its pause and its place in the stream.
    pub fn id(&self) -> String {
        let mut h = blake3::Hasher::new();
        for part in [
            "nats",
            &self.host,
            &self.port.to_string(),
            &self.stream,
            self.subject.as_deref().unwrap_or(""),
        ] {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex()[..12].to_string()
    }

    /// The durable consumer's name: its tenant, function and id, in what
    /// a NATS name may hold.
    pub fn durable(&self, tenant: &str, function: &str) -> String {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        format!("hearth_{}_{}_{}", clean(tenant), clean(function), self.id())
    }

    fn at(&self) -> String {
        format!("NATS at {}:{}", self.host, self.port)
    }

    async fn connect(
        &self,
        tenant: &str,
        dispatch: &dyn Dispatch,
    ) -> Result<jetstream::Context, TriggerError> {
        let addr = dispatch
            .broker(&self.host, self.port)
            .await
            .map_err(TriggerError::NotAllowed)?;
        let mut options = async_nats::ConnectOptions::new()
            .name("hearth")
            .connection_timeout(BROKER_TIMEOUT)
            .request_timeout(Some(BROKER_TIMEOUT))
            // Only the address that was checked: a broker's advertised
            // cluster could name anything.
            .ignore_discovered_servers()
            .max_reconnects(Some(3));
        if let Some(secret) = &self.credentials {
            let value = dispatch
                .secret(tenant, secret)
                .await
                .map_err(TriggerError::Broker)?;
            options = match value.split_once(':') {
                Some((user, password)) => options.user_and_password(user.into(), password.into()),
                None => options.token(value),
            };
        }
        let client = options
            .connect(format!("nats://{addr}"))
            .await
            .map_err(|e| {
                TriggerError::Broker(format!(
                    "cannot connect to {} ({addr}): {e}; is the server running, and are the \
                 binding's credentials right?",
                    self.at()
                ))
            })?;
        Ok(jetstream::ContextBuilder::new()
            .timeout(BROKER_TIMEOUT)
            .build(client))
    }

    async fn stream(
        &self,
        js: &jetstream::Context,
    ) -> Result<jetstream::stream::Stream, TriggerError> {
        js.get_stream(&self.stream).await.map_err(|e| {
            TriggerError::Broker(format!(
                "{} has no JetStream stream {:?} ({e}): create it (`nats stream add {} \
                 --subjects …`), or check the server runs JetStream (`nats-server -js`)",
                self.at(),
                self.stream,
                self.stream
            ))
        })
    }

    fn consumer_config(&self, tenant: &str, function: &str, config: &EventsConfig) -> pull::Config {
        pull::Config {
            durable_name: Some(self.durable(tenant, function)),
            description: Some(format!("Hearth: invokes {tenant}/{function}")),
            deliver_policy: if self.deliver_new {
                jetstream::consumer::DeliverPolicy::New
            } else {
                jetstream::consumer::DeliverPolicy::All
            },
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            // Past the longest an invocation may run: only a member that
            // died loses a message to redelivery.
            ack_wait: config.lease,
            // Hearth counts attempts and settles every message itself.
            max_deliver: -1,
            filter_subject: self.subject.clone().unwrap_or_default(),
            ..Default::default()
        }
    }

    pub(crate) async fn check(
        &self,
        tenant: &str,
        function: &str,
        dispatch: &dyn Dispatch,
        config: &EventsConfig,
    ) -> Result<(), TriggerError> {
        let js = self.connect(tenant, dispatch).await?;
        let mut stream = self.stream(&js).await?;
        let info = stream
            .info()
            .await
            .map_err(|e| TriggerError::Broker(format!("{}: {e}", self.at())))?
            .clone();
        match &self.dlq {
            None if info.config.retention != jetstream::stream::RetentionPolicy::Limits => {
                return Err(TriggerError::Invalid(format!(
                    "stream {:?} keeps a message only until it is acknowledged ({:?} \
                     retention), so one that failed every attempt would be lost: give the \
                     binding a dead-letter subject (dlq=SUBJECT, stored by a stream)",
                    self.stream, info.config.retention
                )));
            }
            None => {}
            Some(dlq) => {
                let home = js.stream_by_subject(dlq).await.map_err(|e| {
                    TriggerError::Broker(format!(
                        "no stream on {} stores the dead-letter subject {dlq:?} ({e}): add it \
                         to one (`nats stream add DEAD --subjects {dlq}`)",
                        self.at()
                    ))
                })?;
                let filter = self.subject.as_deref().unwrap_or(">");
                if home == self.stream && matches(filter, dlq) {
                    return Err(TriggerError::Invalid(format!(
                        "dead letters on {dlq:?} would be stored in stream {:?} and delivered \
                         to the function again: give them a subject the binding does not read",
                        self.stream
                    )));
                }
            }
        }
        stream
            .create_consumer(self.consumer_config(tenant, function, config))
            .await
            .map_err(|e| {
                TriggerError::Broker(format!(
                    "{} refused the binding's consumer on stream {:?}: {e}{}",
                    self.at(),
                    self.stream,
                    if self.subject.is_some() {
                        " (is the subject one the stream stores? a work-queue stream also \
                         refuses a second consumer on the same subjects)"
                    } else {
                        ""
                    }
                ))
            })?;
        Ok(())
    }

    /// Deletes the binding's consumer (its place in the stream): the
    /// binding is gone.
    pub(crate) async fn forget(&self, tenant: &str, function: &str, dispatch: &dyn Dispatch) {
        let durable = self.durable(tenant, function);
        let gone = async {
            let js = self.connect(tenant, dispatch).await?;
            let stream = self.stream(&js).await?;
            stream
                .delete_consumer(&durable)
                .await
                .map_err(|e| TriggerError::Broker(e.to_string()))
        };
        match gone.await {
            Ok(_) => tracing::info!(
                tenant,
                function,
                durable,
                "removed binding's consumer deleted"
            ),
            Err(e) => tracing::info!(
                tenant, function, durable, error = %e,
                "could not delete a removed binding's consumer; delete it on the broker"
            ),
        }
    }
}

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
        let error = match consumer.clone().session(&mut said).await {
            Ok(()) => continue,
            Err(e) => e.to_string(),
        };
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
    /// Pulls and runs messages until the connection fails.
    async fn session(self: Arc<Self>, said: &mut Option<String>) -> Result<(), TriggerError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_parses_with_its_defaults_and_names_what_is_wrong() {
        let b: NatsBinding =
            "nats://127.0.0.1:4333/ORDERS?subject=orders.>&batch=5&dlq=dead.orders"
                .parse()
                .unwrap();
        assert_eq!(
            (
                b.host.as_str(),
                b.port,
                b.stream.as_str(),
                b.batch,
                b.attempts
            ),
            ("127.0.0.1", 4333, "ORDERS", 5, DEFAULT_ATTEMPTS)
        );
        assert_eq!(b.subject.as_deref(), Some("orders.>"));
        assert_eq!(b.dlq.as_deref(), Some("dead.orders"));
        let plain: NatsBinding = "nats://broker/S".parse().unwrap();
        assert_eq!(
            (plain.port, plain.batch, plain.deliver_new),
            (DEFAULT_PORT, DEFAULT_BATCH, false)
        );

        for (bad, says) in [
            ("nats://u:p@broker/S", "secret"),
            ("nats://broker/", "stream's name"),
            ("nats://broker/a/b", "stream's name"),
            ("nats://broker/S?batch=0", "batch is 1 to 64"),
            ("nats://broker/S?batch=65", "batch is 1 to 64"),
            ("nats://broker/S?attempts=x", "attempts is 1 to 100"),
            ("nats://broker/S?subject=a..b", "not a NATS subject"),
            ("nats://broker/S?subject=a.>.b", "not a NATS subject"),
            ("nats://broker/S?dlq=dead.*", "no wildcards"),
            ("nats://broker/S?deliver=last", "all or new"),
            ("nats://broker/S?credentials=a.b", "secret's name"),
            ("nats://broker/S?batchsize=3", "not a setting"),
        ] {
            let e = bad.parse::<NatsBinding>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_id_names_where_a_binding_reads_not_how() {
        let a: NatsBinding = "nats://b/S?subject=x.>".parse().unwrap();
        let tuned: NatsBinding = "nats://b/S?subject=x.>&batch=3&attempts=9&dlq=d"
            .parse()
            .unwrap();
        let other: NatsBinding = "nats://b/S?subject=y.>".parse().unwrap();
        assert_eq!(a.id(), tuned.id());
        assert_ne!(a.id(), other.id());
        let durable = a.durable("acme", "re.size");
        assert!(durable.starts_with("hearth_acme_re_size_"), "{durable}");
        assert!(valid_name(&durable) || durable.len() > 64);
    }

    #[test]
    fn subject_filters_match_as_nats_does() {
        assert!(matches(">", "a.b"));
        assert!(matches("a.>", "a.b.c"));
        assert!(!matches("a.>", "a"));
        assert!(matches("a.*.c", "a.b.c"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.c"));
    }
}
