//! The hostile group: a tenant who wants out, across, or to take the node
//! down, tried end to end against the real daemon (the attacker is a
//! function or an HTTP client, as a tenant would be). Each test names the
//! defence it checks; `docs/security.md` lists them by threat.
//!
//! Run the group alone with `cargo test -p hearth --test all hostile::`.

mod after_response;
mod budgets;
mod compiled;
mod components;
mod console;
mod contained;
mod credentials;
mod damage;
mod deadlines;
mod disclosure;
mod disk;
mod effects;
mod escape;
mod events;
mod exhaustion;
mod members;
mod network;
mod node_pod;
mod origins;
mod replay;
mod restart;
mod secrets;
mod storage;
mod tokens;
mod triggers;
