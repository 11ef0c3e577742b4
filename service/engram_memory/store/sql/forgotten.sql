-- name: key_record
-- A forgotten record keeps only keyed forms of its content digests (core/forgotten.py).
UPDATE records SET payload_digest = ?, guard_digest = ?, record_digest = ?
WHERE scope_ref = ? AND record_id = ?;

-- name: tombstone_record_keyed
-- The forget's one statement on the record: tombstoned, its body dropped, only keyed forms of
-- its content digests kept.
UPDATE records SET state = 'tombstoned', sealed_body = NULL, updated_at_ms = ?,
    payload_digest = ?, guard_digest = ?, record_digest = ?
WHERE scope_ref = ? AND record_id = ?;

-- name: key_candidate
UPDATE candidates SET payload_digest = ?, guard_digest = ?, record_digest = ?
WHERE scope_ref = ? AND candidate_id = ?;

-- name: plain_forgotten_records
-- Tombstoned records still holding a plain digest: stores written before issue 9 item 7.
SELECT scope_ref, record_id, payload_digest, guard_digest, record_digest FROM records
WHERE state = 'tombstoned'
  AND (payload_digest LIKE 'sha256:%' OR guard_digest LIKE 'sha256:%' OR record_digest LIKE 'sha256:%');

-- name: plain_forgotten_candidates
-- Withdrawn candidates, and the candidates forgotten records were promoted from, still
-- holding a plain digest.
SELECT c.scope_ref, c.candidate_id, c.payload_digest, c.guard_digest, c.record_digest
FROM candidates c
WHERE (c.state = 'withdrawn'
       OR EXISTS (SELECT 1 FROM records r
                  WHERE r.scope_ref = c.scope_ref AND r.record_id = c.record_id
                    AND r.state = 'tombstoned'))
  AND (c.payload_digest LIKE 'sha256:%' OR c.guard_digest LIKE 'sha256:%'
       OR c.record_digest LIKE 'sha256:%');

-- name: drop_kept_inputs
-- Decision inputs kept for policy replay (migration 0010) that name one of a forgotten item's
-- plain content digests: dropped with the forget, as retention would later (their receipts,
-- which the chain binds, stay; a replay reports them as pruned).
DELETE FROM decision_inputs
WHERE scope_ref = ?
  AND (contains(input_json, ?) OR contains(input_json, ?) OR contains(input_json, ?));
