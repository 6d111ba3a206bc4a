//! The batched log writer: invocations hand their log lines to a channel;
//! one task writes them to the store in transactions of up to a few
//! hundred, at most every 50 ms. A crash loses at most that window.
//!
//! A reader that must see every line queued so far (`hearth logs` right
//! after `hearth invoke`) asks for a flush: the writer writes what it
//! holds at once and answers when it is stored.

use std::sync::Arc;
use std::time::Duration;

use hearth_store::{LogRecord, Store};
use tokio::sync::{mpsc, oneshot};

const CHANNEL_LINES: usize = 16_384;
const BATCH_LINES: usize = 512;
const BATCH_WAIT: Duration = Duration::from_millis(50);

enum Message {
    Line(LogRecord),
    /// Answered once every line sent before it is stored.
    Flush(oneshot::Sender<()>),
}

/// Where invocations send their lines.
#[derive(Clone)]
pub(crate) struct LogWriter(mpsc::Sender<Message>);

impl LogWriter {
    /// Queues `record`; false when the queue is full (the line is dropped).
    pub fn send(&self, record: LogRecord) -> bool {
        self.0.try_send(Message::Line(record)).is_ok()
    }

    /// Waits until every line queued before this call is stored.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.0.send(Message::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

pub(crate) fn spawn_writer(store: Arc<dyn Store>) -> LogWriter {
    let (tx, mut rx) = mpsc::channel::<Message>(CHANNEL_LINES);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH_LINES);
        let mut waiting = Vec::new();
        while let Some(first) = rx.recv().await {
            match first {
                Message::Line(rec) => batch.push(rec),
                Message::Flush(done) => waiting.push(done),
            }
            let deadline = tokio::time::Instant::now() + BATCH_WAIT;
            while batch.len() < BATCH_LINES && waiting.is_empty() {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(Message::Line(rec))) => batch.push(rec),
                    Ok(Some(Message::Flush(done))) => waiting.push(done),
                    Ok(None) | Err(_) => break,
                }
            }
            if !batch.is_empty() {
                let records = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_LINES));
                let store = store.clone();
                let written =
                    tokio::task::spawn_blocking(move || store.append_logs(&records)).await;
                match written {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "failed to write function logs"),
                    Err(e) => tracing::error!(error = %e, "log writer task failed"),
                }
            }
            for done in waiting.drain(..) {
                let _ = done.send(());
            }
        }
    });
    LogWriter(tx)
}
