-- A function's bindings to a message broker (a NATS JetStream consumer,
-- later Kafka or Redis Streams): each member that runs events consumes
-- every binding not paused and invokes the function's `live` alias for
-- each message. `kind` says which broker; `spec` is the binding as that
-- kind reads it (JSON). The id is derived from the spec, so a deploy
-- that keeps a binding keeps its pause.
CREATE TABLE IF NOT EXISTS triggers (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    id          TEXT NOT NULL,
    kind        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    paused      INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, function, id)
);
