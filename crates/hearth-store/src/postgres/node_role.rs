//! A node's own PostgreSQL role, holding what a node needs and no more.
//!
//! Gateways own the schema: they migrate it, deploy, and make and revoke
//! tokens. A node runs tenants' code, so a process that escaped a sandbox
//! may hold its store credential: with the gateways' role it could mint
//! itself an admin token or rewrite any version's code. A gateway started
//! with `--store-node-role ROLE` grants that role, after migrating:
//!
//! - **reading** the registry (tenants, functions, versions, aliases,
//!   secrets, code by hash, schedules, bindings, the cluster's settings,
//!   the schema's history), which it runs functions from, and the tokens'
//!   hashes (`access_tokens`: a node authenticates the calls gateways pass
//!   on to it, a private function's invoker and a recordings listing's
//!   caller; a hash gives no token back), never writing any of it;
//! - **reading and writing** what running functions changes: KV and its
//!   usage, logs and their usage, the retry journal, the members' rows
//!   and handed-over tape indexes, a function's pinned tier, and the queue
//!   (a function may invoke another asynchronously).
//!
//! Every gateway grants again as it starts (a new table needs its grant),
//! so the lists follow the schema: `tests::every_table_is_in_one_list`
//! makes a new table be placed on purpose, and the tests that run nodes on
//! such a role (`hostile::members::a_nodes_store_role_…`, the Kubernetes
//! test) hold the lists to what nodes do.

use super::PgStore;
use crate::StoreError;
use crate::migrations::HISTORY;

/// Tables a node reads and never writes.
const READ: &[&str] = &[
    "tenants",
    "tenant_settings",
    "functions",
    "versions",
    "aliases",
    "alias_moves",
    "secrets",
    "artifacts",
    "schedules",
    "triggers",
    "cluster_settings",
    "access_tokens",
    HISTORY,
];

/// Tables a node writes.
const WRITE: &[&str] = &[
    "kv",
    "kv_usage",
    "logs",
    "log_usage",
    "journal",
    "members",
    "away_tapes",
    "modes",
    "queue",
    "queue_turns",
];

/// Tables a node may not touch at all (none now: a table kept from nodes
/// goes here).
const NONE: &[&str] = &[];

/// `name` as a quoted SQL identifier, if it is a plain role name (what
/// `CREATE ROLE` takes unquoted: a letter or `_`, then letters, digits,
/// `_`; at most 63 bytes).
pub fn role_identifier(name: &str) -> Result<String, StoreError> {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63;
    if !plain {
        return Err(StoreError::NodeRole(format!(
            "{name:?} is not a plain role name (lower-case letters, digits and _, \
             starting with a letter or _)"
        )));
    }
    Ok(format!("\"{name}\""))
}

impl PgStore {
    /// Grants `role` what a node needs of the cluster's tables (the
    /// module's lists) and takes back anything else it was given on them.
    /// The role must exist: `CREATE ROLE hearth_node LOGIN PASSWORD '…'`.
    pub async fn grant_node_role(&self, role: &str) -> Result<(), StoreError> {
        let who = role_identifier(role)?;
        self.in_transaction(async |tx| {
            let schema: String = tx.query_one("SELECT current_schema()", &[]).await?.get(0);
            let schema = format!("\"{}\"", schema.replace('"', "\"\""));
            let mut sql = format!("GRANT USAGE ON SCHEMA {schema} TO {who};\n");
            for table in READ.iter().chain(WRITE).chain(NONE) {
                sql.push_str(&format!("REVOKE ALL ON {table} FROM {who};\n"));
            }
            for table in READ {
                sql.push_str(&format!("GRANT SELECT ON {table} TO {who};\n"));
            }
            for table in WRITE {
                sql.push_str(&format!(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {who};\n"
                ));
            }
            sql.push_str(&format!(
                "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {who};\n"
            ));
            tx.batch_execute(&sql).await.map_err(|e| {
                match e.as_db_error().map(|d| d.code().clone()) {
                    Some(tokio_postgres::error::SqlState::UNDEFINED_OBJECT) => {
                        StoreError::NodeRole(format!(
                            "{role:?} does not exist: create it first \
                             (CREATE ROLE {role} LOGIN PASSWORD '…'), then start this gateway again"
                        ))
                    }
                    _ => StoreError::Postgres(e),
                }
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_name_is_plain_or_refused() {
        assert_eq!(role_identifier("hearth_node").unwrap(), "\"hearth_node\"");
        for bad in [
            "",
            "Node",
            "1node",
            "node; DROP TABLE kv",
            "a\"b",
            &"n".repeat(64),
        ] {
            assert!(role_identifier(bad).is_err(), "{bad:?}");
        }
    }

    /// Every table of the schema is in exactly one list: a new table must
    /// be given to nodes or kept from them on purpose.
    #[test]
    fn every_table_is_in_one_list() {
        let mut listed: Vec<&str> = READ.iter().chain(WRITE).chain(NONE).copied().collect();
        listed.sort();
        let before = listed.len();
        listed.dedup();
        assert_eq!(before, listed.len(), "a table in two lists");
        let mut tables = std::collections::BTreeSet::new();
        for file in crate::migrations::postgres_sql() {
            for line in file.lines() {
                let line = line.trim();
                if let Some(rest) = line.strip_prefix("CREATE TABLE IF NOT EXISTS ") {
                    tables.insert(rest.split([' ', '(']).next().unwrap().to_string());
                }
                if let Some(rest) = line.strip_prefix("DROP TABLE ") {
                    tables.remove(rest.trim_end_matches(';'));
                }
            }
        }
        tables.insert(HISTORY.to_string());
        let listed: std::collections::BTreeSet<String> =
            listed.iter().map(|s| s.to_string()).collect();
        assert_eq!(tables, listed);
    }
}
