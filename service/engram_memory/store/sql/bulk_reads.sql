-- Reads the bulk import makes once per batch instead of once per line (bulk/importer.py).

-- name: known_idempotency_keys
-- Which of the batch's key digests already hold a result for this caller.
SELECT key_digest FROM idempotency
WHERE scope_ref = ? AND principal_ref = ? AND list_contains(?, key_digest);

-- name: any_tombstone
SELECT count(*) FROM (SELECT 1 FROM records WHERE scope_ref = ? AND state = 'tombstoned' LIMIT 1);
