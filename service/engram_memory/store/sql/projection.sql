-- name: position
SELECT position FROM call_log_projection WHERE id = 1;

-- name: set_position
-- In the transaction that writes the records up to it (store/projection.py).
UPDATE call_log_projection SET position = ? WHERE id = 1;

-- name: claim_audit_ids
-- Acknowledged claims, projected: the in-memory guard (core/replay_guard.py) refused any
-- replay before the record was appended, and a projection must never fail on a record the
-- log already made durable, so a conflict keeps the later expiry instead of failing.
INSERT INTO used_audit_ids (audit_id, expires_at_ms)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[])
ON CONFLICT (audit_id) DO UPDATE SET expires_at_ms = greatest(expires_at_ms, excluded.expires_at_ms);
