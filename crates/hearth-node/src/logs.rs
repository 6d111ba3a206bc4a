//! The batched log writer: invocations hand their log lines to a channel;
//! one task writes them to the store in transactions of up to a few
//! hundred, at most every 50 ms. A crash loses at most that window.

use std::sync::Arc;
use std::time::Duration;

use hearth_store::{LogRecord, Store};
use tokio::sync::mpsc;

const CHANNEL_LINES: usize = 16_384;
const BATCH_LINES: usize = 512;
const BATCH_WAIT: Duration = Duration::from_millis(50);

pub(crate) fn spawn_writer(store: Arc<dyn Store>) -> mpsc::Sender<LogRecord> {
    let (tx, mut rx) = mpsc::channel::<LogRecord>(CHANNEL_LINES);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH_LINES);
        while let Some(first) = rx.recv().await {
            batch.push(first);
            let deadline = tokio::time::Instant::now() + BATCH_WAIT;
            while batch.len() < BATCH_LINES {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(rec)) => batch.push(rec),
                    Ok(None) | Err(_) => break,
                }
            }
            let records = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_LINES));
            let store = store.clone();
            let written = tokio::task::spawn_blocking(move || store.append_logs(&records)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "failed to write function logs"),
                Err(e) => tracing::error!(error = %e, "log writer task failed"),
            }
        }
    });
    tx
}
