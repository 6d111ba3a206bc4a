//! Where a log line came from: the vocabulary of function logs, shared by
//! the host that writes them and the store that keeps them.

use serde::{Deserialize, Serialize};

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// The function's stderr (wasm) or unhandled output.
    Stderr,
    /// A structured log call through the host API.
    Log,
    /// Written by Hearth about the invocation (for example, why it failed).
    System,
}

impl LogStream {
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stderr => "stderr",
            LogStream::Log => "log",
            LogStream::System => "system",
        }
    }

    /// The stream named `s` ([`as_str`](Self::as_str)); anything else is
    /// Hearth's own.
    pub fn parse(s: &str) -> LogStream {
        match s {
            "stderr" => LogStream::Stderr,
            "log" => LogStream::Log,
            _ => LogStream::System,
        }
    }
}
