//! The tape index: one row per recorded invocation (`tapes`) and one per
//! large payload stored in a segment (`tape_blobs`). The tapes themselves
//! are in segment files (`hearth-record`); this is how they are found.

use rusqlite::{Connection, OptionalExtension, params};

use crate::{BlobEntry, StoreError, TapeEntry, TapeQuery};

pub(super) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS tapes (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    version     INTEGER NOT NULL,
    tier        TEXT NOT NULL,
    started_ms  INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    status      INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    segment     INTEGER NOT NULL,
    offset      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tapes_by_function ON tapes (tenant, function, id);
CREATE INDEX IF NOT EXISTS tapes_by_segment ON tapes (segment, offset);
CREATE TABLE IF NOT EXISTS tape_blobs (
    tenant      TEXT NOT NULL,
    hash        TEXT NOT NULL,
    segment     INTEGER NOT NULL,
    offset      INTEGER NOT NULL,
    PRIMARY KEY (tenant, hash, segment)
);
CREATE INDEX IF NOT EXISTS tape_blobs_by_segment ON tape_blobs (segment, offset);
"#;

const TAPE_COLUMNS: &str = "id, tenant, function, version, tier, started_ms, duration_us, status, outcome, segment, offset";

fn tape_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TapeEntry> {
    Ok(TapeEntry {
        id: r.get(0)?,
        tenant: r.get(1)?,
        function: r.get(2)?,
        version: r.get(3)?,
        tier: r.get(4)?,
        started_ms: r.get(5)?,
        duration_us: r.get(6)?,
        status: r.get(7)?,
        outcome: r.get(8)?,
        segment: r.get::<_, i64>(9)? as u64,
        offset: r.get::<_, i64>(10)? as u64,
    })
}

pub(super) fn index(
    conn: &mut Connection,
    tapes: &[TapeEntry],
    blobs: &[BlobEntry],
) -> Result<(), StoreError> {
    if tapes.is_empty() && blobs.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    {
        // REPLACE: retention re-writes a tape it keeps into a new segment.
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO tapes (id, tenant, function, version, tier, started_ms,
                 duration_us, status, outcome, segment, offset)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?;
        for t in tapes {
            stmt.execute(params![
                t.id,
                t.tenant,
                t.function,
                t.version,
                t.tier,
                t.started_ms,
                t.duration_us,
                t.status,
                t.outcome,
                t.segment as i64,
                t.offset as i64
            ])?;
        }
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO tape_blobs (tenant, hash, segment, offset)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for b in blobs {
            stmt.execute(params![b.tenant, b.hash, b.segment as i64, b.offset as i64])?;
        }
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn find(
    conn: &Connection,
    tenant: &str,
    id: &str,
) -> Result<Option<TapeEntry>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAPE_COLUMNS} FROM tapes WHERE tenant = ?1 AND id = ?2"
    ))?;
    Ok(stmt.query_row(params![tenant, id], tape_row).optional()?)
}

pub(super) fn list(
    conn: &Connection,
    tenant: &str,
    q: &TapeQuery,
) -> Result<Vec<TapeEntry>, StoreError> {
    let limit = if q.limit == 0 { 100 } else { q.limit };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAPE_COLUMNS} FROM tapes
         WHERE tenant = ?1 AND (?2 IS NULL OR function = ?2)
           AND (?3 = 0 OR outcome != 'ok') AND (?4 IS NULL OR status = ?4)
           AND (?5 IS NULL OR started_ms >= ?5) AND (?6 IS NULL OR version = ?6)
         ORDER BY id DESC LIMIT ?7"
    ))?;
    let rows = stmt.query_map(
        params![
            tenant,
            q.function,
            q.errors_only,
            q.status,
            q.since_ms,
            q.version,
            limit
        ],
        tape_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn find_blob(
    conn: &Connection,
    tenant: &str,
    hash: &str,
    segment: u64,
) -> Result<Option<BlobEntry>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT segment, offset FROM tape_blobs WHERE tenant = ?1 AND hash = ?2 AND segment = ?3",
    )?;
    Ok(stmt
        .query_row(params![tenant, hash, segment as i64], |r| {
            Ok(BlobEntry {
                tenant: tenant.to_string(),
                hash: hash.to_string(),
                segment: r.get::<_, i64>(0)? as u64,
                offset: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()?)
}

pub(super) fn unindex(conn: &mut Connection, ids: &[String]) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached("DELETE FROM tapes WHERE id = ?1")?;
        for id in ids {
            stmt.execute(params![id])?;
        }
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn in_segment(conn: &Connection, segment: u64) -> Result<Vec<TapeEntry>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAPE_COLUMNS} FROM tapes WHERE segment = ?1 ORDER BY offset, id"
    ))?;
    let rows = stmt.query_map(params![segment as i64], tape_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn unindex_segment(
    conn: &mut Connection,
    segment: u64,
    from_offset: u64,
) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    tx.execute(
        "DELETE FROM tapes WHERE segment = ?1 AND offset >= ?2",
        params![segment as i64, from_offset as i64],
    )?;
    tx.execute(
        "DELETE FROM tape_blobs WHERE segment = ?1 AND offset >= ?2",
        params![segment as i64, from_offset as i64],
    )?;
    tx.commit()?;
    Ok(())
}

pub(super) fn last_indexed_offset(
    conn: &Connection,
    segment: u64,
) -> Result<Option<u64>, StoreError> {
    let max: Option<i64> = conn.query_row(
        "SELECT MAX(o) FROM (SELECT MAX(offset) AS o FROM tapes WHERE segment = ?1
                             UNION ALL SELECT MAX(offset) FROM tape_blobs WHERE segment = ?1)",
        params![segment as i64],
        |r| r.get(0),
    )?;
    Ok(max.map(|m| m as u64))
}
