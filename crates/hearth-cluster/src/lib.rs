//! The running cluster (Hydra, EuroSys '25): the placer that picks a node
//! for each invocation by colocation policy (§4.1), the gateway that reads
//! the nodes and forwards (with its one retry), and a node's side of
//! membership. Members meet in the cluster's PostgreSQL, never directly:
//! any number of gateways read the same rows.
//!
//! ```text
//! client ──▶ any gateway (Gateway::forward) ──placer──▶ node /fn/…@version
//!              ▲ reads members' rows (sync)    │ retried once elsewhere if
//!              └── PostgreSQL ◀── Membership ──┘ the node fails before answering
//!                  (join, heartbeat, leave; code by hash; NOTIFY of changes)
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
pub mod tls;

pub use attempt::AttemptKey;
pub use gateway::{Gateway, GatewayConfig, GatewayError};
pub use member::{Membership, Reporting, SharedArtifacts};
pub use placer::{Colocation, Placer};
pub use tls::{MemberTls, TlsFiles};
