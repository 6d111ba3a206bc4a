-- Whose turn it is to have a queued invocation claimed: a claim takes
-- each tenant's oldest first, and among tenants the one served longest
-- ago first (`served` counts claims), so a tenant that queued thousands
-- before another's one still waits at most one claim for it.
CREATE TABLE IF NOT EXISTS queue_turns (
    tenant  TEXT PRIMARY KEY,
    served  BIGINT NOT NULL
);
