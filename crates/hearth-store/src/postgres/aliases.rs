//! A function's aliases in PostgreSQL: the rules are SQLite's
//! (`sqlite/aliases.rs`); each move also notifies the function's change,
//! so every member's cache hears where the alias points now. Each
//! function here runs inside its caller's transaction.

use tokio_postgres::Transaction;

use crate::cluster::{Change, notify};
use crate::{AliasMove, LIVE, MAX_ALIASES_PER_FUNCTION, MAX_MOVES_PER_ALIAS, Split, StoreError};

/// Points `alias` at `version` (which must exist), with `split` if
/// given, recording the move; `undoes` names the move a rollback undoes.
pub(super) async fn set(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
    (version, split): (u32, Option<Split>),
    undoes: Option<i64>,
) -> Result<AliasMove, StoreError> {
    for v in std::iter::once(version).chain(split.map(|s| s.version)) {
        let exists: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM versions v JOIN functions f
                     ON f.tenant = v.tenant AND f.name = v.name
                   WHERE v.tenant = $1 AND v.name = $2 AND v.version = $3)",
                &[&tenant, &name, &i64::from(v)],
            )
            .await?
            .get(0);
        if !exists {
            return Err(StoreError::NoSuchVersion {
                function: format!("{tenant}/{name}"),
                version: v,
            });
        }
    }
    crate::check_split(version, split)?;
    // The row lock orders concurrent moves of one alias.
    let before = tx
        .query_opt(
            "SELECT version, split_version, split_percent FROM aliases
             WHERE tenant = $1 AND name = $2 AND alias = $3 FOR UPDATE",
            &[&tenant, &name, &alias],
        )
        .await?
        .map(|r| (r.get::<_, i64>(0) as u32, split_of(r.get(1), r.get(2))));
    if before.is_none() {
        let count: i64 = tx
            .query_one(
                "SELECT COUNT(*) FROM aliases WHERE tenant = $1 AND name = $2",
                &[&tenant, &name],
            )
            .await?
            .get(0);
        if count >= i64::from(MAX_ALIASES_PER_FUNCTION) {
            return Err(StoreError::TooManyAliases {
                function: format!("{tenant}/{name}"),
                max: MAX_ALIASES_PER_FUNCTION,
            });
        }
    }
    let (previous, previous_split) = match before {
        Some((v, s)) => (Some(v), s),
        None => (None, None),
    };
    let columns = |s: Option<Split>| {
        (
            s.map(|s| i64::from(s.version)),
            s.map(|s| i64::from(s.percent)),
        )
    };
    let (sv, sp) = columns(split);
    let (psv, psp) = columns(previous_split);
    let v = i64::from(version);
    tx.execute(
        "INSERT INTO aliases (tenant, name, alias, version, split_version, split_percent)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant, name, alias) DO UPDATE SET version = excluded.version,
           split_version = excluded.split_version, split_percent = excluded.split_percent",
        &[&tenant, &name, &alias, &v, &sv, &sp],
    )
    .await?;
    let at_ms = hearth_core::unix_time_ms();
    let previous_column = previous.map(i64::from);
    let id: i64 = tx
        .query_one(
            "INSERT INTO alias_moves (tenant, name, alias, version, previous, undoes, at_ms,
                 split_version, split_percent, previous_split_version, previous_split_percent)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
            &[
                &tenant,
                &name,
                &alias,
                &v,
                &previous_column,
                &undoes,
                &at_ms,
                &sv,
                &sp,
                &psv,
                &psp,
            ],
        )
        .await?
        .get(0);
    // The history keeps its newest moves.
    tx.execute(
        "DELETE FROM alias_moves WHERE tenant = $1 AND name = $2 AND alias = $3
           AND id <= (SELECT id FROM alias_moves WHERE tenant = $1 AND name = $2 AND alias = $3
                      ORDER BY id DESC LIMIT 1 OFFSET $4)",
        &[&tenant, &name, &alias, &i64::from(MAX_MOVES_PER_ALIAS)],
    )
    .await?;
    notify(
        tx,
        &Change::Function {
            tenant: tenant.to_string(),
            name: name.to_string(),
        },
    )
    .await?;
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

/// A split as its `bigint` columns hold it (both or neither).
pub(super) fn split_of(version: Option<i64>, percent: Option<i64>) -> Option<Split> {
    crate::split_of(
        version.map(|v| v as u32),
        percent.map(|p| p.clamp(0, 100) as u8),
    )
}

/// Undoes the move that made `alias`'s current version: the newest move
/// to it that is neither a rollback nor undone already. The alias gets
/// back the version and the split it had before that move.
pub(super) async fn roll_back(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
) -> Result<AliasMove, StoreError> {
    let function = || format!("{tenant}/{name}");
    let current: i64 = tx
        .query_opt(
            "SELECT version FROM aliases WHERE tenant = $1 AND name = $2 AND alias = $3
             FOR UPDATE",
            &[&tenant, &name, &alias],
        )
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| StoreError::NoSuchAlias {
            function: function(),
            alias: alias.to_string(),
        })?;
    let undone = tx
        .query_opt(
            "SELECT m.id, m.previous, m.previous_split_version, m.previous_split_percent
             FROM alias_moves m
             WHERE m.tenant = $1 AND m.name = $2 AND m.alias = $3 AND m.version = $4
               AND m.undoes IS NULL
               AND NOT EXISTS (SELECT 1 FROM alias_moves r
                   WHERE r.tenant = m.tenant AND r.name = m.name AND r.alias = m.alias
                     AND r.undoes = m.id)
             ORDER BY m.id DESC LIMIT 1",
            &[&tenant, &name, &alias, &current],
        )
        .await?
        .map(|r| {
            (
                r.get::<_, i64>(0),
                r.get::<_, Option<i64>>(1),
                split_of(r.get(2), r.get(3)),
            )
        });
    match undone {
        Some((id, Some(previous), split)) => {
            set(tx, tenant, name, alias, (previous as u32, split), Some(id)).await
        }
        _ => Err(StoreError::NothingToRollBack {
            function: function(),
            alias: alias.to_string(),
        }),
    }
}

/// Removes one alias and its history (not `live`).
pub(super) async fn remove(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
) -> Result<bool, StoreError> {
    if alias == LIVE {
        return Err(StoreError::LiveAlias);
    }
    let removed = tx
        .execute(
            "DELETE FROM aliases WHERE tenant = $1 AND name = $2 AND alias = $3",
            &[&tenant, &name, &alias],
        )
        .await?
        > 0;
    tx.execute(
        "DELETE FROM alias_moves WHERE tenant = $1 AND name = $2 AND alias = $3",
        &[&tenant, &name, &alias],
    )
    .await?;
    if removed {
        notify(
            tx,
            &Change::Function {
                tenant: tenant.to_string(),
                name: name.to_string(),
            },
        )
        .await?;
    }
    Ok(removed)
}

/// Forgets every alias of a function and their history (it is removed).
pub(super) async fn forget(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
) -> Result<(), tokio_postgres::Error> {
    for table in ["aliases", "alias_moves"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE tenant = $1 AND name = $2"),
            &[&tenant, &name],
        )
        .await?;
    }
    Ok(())
}
