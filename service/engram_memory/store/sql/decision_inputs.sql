-- name: insert
-- The kept decisions of one or many entries in one statement: parallel lists unnested.
INSERT INTO decision_inputs
    (decision_id, scope_ref, policy_path, decided_at_ms, input_json, result_json)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::BIGINT[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: bound
-- Every kept decision with the digests its receipt binds (NULL: no receipt names it).
SELECT i.decision_id, i.input_json, i.result_json, r.input_digest, r.result_digest,
       i.policy_path = r.policy_path AND i.decided_at_ms = r.decided_at_ms
           AND i.scope_ref = r.scope_ref
FROM decision_inputs i LEFT JOIN decision_receipts r USING (decision_id)
ORDER BY i.decision_id;

-- name: count_before
SELECT count(*) FROM decision_inputs WHERE decided_at_ms < ?;

-- name: prune
DELETE FROM decision_inputs WHERE decided_at_ms < ?;

-- name: count_window
SELECT count(*) FROM decision_receipts WHERE decided_at_ms >= ? AND decided_at_ms < ?;

-- name: replayable
-- The receipts decided in [from, to), with their kept input and result (NULL: pruned or
-- never kept), oldest first.
SELECT r.decision_id, r.audit_id, r.scope_ref, r.policy_path, r.decided_at_ms,
       r.bundle_revision, i.input_json, i.result_json
FROM decision_receipts r LEFT JOIN decision_inputs i USING (decision_id)
WHERE r.decided_at_ms >= ? AND r.decided_at_ms < ?
ORDER BY r.decided_at_ms, r.decision_id;
