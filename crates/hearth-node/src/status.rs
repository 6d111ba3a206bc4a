//! What a node reports of itself (`/v1/status`, `hearth status`), as
//! types the API writes and the CLI reads. The node-wide figures are
//! `None` in what a tenant is shown: what every tenant together does here
//! is the operator's to see. Each tier's `details` are its own (sandboxes,
//! zygotes, pools) and stay JSON.

use std::collections::BTreeMap;

use hearth_core::Colocation;
use hearth_host::EngineStatus;
use serde::{Deserialize, Serialize};

/// The node's state and what it cannot enforce here.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeStatus {
    /// The daemon's version.
    pub version: String,
    /// The recorder, if this node records (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<RecordingStatus>,
    /// Invocations running now (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<usize>,
    pub max_concurrency: usize,
    pub max_concurrency_per_tenant: usize,
    /// Memory reserved by running invocations (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
    pub colocation: Colocation,
    /// Long invocations' slices at once, and whether they run lower.
    pub long_runs: LongRuns,
    /// Tenants whose code ran in the last window, and those over their
    /// share (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<CpuShare>,
    /// Protections this machine cannot give, in sentences.
    pub degraded: Vec<String>,
    /// The data directory's file system, when watched (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskStatus>,
    /// What is wrong with the node now (node-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<Vec<String>>,
    /// Each tier's report, by tier name.
    pub tiers: BTreeMap<String, EngineStatus>,
}

impl NodeStatus {
    /// What a tenant is shown: the node-wide figures left out.
    pub fn for_a_tenant(mut self) -> NodeStatus {
        self.recording = None;
        self.in_flight = None;
        self.memory = None;
        self.cpu_share = None;
        self.disk = None;
        self.faults = None;
        self
    }
}

/// The recorder's counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordingStatus {
    /// `batched` or `sync`.
    pub durability: String,
    pub tapes_written: u64,
    pub bytes_written: u64,
    pub dropped: u64,
    pub expired: u64,
    pub queued_bytes: u64,
    pub disk_bytes: u64,
    pub damaged_blocks: u64,
}

/// Memory reserved by running invocations against the node's capacity.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryStatus {
    pub reserved_mib: u64,
    pub capacity_mib: u64,
    pub capacity_mib_per_tenant: u64,
}

/// How long invocations run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LongRuns {
    /// Executor workers long slices may take at once.
    pub lane: usize,
    /// Whether their threads run at a lower priority.
    pub lowered: bool,
}

/// The tenants' CPU shares in the last window.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CpuShare {
    pub window_ms: u64,
    pub last_window: hearth_host::cpu::CpuWindow,
    pub lowered: bool,
}

/// The data directory's file system.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiskStatus {
    /// Writes are refused: less than `min_free_mib` is free.
    pub full: bool,
    pub free_mib: u64,
    pub total_mib: u64,
    pub min_free_mib: u64,
    /// The space held back so that deletes work on a full disk.
    pub reserve_mib: u64,
    pub reserve_held: bool,
}
