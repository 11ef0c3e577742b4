-- The chain heads the writer keeps in memory (store/heads.py), read once when the store opens.

-- name: audit_head
SELECT sequence, entry_hash FROM audit_entries ORDER BY sequence DESC LIMIT 1;

-- name: journal_heads
SELECT scope_ref, max(cursor), arg_max(event_hash, cursor) FROM journal_events GROUP BY scope_ref;
