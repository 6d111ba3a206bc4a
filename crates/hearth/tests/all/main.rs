//! End-to-end tests: each starts the real `hearth` daemon on 127.0.0.1:0
//! with its own data directory and talks HTTP to it, as a user would.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

mod after_response;
mod api;
mod architecture;
mod auth;
mod browser;
mod cli;
mod cluster;
mod colocation;
mod compat;
mod components;
mod console;
mod durability;
mod events;
mod examples_c;
mod harness;
mod hostile;
mod jit;
mod js;
mod kubernetes;
mod outbound;
mod packages;
mod pod_security;
mod process;
mod readme;
mod recording;
mod releases;
mod secrets;
mod snapshot;
mod streaming;
mod traces;
mod triggers;
