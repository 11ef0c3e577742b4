-- Every refused call in one tenant: tool errors and protocol refusals (outcome 'rpc:<code>').
-- A refusal storm's summary entry stands for `occurrences` refusals (issue 9): sum that column
-- to count refusals, not rows. Parameter $tenant: the tenant id, e.g. 'acme'.
SELECT sequence, recorded_at, scope_ref, tool, outcome, principal_ref, detail, audit_id,
       occurrences, first_at, last_at
FROM audit_entries
WHERE scope_ref LIKE 'tenant:' || $tenant || '/workspace:%'
  AND outcome <> 'ok'
ORDER BY sequence;
