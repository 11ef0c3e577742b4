-- The journal history of one candidate or record, following acceptance from candidate to
-- record (ids and digests only; no content is ever journaled).
-- Parameter $target_id: a candidate_id or a record_id.
WITH related AS (
    SELECT $target_id AS id
    UNION
    SELECT target_id FROM journal_events
    WHERE operation = 'accept' AND json_extract_string(event_json, '$.record_id') = $target_id
    UNION
    SELECT json_extract_string(event_json, '$.record_id') FROM journal_events
    WHERE operation = 'accept' AND target_id = $target_id
)
SELECT scope_ref, cursor, event_id, operation, event_hash, previous_event_hash,
       json_extract_string(event_json, '$.recorded_at') AS recorded_at
FROM journal_events
WHERE target_id IN (SELECT id FROM related)
ORDER BY scope_ref, cursor;
