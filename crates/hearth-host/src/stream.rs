//! Bodies that stream through an invocation instead of arriving whole.
//!
//! A tier that streams ([`crate::Prepared::streams`]) gets the request
//! body as a [`BodyStream`] that the caller is still sending, and writes
//! its response into a [`ResponseSink`]: the head as soon as the function
//! sets it, then the body chunk by chunk, each waiting until the caller
//! has room for it. Neither side holds more than a few chunks, so memory
//! stays flat however long the bodies are; the function's own memory
//! limit bounds what it keeps.
//!
//! A [`Tee`] watches each body go past for the tape: it keeps the first
//! bytes, counts them all and hashes what it does not keep (BLAKE3), and
//! ends the stream past the node's
//! limit on streamed bytes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use hearth_core::InvokeError;
use tokio::sync::{mpsc, oneshot};

/// A body as it arrives, chunk by chunk.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, InvokeError>> + Send>>;

/// Chunks of a streamed response waiting for the caller to take them: the
/// function's writes wait once this many are queued.
pub const QUEUED_CHUNKS: usize = 4;

/// The response's status and headers, sent before its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body's length, when the function had finished it before the
    /// head went out: the response then says so (`Content-Length`)
    /// instead of being chunked. Not part of what a tape keeps.
    pub length: Option<u64>,
}

/// What a tape keeps of a streamed body: its first bytes, the whole
/// body's length, and its BLAKE3 hash if the first bytes are not all of
/// it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    pub start: Bytes,
    pub len: u64,
    /// `None` when `start` is the whole body.
    pub blake3: Option<[u8; 32]>,
}

/// Watches a body go past: keeps its first `keep` bytes, counts all of it,
/// hashes it once it is longer than what is kept (a body kept whole needs
/// no hash), and refuses a chunk that takes it past `max` bytes. BLAKE3,
/// not sha256: with sha256 (SHA-NI) hashing was 47% of the daemon's CPU
/// streaming a 4 GiB echo.
pub struct Tee {
    /// Why the body stopped short, if it did.
    failed: Option<InvokeError>,
    start: BytesMut,
    keep: usize,
    len: u64,
    max: u64,
    /// Started when the body outgrows `start`.
    hash: Option<blake3::Hasher>,
}

impl Tee {
    /// `keep` 0: the body is not taped, so it is only counted, not kept
    /// or hashed.
    pub fn new(keep: usize, max: u64) -> Tee {
        Tee {
            failed: None,
            start: BytesMut::new(),
            keep,
            len: 0,
            max,
            hash: None,
        }
    }

    /// Takes note of the next chunk; `false` if it goes past the limit
    /// (and is then not counted).
    pub fn see(&mut self, chunk: &[u8]) -> bool {
        if self.len + chunk.len() as u64 > self.max {
            return false;
        }
        self.len += chunk.len() as u64;
        let room = self.keep - self.start.len();
        let kept = room.min(chunk.len());
        self.start.extend_from_slice(&chunk[..kept]);
        if kept < chunk.len() && self.keep > 0 {
            let hash = self.hash.get_or_insert_with(|| {
                let mut hash = blake3::Hasher::new();
                hash.update(&self.start);
                hash
            });
            hash.update(&chunk[kept..]);
        }
        true
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Why the body did not arrive whole: past the limit, or broken off.
    pub fn failure(&self) -> Option<&InvokeError> {
        self.failed.as_ref()
    }

    pub fn finish(self) -> Kept {
        Kept {
            start: self.start.freeze(),
            len: self.len,
            blake3: self.hash.map(|h| *h.finalize().as_bytes()),
        }
    }
}

/// The request body through a tee: the function reads `body`; the tee
/// (read after the invocation) saw what it read. Past the tee's limit the
/// stream ends with [`InvokeError::RequestTooLarge`].
pub fn teed(body: BodyStream, tee: Arc<parking_lot::Mutex<Tee>>) -> BodyStream {
    Box::pin(Teed { body, tee })
}

struct Teed {
    body: BodyStream,
    tee: Arc<parking_lot::Mutex<Tee>>,
}

impl Stream for Teed {
    type Item = Result<Bytes, InvokeError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.body.as_mut().poll_next(cx);
        let mut tee = self.tee.lock();
        match &next {
            Poll::Ready(Some(Ok(chunk))) if !tee.see(chunk) => {
                let limit_bytes = tee.max() as usize;
                let e = InvokeError::RequestTooLarge { limit_bytes };
                tee.failed = Some(e.clone());
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Err(e))) => {
                tee.failed = Some(e.clone());
                next
            }
            _ => next,
        }
    }
}

