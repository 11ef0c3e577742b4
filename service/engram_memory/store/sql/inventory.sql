-- Read-only helpers for key rotation and backups (admin/rotation.py, admin/backup.py).

-- name: item_refs
SELECT scope_ref, candidate_id FROM candidates
UNION
SELECT scope_ref, record_id FROM records;

-- name: scopes
SELECT scope_ref FROM journal_events
UNION
SELECT scope_ref FROM candidates
UNION
SELECT scope_ref FROM records
ORDER BY scope_ref;

-- name: audit_head
SELECT sequence, entry_hash FROM audit_entries ORDER BY sequence DESC LIMIT 1;

-- name: journal_heads
SELECT scope_ref, max(cursor), arg_max(event_hash, cursor) FROM journal_events GROUP BY scope_ref;

-- name: live_item_refs
-- The items whose key a backup must hold: pending candidates and records with a body.
-- Promoted, rejected and withdrawn candidates and tombstoned records are left out, so a
-- key whose destruction was promised before the snapshot never travels in an archive.
-- (The same rule as `audit verify`'s key check.)
SELECT scope_ref, candidate_id FROM candidates
WHERE state = 'pending' AND sealed_body IS NOT NULL
UNION
SELECT scope_ref, record_id FROM records
WHERE state <> 'tombstoned' AND sealed_body IS NOT NULL;
