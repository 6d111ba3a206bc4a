//! How this Hearth runs its queued invocations (`hearth_events`): on its
//! own node, or, on a gateway, placed on a node as a client's call would
//! be, with the queue's attempt signed so the node knows the invocation
//! is the platform's (no client token is needed, and its `hearth-event`
//! header stands).

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use hearth_cluster::GatewayError;
use hearth_cluster::forward::{Outgoing, OutgoingBody};
use hearth_core::{GatewayAttempt, Request};
use hearth_events::{Dispatch, Dispatched, Target};
use hearth_node::{NodeError, Pin};
use hearth_store::QueueDepth;

use crate::AppState;

pub(crate) struct ApiDispatch(pub Weak<AppState>);

#[async_trait::async_trait]
impl Dispatch for ApiDispatch {
    async fn dispatch(
        &self,
        target: Target<'_>,
        request: Request,
        attempt: GatewayAttempt,
    ) -> Dispatched {
        let Some(s) = self.0.upgrade() else {
            return Dispatched::Refused("this Hearth is stopping".into());
        };
        let pin = match target.pin.parse::<u32>() {
            Ok(n) => Pin::Version(n),
            Err(_) => Pin::Alias(target.pin),
        };
        let function = match s.node.resolve(target.tenant, target.function, pin).await {
            Ok(f) => f,
            Err(
                e @ (NodeError::NotFound { .. }
                | NodeError::NoSuchVersion { .. }
                | NodeError::NoSuchAlias { .. }),
            ) => return Dispatched::Gone(e.to_string()),
            Err(e) => return Dispatched::Refused(e.to_string()),
        };
        match &s.gateway {
            Some(g) => forward(g, &function, request, attempt).await,
            None => match s.node.invoke(&function, request, Some(attempt)).await {
                Ok(outcome) => match outcome.result {
                    Ok(resp) => Dispatched::Answered(resp.status),
                    Err(e) if e.is_refusal() => Dispatched::Refused(e.to_string()),
                    Err(e) => Dispatched::Failed(format!("{} ({})", e, e.kind())),
                },
                Err(e) => Dispatched::Refused(e.to_string()),
            },
        }
    }

    fn note(&self, tenant: &str, function: &str, level: &str, message: &str) {
        if let Some(s) = self.0.upgrade() {
            s.node.note(tenant, function, "", level, message);
        }
    }

    async fn broker(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        let allow = self
            .0
            .upgrade()
            .and_then(|s| s.config.events.as_ref().map(|e| e.broker_allow.clone()))
            .unwrap_or_default();
        broker_address(&allow, host, port).await
    }

    async fn secret(&self, tenant: &str, name: &str) -> Result<String, String> {
        let s = self
            .0
            .upgrade()
            .ok_or_else(|| "this Hearth is stopping".to_string())?;
        s.node
            .secret_value(tenant, name)
            .await
            .map_err(|e| format!("the binding's credentials: {e}"))
    }
}

/// Where a binding may reach broker `host:port`: a broker the operator
/// listed (`--broker-allow host:port`) at whatever address it resolves
/// to, or with `*` any broker at a public address; nothing else. The
/// daemon connects on a tenant's behalf, so an unlisted name that
/// resolves to this machine or its networks would reach what functions
/// may not.
pub(crate) async fn broker_address(
    allow: &[String],
    host: &str,
    port: u16,
) -> Result<SocketAddr, String> {
    let named = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
    .to_ascii_lowercase();
    let listed = allow.contains(&named);
    if !listed && !allow.iter().any(|a| a == "*") {
        let allowed = if allow.is_empty() {
            "none".to_string()
        } else {
            allow.join(", ")
        };
        return Err(format!(
            "this Hearth does not bind functions to the broker {named}: its operator allows \
             only the brokers in --broker-allow (now: {allowed}); ask them to add it"
        ));
    }
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve the broker {host}: {e}"))?;
    if listed {
        return addrs
            .next()
            .ok_or_else(|| format!("the broker {host} resolves to no address"));
    }
    addrs
        .find(|a| !hearth_host::is_internal(a.ip()))
        .ok_or_else(|| {
            format!(
                "the broker {named} is on this machine or a private network, which --broker-allow                  `*` does not reach: the operator lists it by name (--broker-allow {named})"
            )
        })
}

