-- Named pointers at a function's versions: `live` is what an unpinned
-- invocation runs; a tenant may make others (`canary`, `staging`). Every
-- move is kept, so a rollback knows where the alias was before.
CREATE TABLE IF NOT EXISTS aliases (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    alias       TEXT NOT NULL,
    version     BIGINT NOT NULL,
    PRIMARY KEY (tenant, name, alias)
);
CREATE TABLE IF NOT EXISTS alias_moves (
    id          BIGSERIAL PRIMARY KEY,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    alias       TEXT NOT NULL,
    version     BIGINT NOT NULL,
    -- Where the alias pointed before (NULL: it did not exist).
    previous    BIGINT,
    -- The move a rollback undid (NULL: not a rollback).
    undoes      BIGINT,
    at_ms       BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS alias_moves_by_alias ON alias_moves (tenant, name, alias, id);
-- Every function had its newest version live.
INSERT INTO aliases (tenant, name, alias, version)
    SELECT tenant, name, 'live', latest FROM functions
    ON CONFLICT DO NOTHING;
