-- A function's schedules. Each fires its function's `live` alias at every
-- tick of its expression. `next_ms` is the next tick not yet fired: a
-- member that fires a tick moves it on by compare-and-set in the same
-- transaction that queues the firing, so each tick is queued once,
-- whichever member (and however many) saw it due.
CREATE TABLE IF NOT EXISTS schedules (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    id          TEXT NOT NULL,
    expr        TEXT NOT NULL,
    catch_up    INTEGER NOT NULL,
    paused      INTEGER NOT NULL,
    next_ms     INTEGER NOT NULL,
    fired_ms    INTEGER,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, function, id)
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_ms) WHERE paused = 0;

-- Invocations waiting to run (schedules' firings, async invocations),
-- and those that failed every attempt (`state` 'dead': the dead-letter
-- list). A claimed row is invisible until `visible_ms` (its lease); a
-- claimer that dies leaves it to be claimed again then.
CREATE TABLE IF NOT EXISTS queue (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    function      TEXT NOT NULL,
    target        TEXT NOT NULL,
    source        TEXT NOT NULL,
    request       BLOB NOT NULL,
    enqueued_ms   INTEGER NOT NULL,
    expires_ms    INTEGER NOT NULL,
    visible_ms    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    deliveries    INTEGER NOT NULL,
    claim         TEXT,
    state         TEXT NOT NULL,
    last_error    TEXT
);
CREATE INDEX IF NOT EXISTS queue_ready ON queue (visible_ms) WHERE state = 'ready';
CREATE INDEX IF NOT EXISTS queue_function ON queue (tenant, function, state);
