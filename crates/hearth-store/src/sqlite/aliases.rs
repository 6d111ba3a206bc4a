//! A function's aliases in SQLite: the `aliases` rows say where each
//! points, `alias_moves` keeps every move (see `Store::set_alias` and
//! `Store::rollback_alias`). Each function here runs inside its caller's
//! transaction.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::{AliasMove, StoreError};

/// Points `alias` at `version` (which must exist), recording the move;
/// `undoes` names the move a rollback undoes.
pub(super) fn set(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
    version: u32,
    undoes: Option<i64>,
) -> Result<AliasMove, StoreError> {
    let exists: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM versions v JOIN functions f
             ON f.tenant = v.tenant AND f.name = v.name
           WHERE v.tenant = ?1 AND v.name = ?2 AND v.version = ?3)",
        params![tenant, name, version],
        |r| r.get(0),
    )?;
    if !exists {
        return Err(StoreError::NoSuchVersion {
            function: format!("{tenant}/{name}"),
            version,
        });
    }
    let previous: Option<u32> = tx
        .query_row(
            "SELECT version FROM aliases WHERE tenant = ?1 AND name = ?2 AND alias = ?3",
            params![tenant, name, alias],
            |r| r.get(0),
        )
        .optional()?;
    tx.execute(
        "INSERT INTO aliases (tenant, name, alias, version) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, name, alias) DO UPDATE SET version = excluded.version",
        params![tenant, name, alias, version],
    )?;
    let at_ms = hearth_core::unix_time_ms();
    tx.execute(
        "INSERT INTO alias_moves (tenant, name, alias, version, previous, undoes, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![tenant, name, alias, version, previous, undoes, at_ms],
    )?;
    Ok(AliasMove {
        id: tx.last_insert_rowid(),
        alias: alias.to_string(),
        version,
        previous,
        rollback: undoes.is_some(),
        at_ms,
    })
}

/// Undoes the move that made `alias`'s current version: the newest move
/// to it that is neither a rollback nor undone already.
pub(super) fn roll_back(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
) -> Result<AliasMove, StoreError> {
    let function = || format!("{tenant}/{name}");
    let current: u32 = tx
        .query_row(
            "SELECT version FROM aliases WHERE tenant = ?1 AND name = ?2 AND alias = ?3",
            params![tenant, name, alias],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| StoreError::NoSuchAlias {
            function: function(),
            alias: alias.to_string(),
        })?;
    let undone: Option<(i64, Option<u32>)> = tx
        .query_row(
            "SELECT m.id, m.previous FROM alias_moves m
             WHERE m.tenant = ?1 AND m.name = ?2 AND m.alias = ?3 AND m.version = ?4
               AND m.undoes IS NULL
               AND NOT EXISTS (SELECT 1 FROM alias_moves r
                   WHERE r.tenant = m.tenant AND r.name = m.name AND r.alias = m.alias
                     AND r.undoes = m.id)
             ORDER BY m.id DESC LIMIT 1",
            params![tenant, name, alias, current],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match undone {
        Some((id, Some(previous))) => set(tx, tenant, name, alias, previous, Some(id)),
        _ => Err(StoreError::NothingToRollBack {
            function: function(),
            alias: alias.to_string(),
        }),
    }
}

/// Forgets every alias of a function and their history (it is removed).
pub(super) fn forget(tx: &Transaction<'_>, tenant: &str, name: &str) -> Result<(), StoreError> {
    for table in ["aliases", "alias_moves"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE tenant = ?1 AND name = ?2"),
            params![tenant, name],
        )?;
    }
    Ok(())
}
