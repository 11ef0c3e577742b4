-- Every refused call in one tenant: tool errors and protocol refusals (outcome 'rpc:<code>').
-- Parameter $tenant: the tenant id, e.g. 'acme'.
SELECT sequence, recorded_at, scope_ref, tool, outcome, principal_ref, detail, audit_id
FROM audit_entries
WHERE scope_ref LIKE 'tenant:' || $tenant || '/workspace:%'
  AND outcome <> 'ok'
ORDER BY sequence;
