//! The runtime of Hearth's compiled js tier: what compiled JavaScript
//! calls for what one wasm instruction does not do. Built for
//! wasm32-unknown-unknown by `hearth-jit`'s build script, it is one
//! module (`hearth_rt`) that owns the linear memory and the heap; every
//! module the compiler makes imports its memory and its functions, as
//! Javy's dynamically linked modules import QuickJS.
//!
//! ```text
//!  hearth_rt (this crate, wasm32)          a compiled module
//!  ┌───────────────────────────┐  imports  ┌──────────────────────────┐
//!  │ memory: [stack][rt data]  │◀──────────│ memory, alloc, num_to_str │
//!  │        [module data][heap]│           │ … (calls, not bytes)      │
//!  │ alloc, strings, numbers   │           │ data at RUNTIME_END       │
//!  └───────────────────────────┘           └──────────────────────────┘
//! ```
//!
//! The logic is plain Rust ([`number`], [`text`], [`json`]); natively it is an
//! ordinary library that `hearth-jit`'s tests hold to QuickJS, and in
//! wasm32 `abi` exports it over linear memory.

#![cfg_attr(target_arch = "wasm32", no_std)]

pub mod json;
pub mod number;
pub mod text;

#[cfg(target_arch = "wasm32")]
mod abi;

/// Where compiled code leaves for the isolate, in place of a source
/// offset: what the runtime or an emitted helper met that compiled code
/// does not handle. The node logs it (`hearth_jit::Plan::where_left`).
pub mod left {
    /// An allocation the sandbox's memory limit refused.
    pub const MEMORY: u32 = u32::MAX;
    /// A number the compiled code cannot convert exactly.
    pub const NUMBER: u32 = u32::MAX - 1;
    /// A response status outside 200–599.
    pub const STATUS: u32 = u32::MAX - 2;
    /// A request body that is not ASCII, or a string too long.
    pub const TEXT: u32 = u32::MAX - 3;
    /// A host call that failed (the isolate makes it again).
    pub const HOST: u32 = u32::MAX - 4;
    /// JSON the compiled parser does not take (malformed, or nested deeper
    /// than it goes).
    pub const JSON: u32 = u32::MAX - 5;
}
