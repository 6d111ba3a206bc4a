-- The schema as it stood when versioned migrations began, less what V2
-- and V3 add. Every statement is idempotent: a database from before
-- migrations (no history table) runs it to fill in whatever it lacks.

CREATE TABLE IF NOT EXISTS tenants (
    name        TEXT PRIMARY KEY,
    created_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tenant_settings (
    tenant      TEXT PRIMARY KEY REFERENCES tenants(name),
    colocation  TEXT
);
CREATE TABLE IF NOT EXISTS tokens (
    hash        TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    role        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS functions (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    latest      INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE IF NOT EXISTS versions (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    artifact    TEXT NOT NULL,
    spec        TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, version)
);
CREATE TABLE IF NOT EXISTS modes (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    bounces     INTEGER NOT NULL,
    pinned      INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE IF NOT EXISTS kv (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    key         BLOB NOT NULL,
    value       BLOB NOT NULL,
    PRIMARY KEY (tenant, function, key)
) WITHOUT ROWID;
-- What each tenant's KV holds, kept by triggers, for its quota.
CREATE TABLE IF NOT EXISTS kv_usage (
    tenant      TEXT PRIMARY KEY,
    bytes       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS kv_usage_insert AFTER INSERT ON kv BEGIN
    INSERT INTO kv_usage (tenant, bytes) VALUES (NEW.tenant, length(NEW.key) + length(NEW.value))
        ON CONFLICT (tenant) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER IF NOT EXISTS kv_usage_update AFTER UPDATE ON kv BEGIN
    UPDATE kv_usage SET bytes = bytes - length(OLD.key) - length(OLD.value)
        + length(NEW.key) + length(NEW.value) WHERE tenant = NEW.tenant;
END;
CREATE TRIGGER IF NOT EXISTS kv_usage_delete AFTER DELETE ON kv BEGIN
    UPDATE kv_usage SET bytes = bytes - length(OLD.key) - length(OLD.value)
        WHERE tenant = OLD.tenant;
END;
-- A database from before KV quotas: what it holds, counted once.
INSERT OR IGNORE INTO kv_usage (tenant, bytes)
    SELECT tenant, SUM(length(key) + length(value)) FROM kv GROUP BY tenant;
CREATE TABLE IF NOT EXISTS logs (
    id          INTEGER PRIMARY KEY,
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    version     INTEGER NOT NULL,
    invocation  TEXT NOT NULL,
    ts_ms       INTEGER NOT NULL,
    stream      TEXT NOT NULL,
    level       TEXT NOT NULL,
    message     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS logs_by_function ON logs (tenant, function, id);
CREATE INDEX IF NOT EXISTS logs_by_invocation ON logs (invocation);
CREATE TABLE IF NOT EXISTS journal (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    invocation  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    event       BLOB NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, function, invocation, seq)
) WITHOUT ROWID;

-- The tape index (this node's segment files; SQLite only).
DROP TABLE IF EXISTS tapes;
CREATE TABLE IF NOT EXISTS tape_blocks (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    segment     INTEGER NOT NULL,
    offset      INTEGER NOT NULL,
    first_id    TEXT NOT NULL,
    last_id     TEXT NOT NULL,
    first_ms    INTEGER NOT NULL,
    last_ms     INTEGER NOT NULL,
    count       INTEGER NOT NULL,
    errors      INTEGER NOT NULL,
    min_version INTEGER NOT NULL,
    max_version INTEGER NOT NULL,
    ok_expired  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (segment, offset, function)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tape_blocks_by_id ON tape_blocks (tenant, first_id);
CREATE INDEX IF NOT EXISTS tape_blocks_by_function ON tape_blocks (tenant, function, last_id);
CREATE INDEX IF NOT EXISTS tape_blocks_newest ON tape_blocks (tenant, last_id);
CREATE TABLE IF NOT EXISTS tape_spans (
    tenant      TEXT PRIMARY KEY,
    span_ms     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tape_pins (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    id          TEXT NOT NULL,
    PRIMARY KEY (tenant, function, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tape_blobs (
    tenant      TEXT NOT NULL,
    hash        TEXT NOT NULL,
    segment     INTEGER NOT NULL,
    offset      INTEGER NOT NULL,
    PRIMARY KEY (tenant, hash, segment)
);
CREATE INDEX IF NOT EXISTS tape_blobs_by_segment ON tape_blobs (segment, offset);
