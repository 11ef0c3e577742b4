-- name: admissions_held
-- description: Admissions the policy held for a human's adjudication, and how each was resolved (accept, reject, withdraw, or still pending).
-- param: from timestamp: only admissions held at or after this instant (inclusive)
-- param: to timestamp: only admissions held before this instant (exclusive)
-- A held admission is an `engram_memory_request_admission` entry with outcome 'ok' and
-- detail 'held for adjudication' (the candidate stays pending, nothing is journaled). Its
-- resolution is the candidate's journal event `admission:<candidate_id>` (accept or reject,
-- by an operator's `admin adjudicate` or a later admission) or `withdraw:<candidate_id>`.
-- `resolved_by` is the hashed principal who decided (an operator's `adjudicated_by`; the
-- agent's for a withdraw), `approver` the human whose confirmation released it (if one did),
-- `resolving_sequence` the audit entry of that call. Resolution columns are NULL while the
-- candidate is pending. Holds recorded before this note existed (issue 10) carry no detail
-- and are not listed; `lifecycle_of_target` still shows how their candidates ended.
WITH held AS (
    SELECT sequence, recorded_at, scope_ref, principal_ref, audit_id,
           json_extract_string(target_ids_json, '$[0]') AS candidate_id
    FROM audit_entries
    WHERE tool = 'engram_memory_request_admission' AND outcome = 'ok'
      AND detail = 'held for adjudication'
),
resolved AS (
    SELECT scope_ref, target_id AS candidate_id, operation, event_id,
           json_extract_string(event_json, '$.recorded_at') AS resolved_at,
           coalesce(json_extract_string(event_json, '$.adjudicated_by'),
                    json_extract_string(event_json, '$.principal_ref')) AS resolved_by,
           json_extract_string(event_json, '$.approval.approver') AS approver,
           json_extract_string(event_json, '$.record_id') AS record_id
    FROM journal_events
    WHERE event_id = 'admission:' || target_id OR event_id = 'withdraw:' || target_id
)
SELECT h.sequence AS held_sequence, CAST(h.recorded_at AS TIMESTAMP) AS held_at, h.scope_ref,
       h.candidate_id, h.principal_ref AS requested_by, h.audit_id,
       coalesce(r.operation, 'pending') AS resolution,
       CAST(r.resolved_at AS TIMESTAMP) AS resolved_at, r.resolved_by, r.approver,
       r.record_id,
       (SELECT min(a.sequence) FROM audit_entries a
        WHERE r.event_id IS NOT NULL AND a.scope_ref = h.scope_ref AND a.outcome = 'ok'
          AND a.recorded_at = r.resolved_at
          AND list_contains(json_extract_string(a.target_ids_json, '$[*]'), h.candidate_id)
       ) AS resolving_sequence
FROM held h
LEFT JOIN resolved r ON r.scope_ref = h.scope_ref AND r.candidate_id = h.candidate_id
WHERE ($from IS NULL OR CAST(h.recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(h.recorded_at AS TIMESTAMP) < $to)
ORDER BY h.sequence;