/// Where a streaming sandbox sends its response; the caller holds the
/// other ends ([`ResponseSink::new`]).
pub struct ResponseSink {
    head: Option<oneshot::Sender<Result<ResponseHead, InvokeError>>>,
    /// The head as sent, for the tape.
    sent_head: Option<ResponseHead>,
    /// `None` once the body was [finished early](Self::finish_early).
    body: Option<mpsc::Sender<Bytes>>,
    done: Option<oneshot::Sender<Result<(), InvokeError>>>,
    tee: Tee,
    /// A response set whole ([`ResponseSink::whole`]), held until the
    /// invocation ends.
    held: Option<(ResponseHead, Bytes)>,
}

/// The caller's ends of a [`ResponseSink`].
pub struct ResponseSource {
    head: oneshot::Receiver<Result<ResponseHead, InvokeError>>,
    body: mpsc::Receiver<Bytes>,
    done: oneshot::Receiver<Result<(), InvokeError>>,
}

/// The head a [`ResponseSource`] waits for: the function's, or why there
/// is none (`Err` when the sink went without a word).
pub type HeadReceiver = oneshot::Receiver<Result<ResponseHead, InvokeError>>;

impl ResponseSource {
    /// The head to wait for, and the body's chunks. The body ends cleanly
    /// only when the sink said the response is whole: a failure after the
    /// head, or a sink dropped without ending, ends it with an error, so
    /// the caller's connection is cut instead of a short body passing for
    /// the whole.
    pub fn split(self) -> (HeadReceiver, BodyStream) {
        (self.head, Self::body(self.body, self.done))
    }

    fn body(
        body: mpsc::Receiver<Bytes>,
        done: oneshot::Receiver<Result<(), InvokeError>>,
    ) -> BodyStream {
        let state = (Some(body), Some(done));
        Box::pin(futures::stream::unfold(state, |(body, done)| async move {
            let mut rx = body?;
            if let Some(chunk) = rx.recv().await {
                return Some((Ok(chunk), (Some(rx), done)));
            }
            match done?.await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some((Err(e), (None, None))),
                Err(_) => Some((
                    Err(InvokeError::Crashed(
                        "the response ended without being finished".into(),
                    )),
                    (None, None),
                )),
            }
        }))
    }
}

impl ResponseSink {
    /// A sink whose tee keeps `keep` bytes and allows `max` in all.
    pub fn new(keep: usize, max: u64) -> (ResponseSink, ResponseSource) {
        let (head_tx, head) = oneshot::channel();
        let (body_tx, body) = mpsc::channel(QUEUED_CHUNKS);
        let (done_tx, done) = oneshot::channel();
        let sink = ResponseSink {
            head: Some(head_tx),
            sent_head: None,
            body: Some(body_tx),
            done: Some(done_tx),
            tee: Tee::new(keep, max),
            held: None,
        };
        (sink, ResponseSource { head, body, done })
    }

    /// Whether the head has gone: after it, a failure can only cut the
    /// body short.
    pub fn started(&self) -> bool {
        self.head.is_none()
    }

    /// Sends the head; the body may follow.
    pub fn head(&mut self, head: ResponseHead) {
        if let Some(tx) = self.head.take() {
            self.sent_head = Some(head.clone());
            // A caller gone already is found at the first chunk.
            let _ = tx.send(Ok(head));
        }
    }

