//! The batched log writer: invocations hand their log lines to a channel;
//! one task writes them to the store in transactions of up to a few
//! hundred, at most every 50 ms. A crash loses at most that window.
//!
//! A reader that must see every line queued so far (`hearth logs` right
//! after `hearth invoke`) asks for a flush: the writer writes what it
//! holds at once and answers when it is stored.
//!
//! What the logs may hold is bounded ([`Quotas`]): a sweeper trims each
//! function's oldest lines past its quota, then the largest functions of
//! a tenant past the tenant's, deletes lines older than the retention,
//! and gives the space back to the file system when the logs shrank (a
//! trim, an expiry, a removed function).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
pub(crate) struct LogWriter {
    tx: mpsc::Sender<Message>,
    /// Bytes of lines queued or being written, against `max_bytes`: the
    /// queue holds lines of any length (up to 16,384 of them), so lines of
    /// a megabyte each would otherwise queue gigabytes while the store
    /// falls behind.
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// What a line holds in the queue.
fn queued_bytes(record: &LogRecord) -> usize {
    std::mem::size_of::<LogRecord>() + record.message.len() + record.invocation_id.len()
}

impl LogWriter {
    /// Queues `record`; false when the queue is full, in lines or in bytes
    /// (the line is dropped).
    pub fn send(&self, record: LogRecord) -> bool {
        let size = queued_bytes(&record);
        if self.queued.fetch_add(size, Ordering::Relaxed) + size > self.max_bytes {
            self.queued.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        let sent = self.tx.try_send(Message::Line(record)).is_ok();
        if !sent {
            self.queued.fetch_sub(size, Ordering::Relaxed);
        }
        sent
    }

    /// Waits until every line queued before this call is stored.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Message::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// Starts the writer; its queue holds at most `max_bytes` of lines.
pub(crate) fn spawn_writer(store: Arc<dyn Store>, max_bytes: usize) -> LogWriter {
    let (tx, mut rx) = mpsc::channel::<Message>(CHANNEL_LINES);
    let queued = Arc::new(AtomicUsize::new(0));
    let held = queued.clone();
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
                let bytes: usize = records.iter().map(queued_bytes).sum();
                let written = store.append_logs(&records).await;
                held.fetch_sub(bytes, Ordering::Relaxed);
                if let Err(e) = written {
                    tracing::error!(error = %e, "failed to write function logs");
                }
            }
            for done in waiting.drain(..) {
                let _ = done.send(());
            }
        }
    });
    LogWriter {
        tx,
        queued,
        max_bytes,
    }
}

/// What the logs may hold.
#[derive(Debug, Clone, Copy)]
pub struct LogQuotas {
    /// Bytes of messages one function's logs keep (its newest).
    pub per_function: u64,
    /// Bytes of messages one tenant's logs keep, over its functions.
    pub per_tenant: u64,
    /// Lines older than this go.
    pub max_age: Duration,
}

impl Default for LogQuotas {
    fn default() -> Self {
        LogQuotas {
            per_function: 64 << 20,
            per_tenant: 512 << 20,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// How often the quotas are enforced; lines written in between may pass
/// them by what a node writes in that time.
const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// How often lines past the retention are deleted (a scan of the logs).
const EXPIRE_EVERY: Duration = Duration::from_secs(600);

/// Enforces `quotas` on `store` from now on, every [`SWEEP_EVERY`].
pub(crate) fn spawn_sweeper(store: Arc<dyn Store>, quotas: LogQuotas) {
    tokio::spawn(async move {
        let mut last_total = 0u64;
        let mut expired_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            let expire = expired_at.is_none_or(|t| t.elapsed() >= EXPIRE_EVERY);
            if expire {
                expired_at = Some(tokio::time::Instant::now());
            }
            if let Err(e) = sweep(&*store, &quotas, expire, &mut last_total).await {
                tracing::warn!(error = %e, "failed to enforce the log quotas");
            }
        }
    });
}

/// One sweep (see the module's documentation).
async fn sweep(
    store: &dyn Store,
    quotas: &LogQuotas,
    expire: bool,
    last_total: &mut u64,
) -> Result<(), hearth_store::StoreError> {
    if expire {
        let before = hearth_core::unix_time_ms() - quotas.max_age.as_millis() as i64;
        store.expire_logs(before).await?;
    }
    let usage = store.log_usage().await?;
    let mut tenants: std::collections::HashMap<&str, Vec<(&str, u64)>> = Default::default();
    for (tenant, function, bytes) in &usage {
        let bytes = if *bytes > quotas.per_function {
            store
                .trim_logs(tenant, function, quotas.per_function)
                .await?;
            quotas.per_function
        } else {
            *bytes
        };
        tenants.entry(tenant).or_default().push((function, bytes));
    }
    for (tenant, mut functions) in tenants {
        let mut total: u64 = functions.iter().map(|(_, b)| b).sum();
        // The largest first: a tenant's chatty function loses its old
        // lines before a quiet one loses any.
        functions.sort_by_key(|(_, b)| std::cmp::Reverse(*b));
        for (function, bytes) in functions {
            if total <= quotas.per_tenant {
                break;
            }
            let keep = bytes.saturating_sub(total - quotas.per_tenant);
            store.trim_logs(tenant, function, keep).await?;
            total -= bytes - keep;
        }
    }
    let now: u64 = store.log_usage().await?.iter().map(|(_, _, b)| b).sum();
    if now < *last_total {
        store.reclaim_space().await?;
    }
    *last_total = now;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: usize) -> LogRecord {
        LogRecord {
            id: 0,
            tenant: "acme".into(),
            function: "f".into(),
            version: 1,
            invocation_id: "01".into(),
            ts_ms: 1,
            stream: hearth_core::LogStream::Log,
            level: "info".into(),
            message: "x".repeat(bytes),
            trace_id: None,
        }
    }

    #[tokio::test]
    async fn the_queue_holds_lines_up_to_its_bytes_and_gives_them_back_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(hearth_store::SqliteStore::open(dir.path().join("db")).unwrap());
        let writer = spawn_writer(store, 4 << 20);
        // A megabyte a line (and its record): the fourth does not fit
        // while three wait.
        let sent: Vec<bool> = (0..6).map(|_| writer.send(line(1 << 20))).collect();
        assert_eq!(sent, [true, true, true, false, false, false]);
        assert!(writer.queued.load(Ordering::Relaxed) <= 4 << 20);
        // Small lines still fit beside them.
        assert!(writer.send(line(100)));
        writer.flush().await;
        assert_eq!(writer.queued.load(Ordering::Relaxed), 0);
        assert!(
            writer.send(line(1 << 20)),
            "written, the room is given back"
        );
    }
}
