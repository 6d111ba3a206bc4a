-- Each log line names the trace it was written in.
ALTER TABLE logs ADD COLUMN IF NOT EXISTS trace_id TEXT;
