-- Who approved each destructive call (withdraw, forget) and every other call a host
-- confirmation released: the human approver, the confirmation's id, when it was issued and
-- answered (epoch seconds), the operation digest it was bound to, and the journal event of
-- the call carrying the same approval (NULL when the call was refused after its gate, e.g.
-- ALREADY_TERMINAL: the confirmation was spent, nothing changed).
-- Destructive calls without an approver are listed too: their confirmation was refused
-- (gate_failed) or missing (rpc:-32603), so nothing was released.
SELECT a.sequence, a.recorded_at, a.scope_ref, a.tool, a.outcome, a.approver,
       a.confirmation_jti, a.confirmation_issued_at, a.confirmation_resolved_at,
       a.confirmation_op_digest, a.target_ids_json, a.principal_ref, a.audit_id,
       j.event_id, j.event_hash
FROM audit_entries a
LEFT JOIN journal_events j
  ON j.scope_ref = a.scope_ref
 AND json_extract_string(j.event_json, '$.approval.jti') = a.confirmation_jti
WHERE a.approver IS NOT NULL
   OR a.tool IN ('engram_memory_withdraw', 'engram_memory_forget')
ORDER BY a.sequence;
