-- The input and result of each policy decision, kept beside its receipt for policy replay
-- (store/decision_inputs.py, admin/policy_replay.py) while ENGRAM_DECISION_INPUT_RETENTION_DAYS
-- says so. Inputs hold ids, digests and classifier names, never memory content. A row is
-- bound by its receipt's `input_digest` and `result_digest` (the receipt is bound by the
-- audit chain), so `audit verify` refuses a kept row that was altered; pruning a row loses
-- only the replay of that decision, never the chain's verifiability.
CREATE TABLE decision_inputs (
    decision_id         VARCHAR PRIMARY KEY,    -- the receipt's decision_id
    scope_ref           VARCHAR NOT NULL,
    policy_path         VARCHAR NOT NULL,
    decided_at_ms       BIGINT NOT NULL,
    input_json          VARCHAR NOT NULL,       -- RFC 8785 JSON of the normalized input
    result_json         VARCHAR NOT NULL        -- RFC 8785 JSON of the normalized result
);
CREATE INDEX decision_inputs_decided ON decision_inputs (decided_at_ms);
