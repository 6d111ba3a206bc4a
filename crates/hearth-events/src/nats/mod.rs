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
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use serde::{Deserialize, Serialize};

use crate::trigger::TriggerError;
use crate::{Dispatch, EventsConfig};

mod consume;

pub(crate) use consume::consume;
pub use consume::message_id;

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

    pub(crate) fn at(&self) -> String {
        format!("NATS at {}:{}", self.host, self.port)
    }

    pub(crate) async fn connect(
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

    pub(crate) async fn stream(
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

    pub(crate) fn consumer_config(
        &self,
        tenant: &str,
        function: &str,
        config: &EventsConfig,
    ) -> pull::Config {
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
