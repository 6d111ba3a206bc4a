//! Failures shared across crates.

use displaydoc::Display;
use thiserror::Error;

/// Why an invocation produced no response of the function's own.
///
/// `Unsupported` asks the node to retry on the next tier; every other variant
/// is the function's answer and reaches the caller as an HTTP error.
#[derive(Debug, Clone, Display, Error, PartialEq, Eq)]
pub enum InvokeError {
    /// this tier cannot run what the function asked for: {0}
    Unsupported(String),
    /// the function ran past its time limit of {limit_ms} ms
    Timeout { limit_ms: u64 },
    /// the function ran out of memory: its limit is {limit_mib} MiB{last_output}
    OutOfMemory {
        limit_mib: u32,
        /// What it wrote last, when the tier has it (wasm: its stderr, or
        /// its stdout).
        last_output: LastOutput,
    },
    /// the function trapped: {0}
    Trap(String),
    /// the function's sandbox crashed: {0}
    Crashed(String),
    /// the function failed: {0}
    Function(String),
    /// the function's response is larger than the limit of {limit_bytes} bytes
    ResponseTooLarge { limit_bytes: usize },
    /// the request body streamed past the limit of {limit_bytes} bytes
    RequestTooLarge { limit_bytes: usize },
    /// the request body stalled: nothing of it arrived for {idle_ms} ms
    RequestStalled { idle_ms: u64 },
    /// the caller went away while its request or response streamed: {0}
    Disconnected(String),
    /// the node is at capacity; try again shortly
    Overloaded,
    /// this tenant already has {limit} invocations running on this node, its share of it; try again shortly
    TenantBusy { limit: usize },
    /// the node's running invocations hold all the memory it offers ({capacity_mib} MiB, --capacity-mib); try again shortly
    MemoryFull { capacity_mib: u64 },
    /// this tenant's running invocations hold its share of this node's memory ({limit_mib} MiB, --capacity-mib-per-tenant); try again shortly
    TenantMemoryFull { limit_mib: u64 },
    /// the function made more host calls (clock, randomness, logs, KV, HTTP) than one invocation's tape may hold: its budget is {limit_bytes} bytes; the tape was kept up to there
    TapeBudgetExceeded { limit_bytes: usize },
}

/// The end of what a function wrote before it failed, bounded, for its
/// error message (the whole output is in its logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastOutput(String);

impl LastOutput {
    /// Bytes of output an error message quotes, at most.
    pub const MAX_BYTES: usize = 512;

    /// The last lines of `text` that fit in [`Self::MAX_BYTES`] (a longer
    /// last line is cut to its end), blank lines and trailing space dropped.
    pub fn of(text: &str) -> LastOutput {
        let text = text.trim_end();
        let mut start = text.len().saturating_sub(Self::MAX_BYTES);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let tail = &text[start..];
        // From a line's start when one begins in the window.
        let tail = match (start > 0, tail.find('\n')) {
            (true, Some(nl)) if nl + 1 < tail.len() => &tail[nl + 1..],
            _ => tail,
        };
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        LastOutput(lines.join(" / "))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LastOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "; it last wrote: {}", self.0)
    }
}

/// How a compiled module's `hearth.leave(at)` reads as an error.
const LEFT_COMPILED: &str = "compiled code left at ";

impl InvokeError {
    /// Compiled JavaScript met what its trace did not cover, at `at` (a
    /// source offset, or one of `hearth_jit::left`'s codes): the node runs
    /// the invocation in the isolate instead.
    pub fn left_compiled(at: u32) -> InvokeError {
        InvokeError::Unsupported(format!("{LEFT_COMPILED}{at}"))
    }

    /// Where compiled code left, if this is [`left_compiled`](Self::left_compiled).
    pub fn compiled_left_at(&self) -> Option<u32> {
        match self {
            InvokeError::Unsupported(why) => why.strip_prefix(LEFT_COMPILED)?.parse().ok(),
            _ => None,
        }
    }

