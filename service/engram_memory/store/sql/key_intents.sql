-- Durable key-destruction intents and the item rows that key files belong to
-- (store/key_intents.py). Key file names are digests of (scope, item), so every owner of a key
-- file is computed from these rows.

-- name: promise
-- One row per promised item, as a multi-row VALUES list (`key_intents.promise` repeats the row
-- placeholder). No ON CONFLICT: it triples the statement's cost, and callers promise only
-- items without a promise (an item's content ends once; `source_of_record` tells whether the
-- source candidate's promise is still pending).
INSERT INTO key_destructions (scope_ref, item_id, operation, promised_at_ms) VALUES

-- name: pending
SELECT scope_ref, item_id FROM key_destructions ORDER BY scope_ref, item_id;

-- name: pending_in_scope
SELECT item_id FROM key_destructions WHERE scope_ref = ? AND list_contains(?, item_id);

-- name: clear
-- The items of one scope whose key files are gone.
DELETE FROM key_destructions WHERE scope_ref = ? AND list_contains(?, item_id);

-- name: end_candidate
-- A candidate's content ends (admitted, rejected, withdrawn): its new state and its sealed
-- body dropped, in one statement.
UPDATE candidates SET state = ?, updated_at_ms = ?, sealed_body = NULL
WHERE scope_ref = ? AND candidate_id = ?;

-- name: end_candidate_keyed
-- A withdrawn candidate: as above, and only keyed forms of its digests kept (core/forgotten.py).
UPDATE candidates SET state = ?, updated_at_ms = ?, sealed_body = NULL,
    payload_digest = ?, guard_digest = ?, record_digest = ?
WHERE scope_ref = ? AND candidate_id = ?;

-- name: source_of_record
-- The record's source candidate, and whether its key's destruction is still promised.
SELECT r.candidate_id,
       EXISTS (SELECT 1 FROM key_destructions d
               WHERE d.scope_ref = r.scope_ref AND d.item_id = r.candidate_id)
FROM records r WHERE r.scope_ref = ? AND r.record_id = ?;

-- name: item_rows
SELECT (SELECT count(*) FROM candidates WHERE scope_ref = ? AND candidate_id = ?)
     + (SELECT count(*) FROM records WHERE scope_ref = ? AND record_id = ?);

-- name: item_keys
-- Every item that has or had a key file, and whether it still needs it: a pending candidate,
-- or a record not tombstoned that still holds a sealed body.
SELECT scope_ref, candidate_id, state = 'pending' AND sealed_body IS NOT NULL FROM candidates
UNION ALL
SELECT scope_ref, record_id, state <> 'tombstoned' AND sealed_body IS NOT NULL FROM records;

-- name: item_key_names
-- `item_keys` as the names of their key files (crypto/keystore.py `file_name`: SHA-256 of
-- scope, NUL, item id, in hex, then `.key`), computed here: 200k names made in Python took
-- a second of every start at 100k records.
SELECT sha256(scope_ref || chr(0) || candidate_id) || '.key' AS name,
       state = 'pending' AND sealed_body IS NOT NULL AS live
FROM candidates
UNION ALL
SELECT sha256(scope_ref || chr(0) || record_id) || '.key',
       state <> 'tombstoned' AND sealed_body IS NOT NULL
FROM records;
