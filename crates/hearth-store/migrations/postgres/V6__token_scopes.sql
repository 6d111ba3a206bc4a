-- Tokens have scopes: admin, deploy, invoke or read (a member token of
-- before did what deploy does), optionally only on one function, until
-- an expiry, with a label for lists. They move to a table of that shape;
-- a binary from before this version finds no `tokens` and authenticates
-- no one, rather than reading a read token as a member's.
CREATE TABLE IF NOT EXISTS access_tokens (
    hash        TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    scope       TEXT NOT NULL,
    function    TEXT,
    expires_ms  BIGINT,
    name        TEXT,
    created_ms  BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS access_tokens_by_tenant ON access_tokens (tenant);
INSERT INTO access_tokens (hash, tenant, scope, created_ms)
    SELECT hash, tenant, CASE role WHEN 'member' THEN 'deploy' ELSE role END, created_ms
    FROM tokens WHERE true
    ON CONFLICT (hash) DO NOTHING;
DROP TABLE tokens;
