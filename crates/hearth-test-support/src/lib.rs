//! Helpers that Hearth's tests share and the shipped binary never links:
//! this crate is only ever a dev-dependency.
//!
//! - [`TempPostgres`]: a throwaway PostgreSQL server on loopback, for the
//!   cluster store's conformance tests and the end-to-end cluster tests.
//! - [`TempNats`]: a throwaway `nats-server -js` on loopback, for the
//!   JetStream triggers' tests.
//! - [`require!`]: a test's tools from the machine, asked for first; a
//!   missing one fails the test at once under CI and skips it, said so,
//!   elsewhere.

mod require;
mod temp_nats;
mod temp_postgres;

pub use require::{Tool, require};
pub use temp_nats::TempNats;
pub use temp_postgres::TempPostgres;
