-- What each function's logs hold, kept by triggers, for its quota.
CREATE TABLE IF NOT EXISTS log_usage (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    PRIMARY KEY (tenant, function)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS log_usage_insert AFTER INSERT ON logs BEGIN
    INSERT INTO log_usage (tenant, function, bytes)
        VALUES (NEW.tenant, NEW.function, length(CAST(NEW.message AS BLOB)))
        ON CONFLICT (tenant, function) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER IF NOT EXISTS log_usage_delete AFTER DELETE ON logs BEGIN
    UPDATE log_usage SET bytes = bytes - length(CAST(OLD.message AS BLOB))
        WHERE tenant = OLD.tenant AND function = OLD.function;
END;
-- What the logs held before: counted once.
INSERT OR IGNORE INTO log_usage (tenant, function, bytes)
    SELECT tenant, function, SUM(length(CAST(message AS BLOB)))
    FROM logs GROUP BY tenant, function;
