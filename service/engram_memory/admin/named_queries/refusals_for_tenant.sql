-- name: refusals_for_tenant
-- description: Every refused call in one tenant, tool errors and protocol refusals ('rpc:<code>'), in a time range.
-- param: tenant text required: the tenant id, e.g. acme
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- A refusal storm's summary entry (detail 'counted refusals') stands for `occurrences`
-- refusals between first_at and last_at: sum that column to count refusals, not rows.
SELECT sequence, CAST(recorded_at AS TIMESTAMP) AS recorded_at, scope_ref, tool, outcome,
       principal_ref, detail, audit_id, occurrences,
       TRY_CAST(first_at AS TIMESTAMP) AS first_at, TRY_CAST(last_at AS TIMESTAMP) AS last_at
FROM audit_entries
WHERE starts_with(scope_ref, 'tenant:' || $tenant || '/workspace:')
  AND outcome <> 'ok'
  AND ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
ORDER BY sequence;
