-- name: lifecycle_of_target
-- description: The journal history of one candidate or record, following acceptance from candidate to record (ids and digests only).
-- param: target_id text required: a candidate id or a record id
-- param: from timestamp: only events recorded at or after this instant (inclusive)
-- param: to timestamp: only events recorded before this instant (exclusive)
WITH related AS (
    SELECT $target_id AS id
    UNION
    SELECT target_id FROM journal_events
    WHERE operation = 'accept' AND json_extract_string(event_json, '$.record_id') = $target_id
    UNION
    SELECT json_extract_string(event_json, '$.record_id') FROM journal_events
    WHERE operation = 'accept' AND target_id = $target_id
)
SELECT scope_ref, cursor, event_id, operation, target_id, event_hash, previous_event_hash,
       CAST(json_extract_string(event_json, '$.recorded_at') AS TIMESTAMP) AS recorded_at
FROM journal_events
WHERE target_id IN (SELECT id FROM related)
  AND ($from IS NULL OR CAST(json_extract_string(event_json, '$.recorded_at') AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(json_extract_string(event_json, '$.recorded_at') AS TIMESTAMP) < $to)
ORDER BY scope_ref, cursor;
