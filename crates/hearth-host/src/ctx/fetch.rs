//! Outbound HTTP on the function's behalf: the policy's check, the
//! invocation's and tenant's bounds on calls and connections, a child
//! span, the answer taped and journaled, and given again from an earlier
//! tape.

use std::time::{Duration, Instant};

use super::{HostCtx, HostError};
use crate::HostEvent;
use crate::http::{self, OutboundRequest, OutboundResponse};
use crate::replay::Earlier;

impl HostCtx {
    /// Sends an HTTP request on the function's behalf, if its policy allows
    /// the destination. Never waits past the invocation's deadline.
    pub async fn http_fetch(
        &self,
        request: OutboundRequest,
    ) -> Result<OutboundResponse, HostError> {
        let _call = self.begin_call()?;
        let same = |e: &HostEvent| match e {
            HostEvent::HttpFetch { request: r, result } if *r == request => Some(result.clone()),
            _ => None,
        };
        if self.0.earlier.as_ref().is_some_and(Earlier::is_strict) {
            // A call the policy refuses was refused without a trace the
            // first time too, so it is refused before the tape is asked.
            let private = self.0.services.limits.private_egress;
            http::check(&self.0.meta.version.spec, &request, private)?;
        }
        let asked = || format!("http.fetch {} {}", request.method, request.url);
        if let Some(answer) = self.earlier(true, asked, same) {
            return answer?;
        }
        self.check_tape_room()?;
        {
            let mut rec = self.recorded();
            let max = self.0.services.limits.http_max_calls;
            if rec.http_calls >= max {
                return Err(HostError::TooMany(max));
            }
            if rec.fetching >= crate::outbound::PER_INVOCATION {
                return Err(HostError::Congested(format!(
                    "this invocation has {} fetches in flight, all one may",
                    crate::outbound::PER_INVOCATION
                )));
            }
            rec.http_calls += 1;
            rec.fetching += 1;
        }
        let _fetching = Fetching(self.clone());
        let _held = self
            .0
            .services
            .outbound
            .try_hold(&self.0.meta.version.tenant)?;
        let services = &self.0.services;
        let timeout = self
            .remaining()
            .min(Duration::from_millis(services.limits.http_timeout_ms));
        let mut span = self.call_span("http.fetch", || {
            vec![
                opentelemetry::KeyValue::new("http.request.method", request.method.clone()),
                opentelemetry::KeyValue::new("url.full", request.url.clone()),
            ]
        });
        let traceparent = span.as_ref().map(crate::trace::CallSpan::traceparent);
        let began = Instant::now();
        let result = http::fetch(
            &services.http,
            &self.0.meta.version.spec,
            &request,
            timeout,
            (
                services.limits.http_max_response_bytes,
                services.limits.private_egress,
            ),
            traceparent.as_deref(),
        )
        .await;
        if let Some(span) = &mut span {
            match &result {
                Ok(r) => span.set(opentelemetry::KeyValue::new(
                    "http.response.status_code",
                    i64::from(r.status),
                )),
                Err(e) => span.failed(e.kind(), e.to_string()),
            }
        }
        drop(span);
        // A denied call never left the machine: nothing to record.
        if !matches!(
            result,
            Err(HostError::Denied(_)
                | HostError::Invalid(_)
                | HostError::Internal(_)
                | HostError::Congested(_))
        ) {
            self.record_effect(
                HostEvent::HttpFetch {
                    request,
                    result: result.clone(),
                },
                began,
            )
            .await;
        }
        result
    }
}

/// One of an invocation's fetches in flight (counted in its `Recorded`
/// when it began), uncounted when dropped.
struct Fetching(HostCtx);

impl Drop for Fetching {
    fn drop(&mut self) {
        self.0.recorded().fetching -= 1;
    }
}
