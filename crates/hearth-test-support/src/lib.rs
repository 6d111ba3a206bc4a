//! Helpers that Hearth's tests share and the shipped binary never links:
//! this crate is only ever a dev-dependency.
//!
//! - [`TempPostgres`]: a throwaway PostgreSQL server on loopback, for the
//!   cluster store's conformance tests and the end-to-end cluster tests.

mod temp_postgres;

pub use temp_postgres::TempPostgres;