    /// Sends the next chunk of the body, once the caller has room for it.
    pub async fn send(&mut self, chunk: Bytes) -> Result<(), InvokeError> {
        if chunk.is_empty() {
            return Ok(());
        }
        let Some(body) = &self.body else {
            return Err(InvokeError::Function(
                "it wrote to a response body it had finished".into(),
            ));
        };
        if !self.tee.see(&chunk) {
            let limit_bytes = self.tee.max() as usize;
            return Err(InvokeError::ResponseTooLarge { limit_bytes });
        }
        body.send(chunk)
            .await
            .map_err(|_| InvokeError::Disconnected("it stopped reading the response".into()))
    }

    /// Ends the caller's body now, whole, though the invocation goes on
    /// (work after the response): its head is out and its body finished.
    /// What fails after this reaches the tape, not the caller. False if
    /// the head has not gone or the response is held whole.
    pub fn finish_early(&mut self) -> bool {
        if !self.started() || self.held.is_some() {
            return false;
        }
        self.body = None;
        match self.done.take() {
            Some(done) => {
                let _ = done.send(Ok(()));
                true
            }
            None => false,
        }
    }

    /// Sets the whole response at once, for a function that finished it
    /// before its head went out. It leaves when the invocation ends well
    /// ([`end`](Self::end)), with its length, so a failure found after the
    /// function returned (its tape budget, a request that did not arrive
    /// whole) is answered as that error, not with a whole-looking response.
    pub fn whole(&mut self, response: hearth_core::Response) -> Result<(), InvokeError> {
        if !self.tee.see(&response.body) {
            let limit_bytes = self.tee.max() as usize;
            return Err(InvokeError::ResponseTooLarge { limit_bytes });
        }
        let head = ResponseHead {
            status: response.status,
            headers: response.headers,
            length: Some(response.body.len() as u64),
        };
        self.held = Some((head, response.body));
        Ok(())
    }

    /// Whether the function has given its response's head (alone, or with
    /// the whole body).
    pub fn answered(&self) -> bool {
        self.started() || self.held.is_some()
    }

    /// Ends the response: whole when `result` is `Ok`; otherwise, before
    /// the head the caller gets the error instead of a response, after it
    /// the body is cut off. The head sent, if any, and what the tee saw
    /// are returned for the tape.
    pub fn end(mut self, result: &Result<(), InvokeError>) -> (Option<ResponseHead>, Kept) {
        if let (Ok(()), Some((head, body))) = (result, self.held.take()) {
            self.head(head);
            // The channel is empty: nothing was sent before the head.
            if let Some(tx) = &self.body {
                let _ = tx.try_send(body);
            }
        }
        match (result, self.head.take()) {
            (Err(e), Some(head)) => {
                let _ = head.send(Err(e.clone()));
            }
            (result, _) => {
                if let Some(done) = self.done.take() {
                    let _ = done.send(result.clone());
                }
            }
        }
        (self.sent_head, self.tee.finish())
    }

