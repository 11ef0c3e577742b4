-- Auditor export (store/export.py). The export_* statements are wrapped in COPY (...) TO, so
-- they end without a semicolon. The exported tables keep every column and its type, except
-- the Instants the store keeps as text: those are exported as TIMESTAMP (UTC, millisecond
-- precision), and an empty `first_at` / `last_at` (an entry that is no refusal summary) as
-- NULL. `SELECT * REPLACE` keeps the column order and carries any column a later migration
-- adds.

-- name: audit_head
SELECT sequence, entry_hash FROM audit_entries ORDER BY sequence DESC LIMIT 1;

-- name: journal_heads
SELECT scope_ref, max(cursor), arg_max(event_hash, cursor) FROM journal_events GROUP BY scope_ref;

-- name: export_audit_entries
-- $1: the last sequence a previous export held (0 for everything).
SELECT * REPLACE (
    CAST(recorded_at AS TIMESTAMP) AS recorded_at,
    CAST(NULLIF(first_at, '') AS TIMESTAMP) AS first_at,
    CAST(NULLIF(last_at, '') AS TIMESTAMP) AS last_at
)
FROM audit_entries
WHERE sequence > $1
ORDER BY sequence

-- name: export_decision_receipts
-- The receipts of the exported entries (they share the entry's audit id).
SELECT * FROM decision_receipts
WHERE audit_id IN (SELECT audit_id FROM audit_entries WHERE sequence > $1)
ORDER BY decided_at_ms, decision_id

-- name: export_journal_events
-- $1 / $2: each scope's last cursor a previous export held (parallel lists; a scope not
-- named is exported from its first event).
SELECT journal_events.* FROM journal_events
LEFT JOIN (SELECT unnest($1::VARCHAR[]) AS scope_ref, unnest($2::UBIGINT[]) AS exported) AS previous
    USING (scope_ref)
WHERE journal_events.cursor > coalesce(previous.exported, 0)
ORDER BY journal_events.scope_ref, journal_events.cursor

-- name: audit_entry_hash
SELECT entry_hash FROM audit_entries WHERE sequence = ?;

-- name: journal_event_hash
SELECT event_hash FROM journal_events WHERE scope_ref = ? AND cursor = ?;
