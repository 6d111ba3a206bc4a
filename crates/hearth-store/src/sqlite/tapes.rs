//! The tape index: one row per block and function (`tape_blocks`), one
//! per large payload stored in a segment (`tape_blobs`), and per tenant the
//! widest id range a block has spanned (`tape_spans`, which bounds a lookup
//! by id). The tapes themselves are in segment files (`hearth-record`);
//! this is how they are found.

use rusqlite::{Connection, OptionalExtension, params};

use crate::{BlobEntry, BlockQuery, MAX_PINS_PER_FUNCTION, StoreError, TapeBlock, TapePin};

const BLOCK_COLUMNS: &str = "tenant, function, segment, offset, first_id, last_id, first_ms, last_ms, count, errors, min_version, max_version, ok_expired";

fn block_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TapeBlock> {
    Ok(TapeBlock {
        tenant: r.get(0)?,
        function: r.get(1)?,
        segment: r.get::<_, i64>(2)? as u64,
        offset: r.get::<_, i64>(3)? as u64,
        first_id: r.get(4)?,
        last_id: r.get(5)?,
        first_ms: r.get(6)?,
        last_ms: r.get(7)?,
        count: r.get(8)?,
        errors: r.get(9)?,
        min_version: r.get(10)?,
        max_version: r.get(11)?,
        ok_expired: r.get(12)?,
    })
}

