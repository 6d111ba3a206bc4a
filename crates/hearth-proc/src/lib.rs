//! The process tier: Python and Node.js functions in lean containers.
//!
//! SOCK's design (ATC '18) on Hearth's seams:
//!
//! * [`container`]: roots stitched from read-only bind mounts plus a
//!   size-limited scratch tmpfs, entered with `chroot`; new PID, IPC, UTS
//!   and network namespaces; no mount namespace on the hot path.
//! * [`egress`]: the proxy through which functions that list hosts reach
//!   them (and nothing else).
//! * [`cgroup`]: memory, pids and CPU limits from a pool of pre-made
//!   cgroups, v1 or v2 behind one interface; the freezer pauses idle handlers.
//! * [`seccomp`]: an allow-list filter and `no_new_privs`; internet sockets
//!   only for functions that list hosts.
//! * [`zygote`]: the import cache, a tree of pre-imported Python zygotes that
//!   handlers fork from, each contained before it imports.
//! * [`install`]: the install cache, each pinned package installed once,
//!   pip in a sandbox of its own.
//! * [`engine`]: the [`hearth_host::Engine`] for the tier, sandbox launch and
//!   the pool of generic Node.js processes; `handler` holds the handler cache
//!   (paused sandboxes, LRU under a memory budget, keep-alive) and `session`
//!   one invocation's exchange with a handler.
//!
//! The helpers that run inside sandboxes are `helper/helper.py` (zygote,
//! launcher and Python handler) and `helper/helper.mjs` (Node.js handler);
//! [`proto`] is the framing they speak with the node over a Unix socket in
//! the sandbox's scratch. `docs/process-tier.md` explains the choices.

pub use hearth_host::bundle;
pub mod cgroup;
pub mod config;
pub mod container;
pub mod egress;
pub mod engine;
mod handler;
pub mod install;
pub mod proto;
pub mod seccomp;
mod session;
mod syntax;
pub mod zygote;

pub use config::{Caches, Isolation, ProcConfig, ProcStatus};
pub use engine::{ProcEngine, instance_name};

/// The helper programs, embedded so the binary is all a node needs.
pub const HELPER_PY: &[u8] = include_bytes!("../helper/helper.py");
pub const HELPER_MJS: &[u8] = include_bytes!("../helper/helper.mjs");
