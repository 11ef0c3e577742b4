-- name: record_access
-- description: Every audited call that touched one record or the candidate it was accepted from: reads, captures, admissions, forget, operator actions.
-- param: target_id text required: a record id (mem_...) or a candidate id (candidate_...)
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- The record and its candidate are linked by the journal's accept event, so asking for either
-- lists the calls on both; `matched_id` says which id the entry named. Refused calls are
-- listed too (outcome other than 'ok'). A search names in target_ids_json every record its
-- page served or dropped (see docs/auditors/guide.md).
WITH related AS (
    SELECT $target_id AS id
    UNION
    SELECT target_id FROM journal_events
    WHERE operation = 'accept' AND json_extract_string(event_json, '$.record_id') = $target_id
    UNION
    SELECT json_extract_string(event_json, '$.record_id') FROM journal_events
    WHERE operation = 'accept' AND target_id = $target_id
),
touched AS (
    SELECT a.*, t.id AS matched_id
    FROM audit_entries a, unnest(json_extract_string(a.target_ids_json, '$[*]')) AS t(id)
    WHERE t.id IN (SELECT id FROM related)
)
SELECT sequence, CAST(recorded_at AS TIMESTAMP) AS recorded_at, tool, outcome, matched_id,
       principal_ref, agent_ref, session_ref, approver, bundle_revision, detail, audit_id
FROM touched
WHERE ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
ORDER BY sequence, matched_id;
