-- Which bundle (content digest AND revision) decided each policy question of one call, and why.
-- Parameter $audit_id: the host audit id echoed as `auditId` in the envelope.
SELECT r.policy_path, r.bundle_revision, r.bundle_digest, r.engine_id, r.reasons_json,
       r.input_digest, r.result_digest, r.receipt_digest, a.tool, a.outcome
FROM decision_receipts r JOIN audit_entries a USING (audit_id)
WHERE r.audit_id = $audit_id
ORDER BY r.decided_at_ms, r.policy_path;
