-- The schema as it stood when versioned migrations began, less what V2
-- and V3 add (SQLite's V1 has the same tables, and the tape index, which
-- stays in each node's SQLite; the cluster's tables at the end are
-- PostgreSQL's alone). Every statement is idempotent: a database from
-- before migrations (no history table) runs it to fill in what it lacks.

CREATE TABLE IF NOT EXISTS tenants (
    name        TEXT PRIMARY KEY,
    created_ms  BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS tenant_settings (
    tenant      TEXT PRIMARY KEY REFERENCES tenants(name),
    colocation  TEXT
);
CREATE TABLE IF NOT EXISTS tokens (
    hash        TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    role        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS functions (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    latest      BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE IF NOT EXISTS versions (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     BIGINT NOT NULL,
    artifact    TEXT NOT NULL,
    spec        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant, name, version)
);
CREATE TABLE IF NOT EXISTS modes (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    bounces     BIGINT NOT NULL,
    pinned      BOOLEAN NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE IF NOT EXISTS kv (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    key         BYTEA NOT NULL,
    value       BYTEA NOT NULL,
    PRIMARY KEY (tenant, function, key)
);
-- What each tenant's KV holds, kept by a trigger, for its quota.
CREATE TABLE IF NOT EXISTS kv_usage (
    tenant      TEXT PRIMARY KEY,
    bytes       BIGINT NOT NULL
);
CREATE OR REPLACE FUNCTION hearth_kv_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO kv_usage (tenant, bytes) VALUES (NEW.tenant, length(NEW.key) + length(NEW.value))
            ON CONFLICT (tenant) DO UPDATE SET bytes = kv_usage.bytes + excluded.bytes;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE kv_usage SET bytes = bytes - length(OLD.key) - length(OLD.value)
            + length(NEW.key) + length(NEW.value) WHERE tenant = NEW.tenant;
    ELSE
        UPDATE kv_usage SET bytes = bytes - length(OLD.key) - length(OLD.value)
            WHERE tenant = OLD.tenant;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS kv_usage ON kv;
CREATE TRIGGER kv_usage AFTER INSERT OR UPDATE OR DELETE ON kv
    FOR EACH ROW EXECUTE FUNCTION hearth_kv_usage();
-- A database from before KV quotas: what it holds, counted once.
INSERT INTO kv_usage (tenant, bytes)
    SELECT tenant, SUM(length(key) + length(value)) FROM kv GROUP BY tenant
    ON CONFLICT (tenant) DO NOTHING;
CREATE TABLE IF NOT EXISTS logs (
    id          BIGSERIAL PRIMARY KEY,
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    version     BIGINT NOT NULL,
    invocation  TEXT NOT NULL,
    ts_ms       BIGINT NOT NULL,
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
    seq         BIGINT NOT NULL,
    event       BYTEA NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant, function, invocation, seq)
);

-- The cluster: its members, the code they run, what they share.
CREATE TABLE IF NOT EXISTS members (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL,
    capacity_mib    BIGINT NOT NULL,
    max_concurrency BIGINT,
    report          TEXT NOT NULL,
    beats           BIGINT NOT NULL,
    beat_at         TIMESTAMPTZ NOT NULL,
    left_at         TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS artifacts (
    sha256      TEXT PRIMARY KEY,
    bytes       BYTEA NOT NULL,
    created_ms  BIGINT NOT NULL
);
-- The tape index a node handed over as it left: its tapes stay on its
-- machine, and the cluster knows they are there.
CREATE TABLE IF NOT EXISTS away_tapes (
    node_url    TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    first_id    TEXT NOT NULL,
    last_id     TEXT NOT NULL,
    count       BIGINT NOT NULL,
    errors      BIGINT NOT NULL,
    left_ms     BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS away_tapes_by_function ON away_tapes (tenant, function);
CREATE TABLE IF NOT EXISTS cluster_settings (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
