-- Named pointers at a function's versions: `live` is what an unpinned
-- invocation runs; a tenant may make others (`canary`, `staging`). Every
-- move is kept, so a rollback knows where the alias was before.
CREATE TABLE IF NOT EXISTS aliases (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    alias       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, alias)
);
CREATE TABLE IF NOT EXISTS alias_moves (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    alias       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    -- Where the alias pointed before (NULL: it did not exist).
    previous    INTEGER,
    -- The move a rollback undid (NULL: not a rollback).
    undoes      INTEGER,
    at_ms       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS alias_moves_by_alias ON alias_moves (tenant, name, alias, id);
-- Every function had its newest version live.
INSERT OR IGNORE INTO aliases (tenant, name, alias, version)
    SELECT tenant, name, 'live', latest FROM functions;
