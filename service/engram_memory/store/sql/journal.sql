-- name: head
-- One pass without a sort (ORDER BY ... LIMIT 1 scanned the table twice); still a scan of
-- the scope: the writer's head cache answers this in the hot path.
SELECT max(cursor), arg_max(event_hash, cursor) FROM journal_events WHERE scope_ref = ?;

-- name: by_event_id
-- By the indexed event_id alone; the caller keeps the row of its scope.
SELECT cursor, event_json, event_hash, intent_digest, scope_ref FROM journal_events
WHERE event_id = ?;

-- name: insert
INSERT INTO journal_events
    (scope_ref, cursor, event_id, operation, target_id, event_json, previous_event_hash, event_hash, intent_digest)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: scan
SELECT cursor, event_id, event_json, previous_event_hash, event_hash FROM journal_events
WHERE scope_ref = ? ORDER BY cursor;

-- name: scopes
SELECT DISTINCT scope_ref FROM journal_events ORDER BY scope_ref;

-- name: events_for
-- A target's own events, plus those of the candidate it was accepted from (or the record
-- a candidate became), so one history spans acceptance.
WITH related AS (
    SELECT ? AS id
    UNION SELECT target_id FROM journal_events
          WHERE scope_ref = ? AND operation = 'accept'
            AND json_extract_string(event_json, '$.record_id') = ?
    UNION SELECT json_extract_string(event_json, '$.record_id') FROM journal_events
          WHERE scope_ref = ? AND operation = 'accept' AND target_id = ?
)
SELECT cursor, event_json, event_hash FROM journal_events
WHERE scope_ref = ? AND target_id IN (SELECT id FROM related)
ORDER BY cursor;
