//! The function's log, as the host keeps it: within a byte budget per
//! invocation and the tenant's rate ([`crate::log_rate`]), on the tape as
//! the log keeps it, and lines a traced run hands the node kept apart.

use hearth_store::LogStream;

use super::{HostCtx, LogLine};
use crate::HostEvent;

/// Diverted lines one invocation may leave ([`HostCtx::divert_logs`]), and
/// the bytes of each: past them, lines are dropped.
const MAX_DIVERTED_LINES: usize = 4;
const MAX_DIVERTED_BYTES: usize = 64 * 1024;

impl HostCtx {
    /// From now on, `log` lines starting with `prefix` are kept for the
    /// node ([`take_diverted`](Self::take_diverted)) rather than logged or
    /// taped: how a traced run hands its trace over (`hearth-jit`). At
    /// most a few lines of 64 KiB are kept; the function can fill them
    /// only with lines about itself.
    pub fn divert_logs(&self, prefix: &'static str) {
        self.recorded().diverted = Some((prefix, Vec::new()));
    }

    /// The lines [`divert_logs`](Self::divert_logs) kept.
    pub fn take_diverted(&self) -> Vec<String> {
        self.recorded()
            .diverted
            .as_mut()
            .map(|(_, lines)| std::mem::take(lines))
            .unwrap_or_default()
    }

    /// Appends to the function's log, within the per-invocation byte budget
    /// and the tenant's rate ([`crate::log_rate`]). The tape keeps what the
    /// log keeps: a line cut or dropped here costs nothing further.
    pub fn log(&self, stream: LogStream, level: &str, message: &str) {
        let limit = self.0.services.limits.log_max_bytes;
        let mut rec = self.recorded();
        if let Some((prefix, lines)) = &mut rec.diverted
            && message.starts_with(*prefix)
        {
            if lines.len() < MAX_DIVERTED_LINES && message.len() <= MAX_DIVERTED_BYTES {
                lines.push(message.to_string());
            }
            return;
        }
        if rec.logs_truncated {
            return;
        }
        let mut kept = message;
        let room = limit.saturating_sub(rec.log_bytes);
        if kept.len() > room {
            kept = &kept[..kept.floor_char_boundary(room)];
            rec.logs_truncated = true;
        }
        // The node's own lines are few and bounded per invocation.
        if stream != LogStream::System {
            let rates = &self.0.services.log_rates;
            if !rates.take(&self.0.meta.version.tenant, kept.len()) {
                rec.logs_truncated = false;
                rec.log_dropped_bytes += kept.len() as u64;
                return;
            }
        }
        if stream == LogStream::Log {
            let event = HostEvent::Log {
                level: level.to_string(),
                message: kept.to_string(),
            };
            rec.push(event, self.tape_budget(), false, None);
        }
        rec.log_bytes += kept.len();
        rec.logs.push(LogLine {
            ts_ms: hearth_core::unix_time_ms(),
            stream,
            level: level.to_string(),
            message: kept.to_string(),
        });
        if rec.logs_truncated {
            rec.logs.push(LogLine {
                ts_ms: hearth_core::unix_time_ms(),
                stream: LogStream::System,
                level: "warn".into(),
                message: format!("log output truncated at {limit} bytes for this invocation"),
            });
        }
    }
}
