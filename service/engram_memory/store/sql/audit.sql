-- name: head
-- The max comes from column statistics and the row through the primary key's index.
SELECT sequence, entry_hash FROM audit_entries
WHERE sequence = (SELECT max(sequence) FROM audit_entries);

-- name: insert_one
-- One entry (a call's own transaction): a VALUES row costs half of the unnested form below.
INSERT INTO audit_entries
    (sequence, recorded_at, audit_id, scope_ref, principal_ref, agent_ref, session_ref, tool, outcome,
     target_ids_json, receipt_digests_json, bundle_digest, bundle_revision, idempotency_key_digest,
     detail, previous_hash, entry_hash, transport, peer, reason, token_digest, occurrences, first_at,
     last_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_one_approved
-- One entry that spent a confirmation (migration 0007's columns in the same row): one
-- statement instead of an insert and an update.
INSERT INTO audit_entries
    (sequence, recorded_at, audit_id, scope_ref, principal_ref, agent_ref, session_ref, tool, outcome,
     target_ids_json, receipt_digests_json, bundle_digest, bundle_revision, idempotency_key_digest,
     detail, previous_hash, entry_hash, transport, peer, reason, token_digest, occurrences, first_at,
     last_at, approver, confirmation_jti, confirmation_issued_at, confirmation_resolved_at,
     confirmation_op_digest)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert
INSERT INTO audit_entries
    (sequence, recorded_at, audit_id, scope_ref, principal_ref, agent_ref, session_ref, tool, outcome,
     target_ids_json, receipt_digests_json, bundle_digest, bundle_revision, idempotency_key_digest,
     detail, previous_hash, entry_hash, transport, peer, reason, token_digest, occurrences, first_at,
     last_at)
-- One or many entries (a group commit) in one statement: column-wise lists unnested row-wise.
SELECT unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::UBIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]);

-- name: scan
SELECT sequence, recorded_at, audit_id, scope_ref, principal_ref, agent_ref, session_ref, tool, outcome,
       target_ids_json, receipt_digests_json, bundle_digest, bundle_revision, idempotency_key_digest,
       detail, previous_hash, entry_hash, transport, peer, reason, token_digest, occurrences, first_at,
       last_at
FROM audit_entries WHERE sequence > ? ORDER BY sequence;

-- name: insert_receipts
-- All receipts of one or many entries in one statement: parallel lists unnested row-wise.
INSERT INTO decision_receipts
    (decision_id, audit_id, scope_ref, policy_path, input_digest, result_digest, bundle_revision,
     bundle_digest, engine_id, engine_version, reasons_json, decided_at_ms, receipt_digest)
SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::VARCHAR[]);

-- name: scan_receipts
SELECT decision_id, audit_id, scope_ref, policy_path, input_digest, result_digest, bundle_revision,
       bundle_digest, engine_id, engine_version, reasons_json, decided_at_ms, receipt_digest
FROM decision_receipts ORDER BY decided_at_ms, decision_id;

-- name: set_approval
-- The confirmation that released a call's gate (migration 0007), on the entry just appended.
UPDATE audit_entries
SET approver = ?, confirmation_jti = ?, confirmation_issued_at = ?, confirmation_resolved_at = ?,
    confirmation_op_digest = ?
WHERE sequence = ?;

-- name: scan_approvals
SELECT sequence, approver, confirmation_jti, confirmation_issued_at, confirmation_resolved_at,
       confirmation_op_digest
FROM audit_entries
WHERE sequence > ?
  AND (approver IS NOT NULL OR confirmation_jti IS NOT NULL OR confirmation_issued_at IS NOT NULL
       OR confirmation_resolved_at IS NOT NULL OR confirmation_op_digest IS NOT NULL)
ORDER BY sequence;

-- name: claim_audit_ids
-- The primary key refuses an id still kept: the entry's transaction fails (store/audit.py).
INSERT INTO used_audit_ids (audit_id, expires_at_ms)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]);

-- name: used_audit_ids
SELECT audit_id, expires_at_ms FROM used_audit_ids WHERE expires_at_ms > ?;

-- name: prune_used_audit_ids
DELETE FROM used_audit_ids WHERE expires_at_ms <= ?;
