//! A function's aliases in SQLite: the `aliases` rows say where each
//! points, `alias_moves` keeps every move (see `Store::set_alias` and
//! `Store::rollback_alias`). Each function here runs inside its caller's
//! transaction.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::{AliasMove, LIVE, MAX_ALIASES_PER_FUNCTION, MAX_MOVES_PER_ALIAS, Split, StoreError};

/// Points `alias` at `version` (which must exist), with `split` if
/// given, recording the move; `undoes` names the move a rollback undoes.
pub(super) fn set(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
    (version, split): (u32, Option<Split>),
    undoes: Option<i64>,
) -> Result<AliasMove, StoreError> {
    let exists = |v: u32| -> Result<bool, StoreError> {
        Ok(tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM versions v JOIN functions f
                 ON f.tenant = v.tenant AND f.name = v.name
               WHERE v.tenant = ?1 AND v.name = ?2 AND v.version = ?3)",
            params![tenant, name, v],
            |r| r.get(0),
        )?)
    };
    for v in std::iter::once(version).chain(split.map(|s| s.version)) {
        if !exists(v)? {
            return Err(StoreError::NoSuchVersion {
                function: format!("{tenant}/{name}"),
                version: v,
            });
        }
    }
    crate::check_split(version, split)?;
    let before: Option<(u32, Option<u32>, Option<u8>)> = tx
        .query_row(
            "SELECT version, split_version, split_percent FROM aliases
             WHERE tenant = ?1 AND name = ?2 AND alias = ?3",
            params![tenant, name, alias],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    if before.is_none() {
        let count: u32 = tx.query_row(
            "SELECT COUNT(*) FROM aliases WHERE tenant = ?1 AND name = ?2",
            params![tenant, name],
            |r| r.get(0),
        )?;
        if count >= MAX_ALIASES_PER_FUNCTION {
            return Err(StoreError::TooManyAliases {
                function: format!("{tenant}/{name}"),
                max: MAX_ALIASES_PER_FUNCTION,
            });
        }
    }
    let (previous, previous_split) = match before {
        Some((v, sv, sp)) => (Some(v), crate::split_of(sv, sp)),
        None => (None, None),
    };
    let (split_version, split_percent) = (split.map(|s| s.version), split.map(|s| s.percent));
    tx.execute(
        "INSERT INTO aliases (tenant, name, alias, version, split_version, split_percent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (tenant, name, alias) DO UPDATE SET version = excluded.version,
           split_version = excluded.split_version, split_percent = excluded.split_percent",
        params![tenant, name, alias, version, split_version, split_percent],
    )?;
    let at_ms = hearth_core::unix_time_ms();
    tx.execute(
        "INSERT INTO alias_moves (tenant, name, alias, version, previous, undoes, at_ms,
             split_version, split_percent, previous_split_version, previous_split_percent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            tenant,
            name,
            alias,
            version,
            previous,
            undoes,
            at_ms,
            split_version,
            split_percent,
            previous_split.map(|s| s.version),
            previous_split.map(|s| s.percent)
        ],
    )?;
    let id = tx.last_insert_rowid();
    // The history keeps its newest moves.
    tx.execute(
        "DELETE FROM alias_moves WHERE tenant = ?1 AND name = ?2 AND alias = ?3
           AND id <= (SELECT id FROM alias_moves WHERE tenant = ?1 AND name = ?2 AND alias = ?3
                      ORDER BY id DESC LIMIT 1 OFFSET ?4)",
        params![tenant, name, alias, MAX_MOVES_PER_ALIAS],
    )?;
    Ok(AliasMove {
        id,
        alias: alias.to_string(),
        version,
        split,
        previous,
        previous_split,
        rollback: undoes.is_some(),
        at_ms,
    })
}

/// Undoes the move that made `alias`'s current version: the newest move
/// to it that is neither a rollback nor undone already. The alias gets
/// back the version and the split it had before that move.
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
    type Undone = (i64, Option<u32>, Option<u32>, Option<u8>);
    let undone: Option<Undone> = tx
        .query_row(
            "SELECT m.id, m.previous, m.previous_split_version, m.previous_split_percent
             FROM alias_moves m
             WHERE m.tenant = ?1 AND m.name = ?2 AND m.alias = ?3 AND m.version = ?4
               AND m.undoes IS NULL
               AND NOT EXISTS (SELECT 1 FROM alias_moves r
                   WHERE r.tenant = m.tenant AND r.name = m.name AND r.alias = m.alias
                     AND r.undoes = m.id)
             ORDER BY m.id DESC LIMIT 1",
            params![tenant, name, alias, current],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    match undone {
        Some((id, Some(previous), sv, sp)) => set(
            tx,
            tenant,
            name,
            alias,
            (previous, crate::split_of(sv, sp)),
            Some(id),
        ),
        _ => Err(StoreError::NothingToRollBack {
            function: function(),
            alias: alias.to_string(),
        }),
    }
}

/// Removes one alias and its history (not `live`).
pub(super) fn remove(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
) -> Result<bool, StoreError> {
    if alias == LIVE {
        return Err(StoreError::LiveAlias);
    }
    let removed = tx.execute(
        "DELETE FROM aliases WHERE tenant = ?1 AND name = ?2 AND alias = ?3",
        params![tenant, name, alias],
    )? > 0;
    tx.execute(
        "DELETE FROM alias_moves WHERE tenant = ?1 AND name = ?2 AND alias = ?3",
        params![tenant, name, alias],
    )?;
    Ok(removed)
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
