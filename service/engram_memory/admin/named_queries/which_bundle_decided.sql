-- name: which_bundle_decided
-- description: Which bundle (content digest and revision) decided each policy question of one call, and why.
-- param: audit_id text required: the audit id of the call (the host's, echoed as auditId)
-- param: from timestamp: only decisions made at or after this instant (inclusive)
-- param: to timestamp: only decisions made before this instant (exclusive)
SELECT r.policy_path, r.bundle_revision, r.bundle_digest, r.engine_id, r.reasons_json,
       r.input_digest, r.result_digest, r.receipt_digest, a.tool, a.outcome,
       epoch_ms(r.decided_at_ms) AS decided_at
FROM decision_receipts r JOIN audit_entries a USING (audit_id)
WHERE r.audit_id = $audit_id
  AND ($from IS NULL OR epoch_ms(r.decided_at_ms) >= $from)
  AND ($to IS NULL OR epoch_ms(r.decided_at_ms) < $to)
ORDER BY r.decided_at_ms, r.policy_path;
