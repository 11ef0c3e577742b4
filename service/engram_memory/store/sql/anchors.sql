-- Comparing the head anchor with the store (store/anchors.py).

-- name: audit_hash_at
SELECT entry_hash FROM audit_entries WHERE sequence = ?;

-- name: event_hash_at
SELECT event_hash FROM journal_events WHERE scope_ref = ? AND cursor = ?;

-- name: marker
SELECT count(*) FROM head_anchor_marker;

-- name: mark
INSERT INTO head_anchor_marker VALUES (?);
