-- Durable key-destruction intents and the item rows that key files belong to
-- (store/key_intents.py). Key file names are digests of (scope, item), so every owner of a key
-- file is computed from these rows.

-- name: promise
-- All of one commit's promises in one statement (executemany costs a statement per row).
INSERT INTO key_destructions (scope_ref, item_id, operation, promised_at_ms)
SELECT ?, unnest(?::VARCHAR[]), ?, ?
ON CONFLICT DO NOTHING;

-- name: pending
SELECT scope_ref, item_id FROM key_destructions ORDER BY scope_ref, item_id;

-- name: pending_in_scope
SELECT item_id FROM key_destructions WHERE scope_ref = ? AND list_contains(?, item_id);

-- name: clear
-- Pairs as two parallel lists; a pair matches only its own scope's row.
DELETE FROM key_destructions
WHERE (scope_ref, item_id) IN (SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]));

-- name: clear_candidate_body
UPDATE candidates SET sealed_body = NULL WHERE scope_ref = ? AND candidate_id = ?;

-- name: candidate_of_record
SELECT candidate_id FROM records WHERE scope_ref = ? AND record_id = ?;

-- name: item_rows
SELECT (SELECT count(*) FROM candidates WHERE scope_ref = ? AND candidate_id = ?)
     + (SELECT count(*) FROM records WHERE scope_ref = ? AND record_id = ?);

-- name: item_keys
-- Every item that has or had a key file, and whether it still needs it: a pending candidate,
-- or a record not tombstoned that still holds a sealed body.
SELECT scope_ref, candidate_id, state = 'pending' AND sealed_body IS NOT NULL FROM candidates
UNION ALL
SELECT scope_ref, record_id, state <> 'tombstoned' AND sealed_body IS NOT NULL FROM records;