/// Milliseconds since the epoch in a UUIDv7's leading 48 bits (hex).
fn id_ms(id: &str) -> i64 {
    id.get(..12)
        .and_then(|h| i64::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// The widest range of start times, in ms, a block of `tenant`'s has held.
fn span_ms(conn: &Connection, tenant: &str) -> Result<i64, StoreError> {
    Ok(conn
        .query_row(
            "SELECT span_ms FROM tape_spans WHERE tenant = ?1",
            params![tenant],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

pub(super) fn index(
    conn: &mut Connection,
    blocks: &[TapeBlock],
    blobs: &[BlobEntry],
    retire: Option<u64>,
) -> Result<(), StoreError> {
    if blocks.is_empty() && blobs.is_empty() && retire.is_none() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    if let Some(n) = retire {
        delete_segment_rows(&tx, n, 0)?;
    }
    {
        let mut stmt = tx.prepare_cached(&format!(
            "INSERT OR REPLACE INTO tape_blocks ({BLOCK_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ))?;
        let mut span = tx.prepare_cached(
            "INSERT INTO tape_spans (tenant, span_ms) VALUES (?1, ?2)
             ON CONFLICT (tenant) DO UPDATE SET span_ms = max(span_ms, excluded.span_ms)",
        )?;
        for b in blocks {
            stmt.execute(params![
                b.tenant,
                b.function,
                b.segment as i64,
                b.offset as i64,
                b.first_id,
                b.last_id,
                b.first_ms,
                b.last_ms,
                b.count,
                b.errors,
                b.min_version,
                b.max_version,
                b.ok_expired
            ])?;
            span.execute(params![b.tenant, id_ms(&b.last_id) - id_ms(&b.first_id)])?;
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

pub(super) fn holding(
    conn: &Connection,
    tenant: &str,
    id: &str,
) -> Result<Vec<TapeBlock>, StoreError> {
    // A block's ids are at most `span_ms` apart, so a block holding `id`
    // starts no earlier than that before it: the scan is bounded even for
    // an id that is not there.
    let floor = format!("{:012x}", (id_ms(id) - span_ms(conn, tenant)? - 1).max(0));
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {BLOCK_COLUMNS} FROM tape_blocks
         WHERE tenant = ?1 AND first_id <= ?2 AND first_id >= ?3 AND last_id >= ?2
         ORDER BY first_id DESC"
    ))?;
    let rows = stmt.query_map(params![tenant, id, floor], block_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn list(
    conn: &Connection,
    tenant: &str,
    q: &BlockQuery,
) -> Result<Vec<TapeBlock>, StoreError> {
    let (after_id, after_seg, after_off, after_fn) = match &q.after {
        Some(c) => (
            Some(c.last_id.as_str()),
            c.segment as i64,
            c.offset as i64,
            c.function.as_str(),
        ),
        None => (None, 0, 0, ""),
    };
    // A block holding a tape older than `before` starts before it, so
    // ends at most the tenant's widest span later: the scan starts there.
    let ceiling = match &q.before {
        Some(before) => Some(format!(
            "{:012x}",
            id_ms(before).saturating_add(span_ms(conn, tenant)?) + 1
        )),
        None => None,
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {BLOCK_COLUMNS} FROM tape_blocks
         WHERE tenant = ?1 AND (?2 IS NULL OR function = ?2)
           AND (?3 = 0 OR errors > 0) AND (?4 IS NULL OR last_ms >= ?4)
           AND (?5 IS NULL OR ?5 BETWEEN min_version AND max_version)
           AND (?6 IS NULL OR (last_id, segment, offset, function) < (?6, ?7, ?8, ?9))
           AND (?11 IS NULL OR (first_id < ?11 AND last_id < ?12))
         ORDER BY last_id DESC, segment DESC, offset DESC, function DESC
         LIMIT ?10"
    ))?;
    let rows = stmt.query_map(
        params![
            tenant,
            q.function,
            q.errors_only,
            q.since_ms,
            q.version,
            after_id,
            after_seg,
            after_off,
            after_fn,
            q.limit.max(1),
            q.before,
            ceiling
        ],
        block_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Every block, in no particular order.
pub(super) fn all(conn: &Connection) -> Result<Vec<TapeBlock>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {BLOCK_COLUMNS} FROM tape_blocks"))?;
    let rows = stmt.query_map([], block_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn in_segment(conn: &Connection, segment: u64) -> Result<Vec<TapeBlock>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {BLOCK_COLUMNS} FROM tape_blocks WHERE segment = ?1 ORDER BY offset, function"
    ))?;
    let rows = stmt.query_map(params![segment as i64], block_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn expire(
    conn: &mut Connection,
    gone: &[TapeBlock],
    ok_expired: &[TapeBlock],
) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    {
        let mut delete = tx.prepare_cached(
            "DELETE FROM tape_blocks WHERE segment = ?1 AND offset = ?2 AND function = ?3",
        )?;
        for b in gone {
            delete.execute(params![b.segment as i64, b.offset as i64, b.function])?;
        }
        let mut mark = tx.prepare_cached(
            "UPDATE tape_blocks SET ok_expired = 1
             WHERE segment = ?1 AND offset = ?2 AND function = ?3",
        )?;
        for b in ok_expired {
            mark.execute(params![b.segment as i64, b.offset as i64, b.function])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Pins a tape; past [`MAX_PINS_PER_FUNCTION`], the function's oldest
/// (ids are UUIDv7, ordered by time) is unpinned.
pub(super) fn pin(conn: &mut Connection, pin: &TapePin) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    tx.execute(
        "INSERT OR IGNORE INTO tape_pins (tenant, function, id) VALUES (?1, ?2, ?3)",
        params![pin.tenant, pin.function, pin.id],
    )?;
    tx.execute(
        "DELETE FROM tape_pins WHERE tenant = ?1 AND function = ?2 AND id NOT IN
           (SELECT id FROM tape_pins WHERE tenant = ?1 AND function = ?2
            ORDER BY id DESC LIMIT ?3)",
        params![pin.tenant, pin.function, MAX_PINS_PER_FUNCTION],
    )?;
    tx.commit()?;
    Ok(())
}

pub(super) fn pins(conn: &Connection) -> Result<Vec<TapePin>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT tenant, function, id FROM tape_pins")?;
    let rows = stmt.query_map([], |r| {
        Ok(TapePin {
            tenant: r.get(0)?,
            function: r.get(1)?,
            id: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn unpin(conn: &mut Connection, pins: &[TapePin]) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    {
        let mut delete = tx.prepare_cached(
            "DELETE FROM tape_pins WHERE tenant = ?1 AND function = ?2 AND id = ?3",
        )?;
        for p in pins {
            delete.execute(params![p.tenant, p.function, p.id])?;
        }
    }
    tx.commit()?;
    Ok(())
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

pub(super) fn unindex_segment(
    conn: &mut Connection,
    segment: u64,
    from_offset: u64,
) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    delete_segment_rows(&tx, segment, from_offset)?;
    tx.commit()?;
    Ok(())
}

fn delete_segment_rows(
    tx: &rusqlite::Transaction<'_>,
    segment: u64,
    from_offset: u64,
) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM tape_blocks WHERE segment = ?1 AND offset >= ?2",
        params![segment as i64, from_offset as i64],
    )?;
    tx.execute(
        "DELETE FROM tape_blobs WHERE segment = ?1 AND offset >= ?2",
        params![segment as i64, from_offset as i64],
    )?;
    Ok(())
}

pub(super) fn last_indexed_offset(
    conn: &Connection,
    segment: u64,
) -> Result<Option<u64>, StoreError> {
    let max: Option<i64> = conn.query_row(
        "SELECT MAX(o) FROM (SELECT MAX(offset) AS o FROM tape_blocks WHERE segment = ?1
                             UNION ALL SELECT MAX(offset) FROM tape_blobs WHERE segment = ?1)",
        params![segment as i64],
        |r| r.get(0),
    )?;
    Ok(max.map(|m| m as u64))
}

/// Forgets a removed function's rows. The tapes' bytes stay in their
/// segments until retention deletes those; without an index row nobody can
/// read them.
pub(super) fn forget_function(
    conn: &Connection,
    tenant: &str,
    name: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM tape_blocks WHERE tenant = ?1 AND function = ?2",
        params![tenant, name],
    )?;
    Ok(())
}
