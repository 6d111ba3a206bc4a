//! Request bodies read whole, within a size, a time and the budgets
//! they are held against (the node's, and the client's share and rate);
//! a refused body is read past for up to [`DRAIN_BYTES`], so that a
//! client still sending sees the answer rather than a reset.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, header};

use crate::ApiError;

/// How much of a refused body (too large, or past its client's rate) is
/// read and thrown away before answering, so a client still sending gets
/// the answer instead of a reset connection. Larger uploads are cut off
/// at once.
pub(crate) const DRAIN_BYTES: usize = 1 << 20;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and throws away what is left of `body` while what was seen of
/// it (counting from `seen`) stays within `up_to` bytes, for
/// [`DRAIN_TIME`] at most.
pub(crate) async fn drain<E>(
    body: impl futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    mut seen: usize,
    up_to: usize,
) {
    use futures::StreamExt;
    let mut body = body;
    let drain = async {
        while seen <= up_to {
            match body.next().await {
                Some(Ok(chunk)) => seen += chunk.len(),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
}

/// Reads a body, refusing with 413 past `limit` bytes and with 408 if it
/// has not arrived whole within `timeout` (a client trickling a body
/// would otherwise hold its connection and this task for as long as it
/// likes).
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limits: (usize, std::time::Duration),
    what: &str,
) -> Result<bytes::Bytes, ApiError> {
    Ok(read_body_within(headers, body, limits, what, None).await?.0)
}

/// What a request body may be held against: the node's budget
/// (`--max-buffered-mib`) and, where the listener gave one, its client's
/// share of it and body rate ([`ClientShare`]). Permits are a KiB each.
#[derive(Clone, Copy)]
pub(crate) struct BodyBudget<'a> {
    pub node: &'a Arc<tokio::sync::Semaphore>,
    pub client: Option<&'a crate::ClientShare>,
}

/// What one body holds of its [`BodyBudget`], given back when dropped.
#[derive(Default)]
pub(crate) struct BodyHeld {
    node: Option<tokio::sync::OwnedSemaphorePermit>,
    client: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Bytes held (the node's permits are the KiB they round up to).
    bytes: usize,
    /// The whole body was paid for at once, from its declared length.
    paid: bool,
}

impl BodyHeld {
    /// Pays for a body of `declared` bytes from its client's rate before
    /// any of it is read: a client past its rate is refused (429) with
    /// the body unread. A body of unknown length pays as it is held.
    pub(crate) fn prepay(
        &mut self,
        budget: BodyBudget<'_>,
        declared: usize,
    ) -> Result<(), ApiError> {
        if let Some(client) = budget.client {
            client.pay(declared)?;
        }
        self.paid = true;
        Ok(())
    }

    /// Holds `bytes` more: past the client's rate or its share, 429; past
    /// the node's budget, 503. Permits are taken for the whole held so
    /// far, rounded up once (not once per chunk).
    pub(crate) fn hold(&mut self, budget: BodyBudget<'_>, bytes: usize) -> Result<(), ApiError> {
        if let Some(client) = budget.client
            && !self.paid
        {
            client.pay(bytes)?;
        }
        let total = self.bytes + bytes;
        let taken = self.node.as_ref().map_or(0, |p| p.num_permits());
        let more_kib = total.div_ceil(1024) - taken;
        self.bytes = total;
        if more_kib == 0 {
            return Ok(());
        }
        let kib = u32::try_from(more_kib).unwrap_or(u32::MAX);
        fn merge(
            held: &mut Option<tokio::sync::OwnedSemaphorePermit>,
            more: tokio::sync::OwnedSemaphorePermit,
        ) {
            match held {
                Some(h) => h.merge(more),
                None => *held = Some(more),
            }
        }
        if let Some(share) = budget.client {
            let more = share
                .body()
                .clone()
                .try_acquire_many_owned(kib)
                .map_err(|_| {
                    ApiError::TooManyRequests(
                    "this client's unfinished requests hold as much body as one client address \
                     may (a quarter of --max-buffered-mib); try again when they have finished"
                        .into(),
                )
                })?;
            merge(&mut self.client, more);
        }
        let more = budget
            .node
            .clone()
            .try_acquire_many_owned(kib)
            .map_err(|_| {
                ApiError::Unavailable(
                    "this node holds as many request bodies as it allows (--max-buffered-mib); \
                 try again shortly"
                        .into(),
                )
            })?;
        merge(&mut self.node, more);
        Ok(())
    }
}

/// [`read_body`], holding what it has read against `budget` as it
/// arrives. What it holds comes back with the body, to be kept as long as
/// the body is.
pub(crate) async fn read_body_within(
    headers: &HeaderMap,
    body: Body,
    (limit, timeout): (usize, std::time::Duration),
    what: &str,
    budget: Option<BodyBudget<'_>>,
) -> Result<(bytes::Bytes, BodyHeld), ApiError> {
    use http_body_util::BodyExt;
    let mut held = BodyHeld::default();
    let too_large = || {
        ApiError::TooLarge(format!(
            "the {what} is larger than the limit of {limit} bytes"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(DRAIN_BYTES)) {
        return Err(too_large());
    }
    let mut body = body;
    if let (Some(budget), Some(n)) = (budget, declared)
        && let Err(refused) = held.prepay(budget, n.min(limit))
    {
        if n <= DRAIN_BYTES {
            drain(body.into_data_stream(), 0, DRAIN_BYTES).await;
        }
        return Err(refused);
    }
    let mut buf = bytes::BytesMut::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let late = || {
        ApiError::RequestTimeout(format!(
            "the {what} did not arrive whole within {} ms",
            timeout.as_millis()
        ))
    };
    while let Some(frame) = tokio::time::timeout_at(deadline, body.frame())
        .await
        .map_err(|_| late())?
    {
        let frame =
            frame.map_err(|e| ApiError::BadRequest(format!("failed to read the {what}: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let seen = buf.len() + data.len();
        if seen > limit {
            drain(
                body.into_data_stream(),
                seen,
                limit.saturating_add(DRAIN_BYTES),
            )
            .await;
            return Err(too_large());
        }
        if let Some(budget) = budget
            && let Err(refused) = held.hold(budget, data.len())
        {
            // Refused for the node's or the client's budget: what is
            // still coming is read past, as for a body too large.
            drain(
                body.into_data_stream(),
                seen,
                seen.saturating_add(DRAIN_BYTES),
            )
            .await;
            return Err(refused);
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), held))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::time::Duration;

    #[tokio::test]
    async fn a_body_is_refused_past_its_limit_declared_or_not() {
        let limits = (8, Duration::from_secs(5));
        let ok = read_body(&HeaderMap::new(), Body::from("12345678"), limits, "body").await;
        assert_eq!(ok.unwrap(), "12345678");
        let long = read_body(&HeaderMap::new(), Body::from("123456789"), limits, "body").await;
        assert!(matches!(long, Err(ApiError::TooLarge(_))));
        // Declared far past the limit: refused before a byte is read.
        let mut declared = HeaderMap::new();
        declared.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from_static("999999999"),
        );
        let early = read_body(&declared, Body::from("small"), limits, "body").await;
        assert!(matches!(early, Err(ApiError::TooLarge(_))));
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_a_408() {
        // A client that sent its head and never a byte of its body.
        let never = futures::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
        let late = read_body(
            &HeaderMap::new(),
            Body::from_stream(never),
            (1024, Duration::from_millis(50)),
            "request body",
        )
        .await;
        let Err(ApiError::RequestTimeout(m)) = late else {
            panic!("a 408");
        };
        assert!(m.contains("within 50 ms"), "{m}");
    }
}
