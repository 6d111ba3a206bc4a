-- What each function's logs hold, kept by a trigger, for its quota.
CREATE TABLE IF NOT EXISTS log_usage (
    tenant      TEXT NOT NULL,
    function    TEXT NOT NULL,
    bytes       BIGINT NOT NULL,
    PRIMARY KEY (tenant, function)
);
CREATE OR REPLACE FUNCTION hearth_log_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO log_usage (tenant, function, bytes)
            VALUES (NEW.tenant, NEW.function, octet_length(NEW.message))
            ON CONFLICT (tenant, function) DO UPDATE SET bytes = log_usage.bytes + excluded.bytes;
    ELSE
        UPDATE log_usage SET bytes = bytes - octet_length(OLD.message)
            WHERE tenant = OLD.tenant AND function = OLD.function;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS log_usage ON logs;
CREATE TRIGGER log_usage AFTER INSERT OR DELETE ON logs
    FOR EACH ROW EXECUTE FUNCTION hearth_log_usage();
-- What the logs held before: counted once.
INSERT INTO log_usage (tenant, function, bytes)
    SELECT tenant, function, SUM(octet_length(message)) FROM logs GROUP BY tenant, function
    ON CONFLICT (tenant, function) DO NOTHING;
