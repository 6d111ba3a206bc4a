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
//! What is here is the evaluation half of the cluster: the placer and the
//! node model are the same code a gateway would use, but no gateway, node
//! registration or PostgreSQL store exists yet (see `docs/cluster.md`).

pub mod placer;
pub mod report;
pub mod sim;
pub mod trace;

pub use placer::{Colocation, Placer};
pub use sim::{ModeReport, SimConfig, simulate};
pub use trace::{Invocation, Trace, TraceError};
