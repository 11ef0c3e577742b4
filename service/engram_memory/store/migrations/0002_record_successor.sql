-- Supersession links a historical record to the accepted_current record that replaced it,
-- so a rewind can demote that successor in the same transaction (SPEC §8).
ALTER TABLE records ADD COLUMN successor_id VARCHAR;
