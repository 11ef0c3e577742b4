-- name: unconfirmed_mutations
-- description: Agent calls that changed (or could have changed) memory without a human confirmation: successful captures, admissions, withdrawals and forgets with no approver.
-- param: tenant text: only this tenant (default: every tenant)
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- Withdraw and forget always need a confirmation, so a row for them would be a defect; capture
-- and admission need one only when policy says so. `replay` is true when the same principal
-- already used the same idempotency key for this tool in this scope (the call returned the
-- first result and changed nothing). Operator commands (`admin:*`) are a human's own acts
-- and are not listed.
SELECT sequence, CAST(recorded_at AS TIMESTAMP) AS recorded_at, scope_ref, tool, principal_ref,
       agent_ref, session_ref, target_ids_json, idempotency_key_digest, detail,
       count(*) OVER (PARTITION BY scope_ref, principal_ref, tool, idempotency_key_digest
                      ORDER BY sequence ROWS UNBOUNDED PRECEDING) > 1 AS replay,
       bundle_revision, audit_id
FROM audit_entries
WHERE tool IN ('engram_memory_capture', 'engram_memory_request_admission',
               'engram_memory_withdraw', 'engram_memory_forget')
  AND outcome = 'ok'
  AND approver IS NULL
  AND ($tenant IS NULL OR starts_with(scope_ref, 'tenant:' || $tenant || '/workspace:'))
QUALIFY ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
    AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
ORDER BY sequence;
