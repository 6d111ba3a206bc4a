-- An alias may send a share of its calls to a second version: percent of
-- them to split_version, the rest to version. Each move keeps the split
-- it made and the one before, so a rollback restores both.
ALTER TABLE aliases ADD COLUMN IF NOT EXISTS split_version BIGINT;
ALTER TABLE aliases ADD COLUMN IF NOT EXISTS split_percent BIGINT;
ALTER TABLE alias_moves ADD COLUMN IF NOT EXISTS split_version BIGINT;
ALTER TABLE alias_moves ADD COLUMN IF NOT EXISTS split_percent BIGINT;
ALTER TABLE alias_moves ADD COLUMN IF NOT EXISTS previous_split_version BIGINT;
ALTER TABLE alias_moves ADD COLUMN IF NOT EXISTS previous_split_percent BIGINT;
