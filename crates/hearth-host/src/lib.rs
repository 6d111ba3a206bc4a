//! The host: everything a function may ask of the platform, and the seam
//! every engine plugs into.
//!
//! ```text
//!   Engine ──prepare──▶ Prepared ──instantiate──▶ Sandbox ──invoke(req, HostCtx)
//!                                                              │ every effect
//!                                                              ▼
//!                                           HostCtx: policy ─▶ tape ─▶ world
//! ```
//!
//! [`HostCtx`] binds one invocation to its tenant, function version and
//! policy. It is the only way a sandbox sees anything nondeterministic —
//! wall and monotonic clocks, random bytes, KV, outbound HTTP — and each
//! answer it gives is appended to the invocation's [`Tape`], so recording
//! and replay (a later layer) need no change in any engine.
//!
//! What this crate is not: an engine. It knows nothing of wasmtime, QuickJS
//! or processes.

mod answer;
mod code;
pub mod cpu;
mod ctx;
mod egress;
mod engine;
mod http;
pub mod log_rate;
pub mod outbound;
pub mod priority;
pub mod rates;
mod replay;
mod stream;
mod tape;
pub mod trace;

pub mod bundle;
pub mod deps;

pub use answer::{AfterResponse, Answer};
pub use code::{ArtifactSource, Artifacts, content_hash, write_whole};
pub use ctx::{
    CallGuard, HostCtx, HostError, HostLimits, HostServices, InvocationMeta, LogLine,
    monotonic_now_nanos,
};
pub use egress::{is_internal, is_internal_host, resolve_egress};
pub use engine::{
    ColocationPolicy, Compiled, DeployError, DeployedPackage, Engine, EngineStatus, Prepared,
    Sandbox, Source,
};
pub use http::{OutboundRequest, OutboundResponse};
pub use stream::{
    BodyStream, HeadReceiver, Kept, QUEUED_CHUNKS, ResponseHead, ResponseSink, ResponseSource, Tee,
    teed,
};
pub use tape::{CallTime, CallTiming, Divergence, HostEvent, Tape};

/// How JavaScript functions are found and called and the events they get
/// (Lambda, OpenWhisk, Workers shapes): one script for the js tier's
/// prelude and the process tier's Node.js helper. An expression whose
/// value is an object of functions.
pub const SHAPES_JS: &str = include_str!("shapes.js");
