//! The cluster side of Hearth (Hydra, EuroSys '25): the placer that picks a
//! node for each invocation by colocation policy (§4.1), nodes simulated
//! well enough to load it with a whole production trace (§5.2), and the
//! trace readers and report that evaluation needs.
//!
//! ```text
//! trace (Azure 2019 / 2021 / synthetic) ──▶ Invocation stream
//!        ──▶ Placer: same function ▸ same tenant ▸ least loaded, within capacity
//!        ──▶ simulated nodes: instances keyed by colocation mode, warm pool,
//!            keep-alive, memory accounting ──▶ Report (CSV, SVG)
//! ```
//!
//! And the running half, with the same placer:
//!
//! ```text
//! client ──▶ gateway (Gateway::forward) ──placer──▶ node /fn/…@version
//!              ▲ join, heartbeats, leave     │ retried once elsewhere if
//!              └──── Membership (node) ◀─────┘ the node fails before answering
//! ```
//!
//! `docs/cluster.md` says what works and what does not yet.

pub mod attempt;
pub mod gateway;
pub mod member;
pub mod placer;
pub mod report;
pub mod sim;
pub mod trace;

pub use attempt::AttemptKey;
pub use gateway::{Gateway, GatewayConfig, GatewayError};
pub use member::{GatewayArtifacts, Membership};
pub use placer::{Colocation, Placer};
pub use sim::{ModeReport, Placement, SimConfig, Simulation, simulate};
pub use trace::{Invocation, Trace, TraceError};
