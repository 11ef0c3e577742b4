-- name: audit_head
SELECT sequence, entry_hash FROM audit_entries
WHERE sequence = (SELECT max(sequence) FROM audit_entries);

-- name: journal_heads
SELECT scope_ref, max(cursor), arg_max(event_hash, cursor) FROM journal_events
GROUP BY scope_ref ORDER BY scope_ref;

-- name: insert
INSERT INTO audit_checkpoints (signed_at, audit_sequence, key_id, reason, document_json)
VALUES (?, ?, ?, ?, ?);

-- name: stored
SELECT document_json FROM audit_checkpoints ORDER BY audit_sequence, signed_at;

-- name: entry_hash_at
SELECT entry_hash FROM audit_entries WHERE sequence = ?;

-- name: last_sequence
SELECT coalesce(max(sequence), 0) FROM audit_entries;

-- name: entry_hashes_between
SELECT sequence, entry_hash FROM audit_entries WHERE sequence BETWEEN ? AND ? ORDER BY sequence;

-- name: event_hash_at
SELECT event_hash FROM journal_events WHERE scope_ref = ? AND cursor = ?;

-- name: last_cursor
SELECT coalesce(max(cursor), 0) FROM journal_events WHERE scope_ref = ?;

-- name: event_hashes_between
SELECT cursor, event_hash FROM journal_events
WHERE scope_ref = ? AND cursor BETWEEN ? AND ? ORDER BY cursor;

-- name: entry_hashes_at
SELECT sequence, entry_hash FROM audit_entries WHERE sequence IN (SELECT unnest(?::BIGINT[]));

-- name: event_hashes_at
SELECT cursor, event_hash FROM journal_events
WHERE scope_ref = ? AND cursor IN (SELECT unnest(?::BIGINT[]));

-- name: latest_by_key
-- The newest kept checkpoints of one key (start-up tries them until one verifies).
SELECT document_json FROM audit_checkpoints WHERE key_id = ?
ORDER BY audit_sequence DESC, signed_at DESC LIMIT ?;
