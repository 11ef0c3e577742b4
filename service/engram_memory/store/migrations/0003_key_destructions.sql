-- Crash-safe key lifecycle (issue 7): every key destruction a commit promises is recorded here
-- in that same transaction and cleared once the key file is gone, so a crash between COMMIT
-- and the destruction leaves a durable promise that the next start (or a replay) keeps.
CREATE TABLE key_destructions (
    scope_ref           VARCHAR NOT NULL,
    item_id             VARCHAR NOT NULL,       -- candidate_id or record_id whose key must go
    operation           VARCHAR NOT NULL,       -- the transition that ended the content
    promised_at_ms      BIGINT NOT NULL,
    PRIMARY KEY (scope_ref, item_id)
);

-- A promoted candidate must leave no second way to open its content: its sealed body is
-- cleared when the record takes over (and when any candidate ends).
ALTER TABLE candidates ALTER COLUMN sealed_body DROP NOT NULL;

-- Stores written before this migration destroyed keys after COMMIT without a durable promise
-- and kept the bodies of ended candidates: promise every such destruction again (destroying an
-- absent key is a no-op) and clear those bodies, so the next start settles them.
UPDATE candidates SET sealed_body = NULL WHERE state <> 'pending';
INSERT INTO key_destructions
SELECT scope_ref, candidate_id, 'migration', 0 FROM candidates WHERE state <> 'pending'
UNION ALL
SELECT scope_ref, record_id, 'migration', 0 FROM records WHERE state = 'tombstoned';
