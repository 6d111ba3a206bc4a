-- An alias may send a share of its calls to a second version: percent of
-- them to split_version, the rest to version. Each move keeps the split
-- it made and the one before, so a rollback restores both.
ALTER TABLE aliases ADD COLUMN split_version INTEGER;
ALTER TABLE aliases ADD COLUMN split_percent INTEGER;
ALTER TABLE alias_moves ADD COLUMN split_version INTEGER;
ALTER TABLE alias_moves ADD COLUMN split_percent INTEGER;
ALTER TABLE alias_moves ADD COLUMN previous_split_version INTEGER;
ALTER TABLE alias_moves ADD COLUMN previous_split_percent INTEGER;
