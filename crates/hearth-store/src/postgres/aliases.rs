//! A function's aliases in PostgreSQL: the rules are SQLite's
//! (`sqlite/aliases.rs`); each move also notifies the function's change,
//! so every member's cache hears where the alias points now. Each
//! function here runs inside its caller's transaction.

use tokio_postgres::Transaction;

use crate::cluster::{Change, notify};
use crate::{AliasMove, LIVE, MAX_ALIASES_PER_FUNCTION, MAX_MOVES_PER_ALIAS, StoreError};

/// Points `alias` at `version` (which must exist), recording the move;
/// `undoes` names the move a rollback undoes.
pub(super) async fn set(
    tx: &Transaction<'_>,
    tenant: &str,
    name: &str,
    alias: &str,
    version: u32,
    undoes: Option<i64>,
) -> Result<AliasMove, StoreError> {
    let v = i64::from(version);
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM versions v JOIN functions f
                 ON f.tenant = v.tenant AND f.name = v.name
               WHERE v.tenant = $1 AND v.name = $2 AND v.version = $3)",
            &[&tenant, &name, &v],
        )
        .await?
        .get(0);
    if !exists {
        return Err(StoreError::NoSuchVersion {
            function: format!("{tenant}/{name}"),
            version,
        });
    }
    // The row lock orders concurrent moves of one alias.
    let previous: Option<i64> = tx
        .query_opt(
            "SELECT version FROM aliases WHERE tenant = $1 AND name = $2 AND alias = $3
             FOR UPDATE",
            &[&tenant, &name, &alias],
        )
        .await?
        .map(|r| r.get(0));
    if previous.is_none() {
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
    tx.execute(
        "INSERT INTO aliases (tenant, name, alias, version) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant, name, alias) DO UPDATE SET version = excluded.version",
        &[&tenant, &name, &alias, &v],
    )
    .await?;
    let at_ms = hearth_core::unix_time_ms();
    let id: i64 = tx
        .query_one(
            "INSERT INTO alias_moves (tenant, name, alias, version, previous, undoes, at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[&tenant, &name, &alias, &v, &previous, &undoes, &at_ms],
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
        previous: previous.map(|p| p as u32),
        rollback: undoes.is_some(),
        at_ms,
    })
}

/// Undoes the move that made `alias`'s current version: the newest move
/// to it that is neither a rollback nor undone already.
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
            "SELECT m.id, m.previous FROM alias_moves m
             WHERE m.tenant = $1 AND m.name = $2 AND m.alias = $3 AND m.version = $4
               AND m.undoes IS NULL
               AND NOT EXISTS (SELECT 1 FROM alias_moves r
                   WHERE r.tenant = m.tenant AND r.name = m.name AND r.alias = m.alias
                     AND r.undoes = m.id)
             ORDER BY m.id DESC LIMIT 1",
            &[&tenant, &name, &alias, &current],
        )
        .await?
        .map(|r| (r.get::<_, i64>(0), r.get::<_, Option<i64>>(1)));
    match undone {
        Some((id, Some(previous))) => set(tx, tenant, name, alias, previous as u32, Some(id)).await,
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