/// The queue's figures in `/metrics`, as last counted (every 2 s): in
/// sum, and by function if the operator opted into series that name
/// functions.
pub(crate) fn count_in_metrics(events: &hearth_events::Events, metrics: &hearth_node::Metrics) {
    type Figure = fn(&QueueDepth, i64) -> i64;
    let age = |d: &QueueDepth, now: i64| d.oldest_ms.map_or(0, |t| (now - t).max(0) / 1000);
    let figures: [(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Figure,
        bool,
    ); 4] = [
        (
            "queue_ready",
            "function_queue_ready",
            "Invocations waiting in the queue or running from it (schedules' firings, async calls)",
            "Invocations waiting in the queue or running from it, by function",
            |d, _| d.ready as i64,
            false,
        ),
        (
            "queue_retrying",
            "function_queue_retrying",
            "Queued invocations that failed at least once and wait to be tried again",
            "Queued invocations that failed at least once, by function",
            |d, _| d.retrying as i64,
            false,
        ),
        (
            "queue_dead",
            "function_queue_dead",
            "Dead letters: queued invocations that failed every attempt (`hearth dlq`)",
            "Dead letters by function",
            |d, _| d.dead as i64,
            false,
        ),
        (
            "queue_oldest_age_seconds",
            "function_queue_oldest_age_seconds",
            "How long the longest-waiting queued invocation has waited",
            "How long each function's longest-waiting queued invocation has waited",
            age,
            true,
        ),
    ];
    for (name, per_name, help, per_help, figure, greatest) in figures {
        let read = events.depth_reader();
        metrics.read_at_scrape(name, help, move || {
            let now = hearth_core::unix_time_ms();
            let each = read().into_iter().map(|d| figure(&d, now));
            if greatest {
                each.max().unwrap_or(0)
            } else {
                each.sum()
            }
        });
        let read = events.depth_reader();
        metrics.read_per_function_at_scrape(per_name, per_help, move || {
            let now = hearth_core::unix_time_ms();
            read()
                .into_iter()
                .map(|d| {
                    let v = figure(&d, now);
                    ((d.tenant, d.function), v)
                })
                .collect()
        });
    }
}

/// What this member's broker bindings have done since it started, in
/// `/metrics`.
pub(crate) fn count_triggers_in_metrics(
    events: &hearth_events::Events,
    metrics: &hearth_node::Metrics,
) {
    use std::sync::atomic::Ordering::Relaxed;
    type Figure = fn(&hearth_events::trigger::Counts) -> i64;
    let figures: [(&'static str, &'static str, Figure); 4] = [
        (
            "trigger_messages_done",
            "Broker messages whose invocation succeeded and that were acknowledged",
            |c| c.done.load(Relaxed) as i64,
        ),
        (
            "trigger_messages_retried",
            "Failed attempts at broker messages, given back to be redelivered after a backoff",
            |c| c.retried.load(Relaxed) as i64,
        ),
        (
            "trigger_messages_dead",
            "Broker messages that failed every attempt (or were too big to run): copied to \
             their dead-letter subject, or ended in their stream",
            |c| c.dead.load(Relaxed) as i64,
        ),
        (
            "trigger_messages_pending",
            "Messages waiting in the brokers for this member's bindings, as last asked",
            |c| c.pending.lock().values().sum::<u64>() as i64,
        ),
    ];
    for (name, help, figure) in figures {
        let counts = Arc::downgrade(&events.triggers);
        metrics.read_at_scrape(name, help, move || {
            counts.upgrade().map_or(0, |c| figure(&c))
        });
    }
}

/// A queued invocation placed by this gateway.
async fn forward(
    g: &Arc<hearth_cluster::Gateway>,
    function: &hearth_core::FunctionVersion,
    request: Request,
    attempt: GatewayAttempt,
) -> Dispatched {
    let uri: Uri = match format!("/fn/{}/{}", function.tenant, function.name).parse() {
        Ok(u) => u,
        Err(e) => return Dispatched::Gone(format!("its name is not a path ({e})")),
    };
    let method = Method::from_bytes(request.method.as_bytes()).unwrap_or(Method::POST);
    let mut headers = HeaderMap::new();
    for (k, v) in &request.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::try_from(k.as_str()),
            HeaderValue::try_from(v.as_str()),
        ) {
            headers.append(k, v);
        }
    }
    let event = headers.get(hearth_core::EVENT_HEADER).cloned();
    let mut out = Outgoing {
        queued: Some(attempt),
        ..Outgoing::pinned(
            function,
            method,
            &uri,
            headers,
            OutgoingBody::Whole(request.body),
        )
    };
    // `pinned` drops a client's event header; this one is the queue's.
    if let Some(event) = event {
        out.headers.insert(hearth_core::EVENT_HEADER, event);
    }
    match g.forward(&out).await {
        Ok(answer) => Dispatched::Answered(answer.status),
        Err(e @ (GatewayError::NoNodes | GatewayError::Busy(_) | GatewayError::NoRoom(_))) => {
            Dispatched::Refused(e.to_string())
        }
        Err(e @ (GatewayError::Failed(_) | GatewayError::Timeout { .. })) => {
            Dispatched::Failed(e.to_string())
        }
    }
}
