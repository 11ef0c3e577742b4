-- name: who_approved_destructive_calls
-- description: Who approved each forget and withdraw (and every other call a host confirmation released): approver, confirmation id, issue and answer times, journal event.
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- `confirmation_issued_at` / `confirmation_resolved_at` are epoch seconds (when the host issued
-- the confirmation and when the human answered). `event_id` is the journal event of the call
-- carrying the same approval: NULL when the call was refused after its gate (e.g.
-- ALREADY_TERMINAL: the confirmation was spent, nothing changed). Destructive calls without an
-- approver are listed too: their confirmation was refused (gate_failed) or missing
-- (rpc:-32603), so nothing was released.
SELECT a.sequence, CAST(a.recorded_at AS TIMESTAMP) AS recorded_at, a.scope_ref, a.tool,
       a.outcome, a.approver, a.confirmation_jti, a.confirmation_issued_at,
       a.confirmation_resolved_at, a.confirmation_op_digest, a.target_ids_json, a.principal_ref,
       a.audit_id, j.event_id, j.event_hash
FROM audit_entries a
LEFT JOIN journal_events j
  ON j.scope_ref = a.scope_ref
 AND json_extract_string(j.event_json, '$.approval.jti') = a.confirmation_jti
WHERE (a.approver IS NOT NULL OR a.tool IN ('engram_memory_withdraw', 'engram_memory_forget'))
  AND ($from IS NULL OR CAST(a.recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(a.recorded_at AS TIMESTAMP) < $to)
ORDER BY a.sequence;
