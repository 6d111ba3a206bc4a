//! The running cluster (Hydra, EuroSys '25): the placer that picks a node
//! for each invocation by colocation policy (§4.1), the gateway that owns
//! membership and forwarding (with its one retry), and a node's side of
//! membership.
//!
//! ```text
//! client ──▶ gateway (Gateway::forward) ──placer──▶ node /fn/…@version
//!              ▲ join, heartbeats, leave     │ retried once elsewhere if
//!              └──── Membership (node) ◀─────┘ the node fails before answering
//! ```
//!
//! The trace-driven evaluation (simulated nodes, the Azure trace readers,
//! the report) is not here: it is `hearth-bench trace`, in `bench/`, which
//! drives this crate's [`Placer`]. `docs/cluster.md` says what works and
//! what does not yet.

pub mod attempt;
pub mod fanout;
pub mod forward;
pub mod gateway;
pub mod member;
pub mod placer;

pub use attempt::AttemptKey;
pub use gateway::{Gateway, GatewayConfig, GatewayError};
pub use member::{Membership, SharedArtifacts};
pub use placer::{Colocation, Placer};
