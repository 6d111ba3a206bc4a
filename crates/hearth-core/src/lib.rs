//! Shared types for every Hearth crate: what a function is, what an
//! invocation carries in and out, and how it can fail.
//!
//! This crate has no behaviour of its own and no I/O; it is the vocabulary of
//! `ARCHITECTURE.md` as types, so the store, the engines, the node and the API
//! agree on one meaning for "version", "tier" and "timeout".

mod error;
mod function;
mod invocation;

pub use error::{InvokeError, ValidationError};
pub use function::{
    FunctionSpec, FunctionVersion, Limits, RecordPolicy, Runtime, Tier, validate_function_name,
    validate_tenant_name,
};
pub use invocation::{InvocationId, Request, Response};

/// Milliseconds since the Unix epoch, the unit of every stored timestamp
/// (0 if the clock is set before 1970).
pub fn unix_time_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
