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
    FunctionSpec, FunctionVersion, Limits, Runtime, Tier, validate_function_name,
    validate_tenant_name,
};
pub use invocation::{InvocationId, Request, Response};
