-- Each log line names the trace it was written in.
ALTER TABLE logs ADD COLUMN trace_id TEXT;