    /// Bytes of body sent so far.
    pub fn sent(&self) -> u64 {
        self.tee.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn a_tee_keeps_the_start_and_hashes_the_whole() {
        let mut tee = Tee::new(5, 100);
        assert!(tee.see(b"abc"));
        assert!(tee.see(b"defgh"));
        assert!(!tee.see(&[0; 93]), "past the limit");
        let kept = tee.finish();
        assert_eq!(kept.start, "abcde");
        assert_eq!(kept.len, 8);
        assert_eq!(kept.blake3, Some(*blake3::hash(b"abcdefgh").as_bytes()));
        // Kept whole, it is not hashed.
        let mut tee = Tee::new(5, 100);
        assert!(tee.see(b"abc") && tee.see(b"de"));
        assert_eq!(tee.finish().blake3, None);
        // Not taped: counted only.
        let mut tee = Tee::new(0, 100);
        assert!(tee.see(b"abcdefgh"));
        let kept = tee.finish();
        assert_eq!((kept.len, kept.start.len(), kept.blake3), (8, 0, None));
    }

    #[tokio::test]
    async fn a_request_past_the_limit_ends_in_an_error() {
        let chunks = vec![
            Ok(Bytes::from_static(b"1234")),
            Ok(Bytes::from_static(b"5678")),
        ];
        let tee = Arc::new(parking_lot::Mutex::new(Tee::new(2, 6)));
        let mut body = teed(Box::pin(futures::stream::iter(chunks)), tee.clone());
        assert_eq!(body.next().await.unwrap().unwrap(), "1234");
        assert_eq!(
            body.next().await.unwrap().unwrap_err(),
            InvokeError::RequestTooLarge { limit_bytes: 6 }
        );
        assert_eq!(tee.lock().len(), 4);
        assert!(matches!(
            tee.lock().failure(),
            Some(InvokeError::RequestTooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_body_finished_early_ends_whole_while_the_sink_lives_on() {
        let (mut sink, source) = ResponseSink::new(64, 1 << 20);
        assert!(!sink.finish_early(), "nothing to finish before the head");
        sink.head(ResponseHead {
            status: 200,
            headers: vec![],
            length: None,
        });
        sink.send(Bytes::from_static(b"hello")).await.unwrap();
        assert!(sink.finish_early());
        let (head, mut body) = source.split();
        assert_eq!(head.await.unwrap().unwrap().status, 200);
        assert_eq!(body.next().await.unwrap().unwrap(), "hello");
        assert!(body.next().await.is_none(), "whole, with the sink alive");
        // What fails after it is the tape's, and writes are refused.
        assert!(sink.send(Bytes::from_static(b"more")).await.is_err());
        let (head, kept) = sink.end(&Err(InvokeError::Trap("later".into())));
        assert_eq!((head.unwrap().status, kept.len), (200, 5));
    }

    #[tokio::test]
    async fn a_failure_after_the_head_cuts_the_body() {
        let (mut sink, source) = ResponseSink::new(4, 1 << 20);
        sink.head(ResponseHead {
            status: 200,
            headers: vec![],
            length: None,
        });
        sink.send(Bytes::from_static(b"hello")).await.unwrap();
        let (head, kept) = sink.end(&Err(InvokeError::Trap("boom".into())));
        assert_eq!(head.unwrap().status, 200);
        assert_eq!((kept.start.as_ref(), kept.len), (&b"hell"[..], 5));
        let (head, mut body) = source.split();
        assert_eq!(head.await.unwrap().unwrap().status, 200);
        assert_eq!(body.next().await.unwrap().unwrap(), "hello");
        assert!(body.next().await.unwrap().is_err(), "cut off");
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn only_an_ended_response_ends_cleanly() {
        let (mut sink, source) = ResponseSink::new(4, 1 << 20);
        sink.head(ResponseHead {
            status: 200,
            headers: vec![],
            length: None,
        });
        sink.send(Bytes::from_static(b"hi")).await.unwrap();
        drop(sink);
        let mut body = source.split().1;
        assert_eq!(body.next().await.unwrap().unwrap(), "hi");
        assert!(body.next().await.unwrap().is_err(), "dropped, not ended");

        let (mut sink, source) = ResponseSink::new(4, 1 << 20);
        sink.send(Bytes::from_static(b"hi")).await.unwrap();
        sink.end(&Ok(()));
        let chunks: Vec<_> = source.split().1.collect().await;
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].is_ok());
    }

    #[tokio::test]
    async fn a_failure_before_the_head_is_the_answer() {
        let (sink, source) = ResponseSink::new(4, 1 << 20);
        sink.end(&Err(InvokeError::Trap("boom".into())));
        let head = source.split().0.await.unwrap();
        assert_eq!(head.unwrap_err(), InvokeError::Trap("boom".into()));
    }

    #[tokio::test]
    async fn a_caller_that_stops_reading_is_a_disconnect() {
        let (mut sink, source) = ResponseSink::new(4, 1 << 20);
        drop(source);
        let sent = sink.send(Bytes::from_static(b"x")).await;
        assert!(matches!(sent, Err(InvokeError::Disconnected(_))));
    }
}