    /// Whether the invocation was refused at admission and ran nothing:
    /// the node or its tenant had no room for it.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            InvokeError::Overloaded
                | InvokeError::MemoryFull { .. }
                | InvokeError::TenantBusy { .. }
                | InvokeError::TenantMemoryFull { .. }
        )
    }

    /// The HTTP status a caller sees for this failure.
    pub fn http_status(&self) -> u16 {
        match self {
            InvokeError::Timeout { .. } => 504,
            InvokeError::Crashed(_) => 502,
            InvokeError::Overloaded | InvokeError::MemoryFull { .. } => 503,
            InvokeError::TenantBusy { .. } | InvokeError::TenantMemoryFull { .. } => 429,
            InvokeError::RequestTooLarge { .. } => 413,
            InvokeError::RequestStalled { .. } => 408,
            // nginx's "client closed request": no one is there to read it.
            InvokeError::Disconnected(_) => 499,
            InvokeError::Unsupported(_)
            | InvokeError::OutOfMemory { .. }
            | InvokeError::Trap(_)
            | InvokeError::Function(_)
            | InvokeError::ResponseTooLarge { .. }
            | InvokeError::TapeBudgetExceeded { .. } => 500,
        }
    }

    /// A short stable name, used as a metrics label and in JSON errors.
    pub fn kind(&self) -> &'static str {
        match self {
            InvokeError::Unsupported(_) => "unsupported",
            InvokeError::Timeout { .. } => "timeout",
            InvokeError::OutOfMemory { .. } => "out_of_memory",
            InvokeError::Trap(_) => "trap",
            InvokeError::Crashed(_) => "crashed",
            InvokeError::Function(_) => "function_error",
            InvokeError::ResponseTooLarge { .. } => "response_too_large",
            InvokeError::RequestTooLarge { .. } => "request_too_large",
            InvokeError::RequestStalled { .. } => "request_timeout",
            InvokeError::Disconnected(_) => "disconnected",
            InvokeError::Overloaded => "overloaded",
            InvokeError::TenantBusy { .. } => "tenant_busy",
            InvokeError::MemoryFull { .. } => "memory_full",
            InvokeError::TenantMemoryFull { .. } => "tenant_memory_full",
            InvokeError::TapeBudgetExceeded { .. } => "tape_budget_exceeded",
        }
    }
}

/// A name, runtime or setting a user gave that Hearth cannot accept.
#[derive(Debug, Clone, Display, Error, PartialEq, Eq)]
pub enum ValidationError {
    /// invalid {kind} name {name:?}: use 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit
    BadName { kind: &'static str, name: String },
    /// invalid alias name {0:?}: use 1-32 characters of a-z, 0-9, '-' and '_', starting with a letter (a number names a version)
    BadAlias(String),
    /// unknown runtime {0:?}: expected one of wasm, js, python, node
    UnknownRuntime(String),
    /// invalid handler {0:?}: write it as module.function, e.g. app.handler or src/index.handler
    BadHandler(String),
    /// invalid {kind} {name:?}: an environment variable's name is 1-128 characters of A-Z, a-z, 0-9 and '_', not starting with a digit
    BadEnvName { kind: &'static str, name: String },
}

#[cfg(test)]
mod last_output_tests {
    use super::*;

    #[test]
    fn the_last_lines_are_kept_within_the_bound() {
        assert_eq!(LastOutput::of("").to_string(), "");
        assert_eq!(
            LastOutput::of("starting\n\nmalloc failed\n").to_string(),
            "; it last wrote: starting / malloc failed"
        );
        let long = format!("{}\nlast line\n", "é".repeat(2000));
        let kept = LastOutput::of(&long);
        assert_eq!(kept.as_str(), "last line");
        let one = "x".repeat(5000);
        assert_eq!(LastOutput::of(&one).as_str().len(), LastOutput::MAX_BYTES);
    }
}
