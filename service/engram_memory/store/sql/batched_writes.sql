-- Statements of the batched import writes (store/batched_writes.py).

-- name: insert_candidates
-- A candidate in its final form: an import batch may already have ended it (its state and
-- cleared body are then written at once, never updated).
INSERT INTO candidates
    (scope_ref, candidate_id, state, principal_ref, payload_digest, guard_digest, record_digest,
     record_id, capture_cursor, sealed_body, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: stored_candidate_ids
-- Which of these candidate ids any scope already holds (checked once per batch).
SELECT DISTINCT candidate_id FROM candidates WHERE candidate_id IN (SELECT unnest(?));
